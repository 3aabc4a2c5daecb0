// One line of records.jsonl: one prompt under one setting in one repetition. Spec-Bench's per-prompt
// fields (new_tokens, wall_time, accept_lengths) plus the counters the summary and plots need.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "harness/generation/generation_metrics.h"
#include "verify/sampling_params.h"

namespace specula {

struct RunRecord {
  std::string setting_id;
  std::string baseline_id;
  std::map<std::string, std::string> setting;
  bool baseline = false;
  int prompt_index = 0;
  int repetition = 0;
  std::vector<Token> tokens;  // the generated continuation
  std::vector<int32_t> accept_lengths;
  GenerationMetrics metrics;  // this prompt's counters and times (wall_seconds = wall_time)

  std::string to_json_line() const;
  static RunRecord from_json_line(const std::string& line, const std::string& where);
};

std::vector<RunRecord> read_records(const std::string& path);

}  // namespace specula
