#include "harness/generation/generation_metrics.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace specula {

void GenerationMetrics::resize(int32_t positions) {
  position_reached.resize(std::max<size_t>(position_reached.size(), positions));
  position_accepted.resize(std::max<size_t>(position_accepted.size(), positions));
  accepted_histogram.resize(std::max<size_t>(accepted_histogram.size(), positions + 1));
}

void GenerationMetrics::merge(const GenerationMetrics& o) {
  sequences += o.sequences;
  stopped += o.stopped;
  new_tokens += o.new_tokens;
  steps += o.steps;
  target_calls += o.target_calls;
  draft_calls += o.draft_calls;
  proposed += o.proposed;
  accepted += o.accepted;
  emitted += o.emitted;
  q_zero_errors += o.q_zero_errors;
  // Sized by each of the other's arrays, not by one for all: a record read from a file is checked
  // (consistency_problem), but a merge must not write past an array whatever it is given.
  resize(static_cast<int32_t>(std::max(o.position_reached.size(), o.position_accepted.size())));
  accepted_histogram.resize(std::max(accepted_histogram.size(), o.accepted_histogram.size()));
  for (size_t i = 0; i < o.position_reached.size(); ++i) position_reached[i] += o.position_reached[i];
  for (size_t i = 0; i < o.position_accepted.size(); ++i) position_accepted[i] += o.position_accepted[i];
  for (size_t i = 0; i < o.accepted_histogram.size(); ++i) accepted_histogram[i] += o.accepted_histogram[i];
  verify_rows_histogram.resize(std::max(verify_rows_histogram.size(), o.verify_rows_histogram.size()));
  for (size_t i = 0; i < o.verify_rows_histogram.size(); ++i) verify_rows_histogram[i] += o.verify_rows_histogram[i];
  lockstep_rows_histogram.resize(std::max(lockstep_rows_histogram.size(), o.lockstep_rows_histogram.size()));
  for (size_t i = 0; i < o.lockstep_rows_histogram.size(); ++i)
    lockstep_rows_histogram[i] += o.lockstep_rows_histogram[i];
  device_waits += o.device_waits;
  staging_waits += o.staging_waits;
  growth_waits += o.growth_waits;
  device_buffer_bytes = std::max(device_buffer_bytes, o.device_buffer_bytes);
  step_graph_runs += o.step_graph_runs;
  step_graph_replays += o.step_graph_replays;
  step_graphs_built += o.step_graphs_built;
  step_graphs_evicted += o.step_graphs_evicted;
  expected_acceptance_sum += o.expected_acceptance_sum;
  expected_acceptance_count += o.expected_acceptance_count;
  draft_seconds += o.draft_seconds;
  target_seconds += o.target_seconds;
  verify_seconds += o.verify_seconds;
  prompt_seconds += o.prompt_seconds;
}

std::vector<double> GenerationMetrics::per_position_acceptance() const {
  // A position no step reached has no acceptance (NaN: JSON null, an empty entry in summary.csv), not 0, which would
  // read as every draft there rejected.
  std::vector<double> out(position_reached.size(), std::numeric_limits<double>::quiet_NaN());
  for (size_t i = 0; i < out.size(); ++i)
    if (position_reached[i]) out[i] = static_cast<double>(position_accepted[i]) / position_reached[i];
  return out;
}

void GenerationMetrics::write_json(nlohmann::json& j) const {
  j["sequences"] = sequences;
  j["stopped_sequences"] = stopped;
  j["new_tokens"] = new_tokens;
  j["steps"] = steps;
  j["target_calls"] = target_calls;
  j["draft_calls"] = draft_calls;
  j["proposed_tokens"] = proposed;
  j["accepted_tokens"] = accepted;
  j["emitted_tokens"] = emitted;
  j["q_zero_errors"] = q_zero_errors;
  j["acceptance_rate"] = acceptance_rate();
  j["mean_accepted_length"] = mean_accepted_length();
  j["per_position_acceptance"] = per_position_acceptance();
  j["position_reached"] = position_reached;
  j["position_accepted"] = position_accepted;
  j["accepted_length_histogram"] = accepted_histogram;
  j["verify_rows_histogram"] = verify_rows_histogram;
  j["lockstep_rows_histogram"] = lockstep_rows_histogram;
  j["device_waits"] = device_waits;
  j["staging_waits"] = staging_waits;
  j["growth_waits"] = growth_waits;
  j["device_buffer_bytes"] = device_buffer_bytes;
  j["step_graph_runs"] = step_graph_runs;
  j["step_graph_replays"] = step_graph_replays;
  j["step_graphs_built"] = step_graphs_built;
  j["step_graphs_evicted"] = step_graphs_evicted;
  j["expected_acceptance"] = expected_acceptance();
  j["expected_acceptance_sum"] = expected_acceptance_sum;
  j["expected_acceptance_count"] = expected_acceptance_count;
  j["draft_seconds"] = draft_seconds;
  j["target_seconds"] = target_seconds;
  j["verify_seconds"] = verify_seconds;
  j["prompt_seconds"] = prompt_seconds;
  j["wall_seconds"] = wall_seconds;
  j["tokens_per_second"] = wall_seconds > 0 ? new_tokens / wall_seconds : 0.0;
  const double decode_seconds = wall_seconds - prompt_seconds;
  j["decode_tokens_per_second"] = decode_seconds > 0 ? new_tokens / decode_seconds : 0.0;
}

std::string GenerationMetrics::consistency_problem() const {
  std::ostringstream os;
  constexpr size_t kMaxPositions = 1 << 16;  // deeper than any draft: a tree shape has at most 4096 nodes
  const size_t positions = position_reached.size();
  if (positions > kMaxPositions)
    os << "position_reached has " << positions << " positions (more than any draft's " << kMaxPositions << ")";
  else if (position_accepted.size() != positions)
    os << "position_accepted has " << position_accepted.size() << " positions, position_reached " << positions;
  else if (accepted_histogram.size() > positions + 1)
    os << "accepted_length_histogram has " << accepted_histogram.size() << " entries for " << positions
       << " draft positions (at most " << positions + 1 << ")";
  if (!os.str().empty()) return os.str();
  for (size_t i = 0; i < positions; ++i)
    if (position_reached[i] < 0 || position_accepted[i] < 0 || position_accepted[i] > position_reached[i]) {
      os << "draft position " << i + 1 << " accepted " << position_accepted[i] << " of " << position_reached[i]
         << " reached";
      return os.str();
    }
  for (const int64_t* count : {&sequences, &stopped, &new_tokens, &steps, &target_calls, &draft_calls, &proposed,
                               &accepted, &emitted, &q_zero_errors})
    if (*count < 0) return "a count is negative (" + std::to_string(*count) + ")";
  for (const std::vector<int64_t>* counts : {&accepted_histogram, &verify_rows_histogram, &lockstep_rows_histogram})
    for (int64_t c : *counts)
      if (c < 0) return "a histogram holds a negative count (" + std::to_string(c) + ")";
  if (accepted > proposed)
    return "accepted_tokens " + std::to_string(accepted) + " exceed proposed_tokens " + std::to_string(proposed);
  return "";
}

GenerationMetrics GenerationMetrics::read_json(const nlohmann::json& j) {
  // A time under its name, or under the *_time name records used before (absent: 0, as prompt_time once was).
  const auto seconds = [&](const char* name, const char* old_name) {
    return j.contains(name) ? j.at(name).get<double>() : j.value(old_name, 0.0);
  };
  GenerationMetrics m;
  m.sequences = j.value("sequences", int64_t(1));
  m.stopped = j.value("stopped_sequences", int64_t(0));
  m.new_tokens = j.at("new_tokens");
  m.steps = j.at("steps");
  m.target_calls = j.at("target_calls");
  m.draft_calls = j.at("draft_calls");
  m.proposed = j.at("proposed_tokens");
  m.accepted = j.at("accepted_tokens");
  m.emitted = j.at("emitted_tokens");
  m.q_zero_errors = j.at("q_zero_errors");
  m.position_reached = j.at("position_reached").get<std::vector<int64_t>>();
  m.position_accepted = j.at("position_accepted").get<std::vector<int64_t>>();
  m.accepted_histogram = j.at("accepted_length_histogram").get<std::vector<int64_t>>();
  // Records written before it was counted have none (a cost profile then cannot cost their steps).
  if (j.contains("verify_rows_histogram"))
    m.verify_rows_histogram = j.at("verify_rows_histogram").get<std::vector<int64_t>>();
  if (j.contains("lockstep_rows_histogram"))
    m.lockstep_rows_histogram = j.at("lockstep_rows_histogram").get<std::vector<int64_t>>();
  if (j.contains("device_waits")) m.device_waits = j.at("device_waits");
  if (j.contains("staging_waits")) m.staging_waits = j.at("staging_waits");
  if (j.contains("growth_waits")) m.growth_waits = j.at("growth_waits");
  if (j.contains("device_buffer_bytes")) m.device_buffer_bytes = j.at("device_buffer_bytes");
  // Records written before step graphs were counted have none.
  for (const auto& [key, field] : {std::pair{"step_graph_runs", &GenerationMetrics::step_graph_runs},
                                   std::pair{"step_graph_replays", &GenerationMetrics::step_graph_replays},
                                   std::pair{"step_graphs_built", &GenerationMetrics::step_graphs_built},
                                   std::pair{"step_graphs_evicted", &GenerationMetrics::step_graphs_evicted}})
    if (j.contains(key)) m.*field = j.at(key);
  m.expected_acceptance_sum = j.at("expected_acceptance_sum");
  m.expected_acceptance_count = j.at("expected_acceptance_count");
  m.draft_seconds = seconds("draft_seconds", "draft_time");
  m.target_seconds = seconds("target_seconds", "target_time");
  m.verify_seconds = seconds("verify_seconds", "verify_time");
  m.prompt_seconds = seconds("prompt_seconds", "prompt_time");
  m.wall_seconds = seconds("wall_seconds", "wall_time");
  return m;
}

std::string GenerationMetrics::to_json(const std::string& method, bool lossy) const {
  nlohmann::json j;
  j["method"] = method;
  j["lossy"] = lossy;
  write_json(j);
  return j.dump(2) + "\n";
}

}  // namespace specula
