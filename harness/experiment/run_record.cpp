#include "harness/experiment/run_record.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "harness/io/input_file.h"
#include "kernels/shared/bounded_json.h"
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
  j["accept_lengths"] = accept_lengths;
  m.write_json(j);  // the metrics' one JSON shape (generation_metrics.h), as `generate --metrics-json` writes it
  j["tokens"] = tokens;
  j["stop_reason"] = stop_reason;
  j["device"] = device;
  if (lockstep) j["lockstep"] = true;
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
    const nlohmann::json j = parse_bounded_json(line);
    GenerationMetrics& m = r.metrics;
    r.setting_id = j.at("setting_id");
    r.baseline_id = j.at("baseline_id");
    r.setting = j.at("setting").get<std::map<std::string, std::string>>();
    r.baseline = j.at("baseline");
    r.prompt_index = j.at("prompt_index");
    r.repetition = j.at("repetition");
    for (const nlohmann::json& t : j.at("tokens")) {  // read whole: get<int32_t> would wrap 2^32 + 5 into 5
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        fail(where, ": token ", t.dump(), " is not a token id");
      r.tokens.push_back(static_cast<Token>(t.get<int64_t>()));
    }
    r.stop_reason = j.value("stop_reason", std::string("length"));
    r.device = j.value("device", std::string("cpu"));  // absent in records written before devices
    r.lockstep = j.value("lockstep", false);
    r.accept_lengths = j.at("accept_lengths").get<std::vector<int32_t>>();
    m = GenerationMetrics::read_json(j);  // older records: no sequences / stopped_sequences, times as *_time
    if (const std::string problem = m.consistency_problem(); !problem.empty())
      fail(where, ": impossible record: ", problem);
    m.sequences = 1;
    m.stopped = r.stop_reason == "stop" ? 1 : 0;
    if (j.contains("pair")) {  // absent in unpaired runs and older records
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
  std::ifstream in = open_input_file(path, "records file");
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
