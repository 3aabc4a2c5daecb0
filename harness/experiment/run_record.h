// One line of records.jsonl: one prompt under one setting in one repetition. Spec-Bench's per-prompt fields
// (new_tokens, accept_lengths, the wall time as wall_seconds) plus the counters the summary and plots need, in the
// metrics' one JSON shape (GenerationMetrics::write_json, as `generate --metrics-json`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/generation/generation_metrics.h"
#include "verify/sampling/sampling_params.h"

namespace specula {

// The baseline generation of the same prompt run right beside a speculative one (before or after it, the order
// alternating), so that drift in the machine's load lands in both arms of the ratio alike.
struct PairedBaseline {
  bool present = false;
  int64_t new_tokens = 0;
  double wall_seconds = 0, prompt_seconds = 0;
  bool baseline_first = false;
  double load_before = 0, load_after = 0;  // 1-minute load average around the pair (/proc/loadavg)
};

struct RunRecord {
  std::string setting_id;
  std::string baseline_id;
  std::map<std::string, std::string> setting;
  bool baseline = false;
  int prompt_index = 0;
  int repetition = 0;
  std::vector<Token> tokens;           // the generated continuation (up to and including a stop token)
  std::string stop_reason = "length";  // "stop" (emitted a stop token) | "length" (reached max_new_tokens)
  std::vector<int32_t> accept_lengths;
  std::string device = "cpu";  // where the target rows were sampled and verified (cpu | cuda | cuda-host)
  // Decoded in lockstep with the repetition's other prompts ("lockstep": true in JSON, absent otherwise): its times
  // are the batch's (each phase's wall time, shared with the batch), so its pair's ratio is the batch's.
  bool lockstep = false;
  GenerationMetrics metrics;  // this prompt's counters and times
  PairedBaseline pair;        // speculative records of a paired run ("pair" in JSON)

  std::string to_json_line() const;
  static RunRecord from_json_line(const std::string& line, const std::string& where);
};

// The records of a records.jsonl; with skip_partial_last_line, a last line without its '\n' (a process
// killed in the middle of a write) is left out instead of being an error.
std::vector<RunRecord> read_records(const std::string& path, bool skip_partial_last_line = false);

}  // namespace specula
