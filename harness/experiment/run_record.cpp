#include "harness/experiment/run_record.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/shared/error.h"

namespace specula {
namespace {

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

}  // namespace

std::string RunRecord::to_json_line() const {
  const GenerationMetrics& m = metrics;
  nlohmann::json j;
  j["setting_id"] = setting_id;
  j["baseline_id"] = baseline_id;
  j["setting"] = setting;
  j["baseline"] = baseline;
  j["prompt_index"] = prompt_index;
  j["repetition"] = repetition;
  j["new_tokens"] = m.new_tokens;
  j["wall_time"] = m.wall_seconds;
  j["accept_lengths"] = accept_lengths;
  j["per_position_acceptance"] = m.per_position_acceptance();
  j["position_reached"] = m.position_reached;
  j["position_accepted"] = m.position_accepted;
  j["accepted_length_histogram"] = m.accepted_histogram;
  j["steps"] = m.steps;
  j["target_calls"] = m.target_calls;
  j["draft_calls"] = m.draft_calls;
  j["proposed_tokens"] = m.proposed;
  j["accepted_tokens"] = m.accepted;
  j["emitted_tokens"] = m.emitted;
  j["expected_acceptance_sum"] = m.expected_acceptance_sum;
  j["expected_acceptance_count"] = m.expected_acceptance_count;
  j["q_zero_errors"] = m.q_zero_errors;
  j["draft_time"] = m.draft_seconds;
  j["target_time"] = m.target_seconds;
  j["verify_time"] = m.verify_seconds;
  j["prompt_time"] = m.prompt_seconds;
  j["tokens"] = tokens;
  j["stop_reason"] = stop_reason;
  j["device"] = device;
  if (pair.present)
    j["pair"] = {{"baseline_new_tokens", pair.new_tokens},
                 {"baseline_wall_time", pair.wall_seconds},
                 {"baseline_prompt_time", pair.prompt_seconds},
                 {"order", pair.baseline_first ? "baseline-first" : "speculative-first"},
                 {"load_before", number_or_null(pair.load_before)},
                 {"load_after", number_or_null(pair.load_after)}};
  return j.dump();
}

RunRecord RunRecord::from_json_line(const std::string& line, const std::string& where) {
  RunRecord r;
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    GenerationMetrics& m = r.metrics;
    r.setting_id = j.at("setting_id");
    r.baseline_id = j.at("baseline_id");
    r.setting = j.at("setting").get<std::map<std::string, std::string>>();
    r.baseline = j.at("baseline");
    r.prompt_index = j.at("prompt_index");
    r.repetition = j.at("repetition");
    r.tokens = j.at("tokens").get<std::vector<Token>>();
    r.stop_reason = j.value("stop_reason", std::string("length"));
    r.device = j.value("device", std::string("cpu"));  // absent in records written before devices
    m.stopped = r.stop_reason == "stop" ? 1 : 0;
    r.accept_lengths = j.at("accept_lengths").get<std::vector<int32_t>>();
    m.sequences = 1;
    m.new_tokens = j.at("new_tokens");
    m.wall_seconds = j.at("wall_time");
    m.position_reached = j.at("position_reached").get<std::vector<int64_t>>();
    m.position_accepted = j.at("position_accepted").get<std::vector<int64_t>>();
    m.accepted_histogram = j.at("accepted_length_histogram").get<std::vector<int64_t>>();
    m.steps = j.at("steps");
    m.target_calls = j.at("target_calls");
    m.draft_calls = j.at("draft_calls");
    m.proposed = j.at("proposed_tokens");
    m.accepted = j.at("accepted_tokens");
    m.emitted = j.at("emitted_tokens");
    m.expected_acceptance_sum = j.at("expected_acceptance_sum");
    m.expected_acceptance_count = j.at("expected_acceptance_count");
    m.q_zero_errors = j.at("q_zero_errors");
    m.draft_seconds = j.at("draft_time");
    m.target_seconds = j.at("target_time");
    m.verify_seconds = j.at("verify_time");
    m.prompt_seconds = j.value("prompt_time", 0.0);  // absent in records written before it was measured
    if (j.contains("pair")) {                        // absent in unpaired runs and older records
      const nlohmann::json& p = j.at("pair");
      r.pair.present = true;
      r.pair.new_tokens = p.at("baseline_new_tokens");
      r.pair.wall_seconds = p.at("baseline_wall_time");
      r.pair.prompt_seconds = p.at("baseline_prompt_time");
      const std::string order = p.at("order");
      if (order != "baseline-first" && order != "speculative-first") fail(where, ": pair.order '", order, "'");
      r.pair.baseline_first = order == "baseline-first";
      r.pair.load_before = p.at("load_before").is_null() ? NAN : p.at("load_before").get<double>();
      r.pair.load_after = p.at("load_after").is_null() ? NAN : p.at("load_after").get<double>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": malformed record: ", e.what());
  }
  return r;
}

std::vector<RunRecord> read_records(const std::string& path, bool skip_partial_last_line) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open records file");
  std::vector<RunRecord> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (skip_partial_last_line && in.eof()) break;  // no '\n' after it: a write cut short
    if (!line.empty()) out.push_back(RunRecord::from_json_line(line, path + ":" + std::to_string(n)));
  }
  return out;
}

}  // namespace specula
