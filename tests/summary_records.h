// Synthetic run records with known costs, for the summary's cost model and its cost-profile prediction: a
// baseline of 100 tokens (0.2 s prompt, 99 decoding calls of 10 ms) and a chain K = 4 setting of 25 steps (tau 4,
// 12 ms of target and 2 ms of drafting per step: verify_cost 1.2, drafting 0.2 one-token steps).
#pragma once

#include <string>
#include <vector>

#include "harness/experiment/run_record.h"

namespace specula::testing {

// {baseline, speculative}; the speculative record's drafter, rows per verification call and draft forwards as given.
inline std::vector<RunRecord> chain_cost_records(const std::string& drafter = "",
                                                 const std::vector<int64_t>& verify_rows_histogram = {},
                                                 int64_t draft_calls = 0) {
  RunRecord base;
  base.baseline = true;
  base.setting_id = base.baseline_id = "base";
  base.setting = {{"draft.method", "ar"}};
  base.metrics.new_tokens = 100;
  base.metrics.wall_seconds = 1.2;
  base.metrics.prompt_seconds = 0.2;
  base.metrics.target_calls = 100;
  base.metrics.target_seconds = 0.99;
  RunRecord spec;
  spec.setting_id = "spec";
  spec.baseline_id = "base";
  spec.setting = {{"draft.method", "chain"}, {"draft.num_draft_tokens", "4"}};
  if (!drafter.empty()) spec.setting["draft.drafter"] = drafter;
  spec.metrics.resize(4);
  spec.metrics.new_tokens = spec.metrics.emitted = 100;
  spec.metrics.wall_seconds = 0.6;
  spec.metrics.prompt_seconds = 0.2;
  spec.metrics.steps = spec.metrics.target_calls = 25;
  spec.metrics.proposed = 100;
  spec.metrics.accepted = 75;
  spec.metrics.position_reached = {25, 25, 25, 25};
  spec.metrics.position_accepted = {25, 25, 25, 0};
  spec.metrics.target_seconds = 25 * 0.012;
  spec.metrics.draft_seconds = 25 * 0.002;
  spec.metrics.draft_calls = draft_calls;
  spec.metrics.verify_rows_histogram = verify_rows_histogram;
  return {base, spec};
}

}  // namespace specula::testing
