// A cost profile: what a target forward costs on one machine as a function of the rows it runs, and what its
// draft models cost, all in units of that machine's 1-token target step. `specula bench forward` measures one
// (its report's "cost_profile", or the file of --cost-profile); `specula run --cost-profile FILE` (or
// [experiment] cost_profile) turns each setting's measured acceptance into the speedup it would have there.
//
// Why this predicts another machine: for a fixed seed the tokens a run drafts, accepts and emits do not depend on
// the hardware (the same law and the same Philox draws; at T = 0 the same argmax up to GEMM summation order), so
// tau and the rows each verification call ran carry over; only the step costs change, and those the profile
// holds. The prediction is the cost model of verify/ALGORITHMS.md §7 with the profile's costs:
//
//   speedup = tau / (draft_cost + verify_cost)   (both per verification step, in 1-token target steps)
//   verify_cost = mean over the run's steps of cost(rows of that step's target call), cost(r) piecewise linear
//                 between the rows the profile measured (1 row = 1), undefined beyond its largest
//   draft_cost  = draft-model forwards per step x the profile's cost of that draft model's 1-token forward, for a
//                 drafter the profile measured (transformer:DIR as `bench forward --model` named it); otherwise
//                 the drafting cost this run measured, in this run's target steps (the assumption: drafting
//                 costs the same share of a target step there as here; `profile_draft_source` says which)
//
// A tree of n nodes is costed as n + 1 rows of the chunk curve: the ancestor mask's own cost, which `bench
// forward` reports for its tree shapes, is left out.
//
// Batches. A lockstep run decodes B sequences per step (one target forward for all of them), and its speedup is
// against autoregressive decoding of the same batch. A profile measured with `bench forward --batches` holds, per
// batch size B, the curve of one step of B sequences of k rows each in units of that batch's own 1-token step; a
// lockstep setting of B prompts is costed on that curve (each step by its sequences' rows), and gets no prediction
// where the profile has no batch of its size (not one guessed from another's). Its drafting is costed as this run
// measured it: the profile times draft models alone, not in batches.
//
// File format (JSON; a `bench forward` report holding one under "cost_profile" is read the same way):
//   {"format": "specula cost profile", "version": 1, "machine": {...}, "device": "cpu" | "cuda",
//    "target": {"model": "transformer:DIR", "parameters": N, "weights_dtype": "...", "one_token_us": t},
//    "rows": [{"rows": 1, "cost": 1}, {"rows": 2, "cost": c2}, ...],   rows ascending, the first 1 with cost 1
//    "trees": [{"shape": "2,2,1", "nodes": 10, "cost": c}, ...],       informational
//    "drafts": [{"model": "transformer:DIR", "parameters": N, "cost": c}, ...],
//    "batches": [{"batch": B, "one_token_cost": c, "rows": [{"rows": 1, "cost": 1}, ...]}, ...]}   optional;
//        batch ascending from 2, one_token_cost = B sequences' 1-token step / the lone one's, rows as above
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace specula {

struct CostProfile {
  std::string file;     // where it was read from (for messages)
  std::string machine;  // one line: CPU or GPU model, as the profile's machine block names it
  std::string device;   // "cpu" | "cuda"
  std::string target;   // the target model spec it was measured on
  double one_token_us = 0;
  struct Point {
    int64_t rows = 0;
    double cost = 0;
  };
  std::vector<Point> rows;  // ascending rows, first {1, 1}
  struct Draft {
    std::string model;
    double cost = 0;  // its 1-token forward / the target's
  };
  std::vector<Draft> drafts;
  struct Batch {
    int64_t batch = 0;
    double one_token_cost = 0;  // its 1-token step / the lone sequence's
    std::vector<Point> rows;    // ascending rows per sequence, first {1, 1}: in units of its own 1-token step
  };
  std::vector<Batch> batches;  // ascending batch sizes from 2
  nlohmann::json json;         // the profile as read (what a results folder keeps as cost-profile.json)

  // cost(rows) as described above; NaN when `rows` < 1 or beyond the largest measured.
  double verify_cost(double rows) const;
  // The same for a step of `batch` sequences of `rows` rows each, on that batch's curve (batch 1: verify_cost(rows));
  // NaN where the profile measured no batch of that size.
  double verify_cost(double rows, int64_t batch) const;
  // The profile's cost of the draft model `drafter` (a drafter spec as an experiment names it), if measured.
  std::optional<double> draft_cost(const std::string& drafter) const;
  int64_t max_rows() const { return rows.empty() ? 0 : rows.back().rows; }
};

// Reads and checks a profile (or a forward report holding one). Error naming the file and the field for a file
// that is missing, not JSON, or holds no profile, a missing or mistyped field, rows that do not start at 1 with
// cost 1 or do not ascend, a cost that is not positive and finite.
CostProfile read_cost_profile(const std::string& path);

// The profile of a `bench forward` report (its models' cases: the first model is the target, the others its
// drafts; costs are ratios of median wall times). Error when the report has no 1-token case.
nlohmann::json cost_profile_from_forward_report(const nlohmann::json& report, const std::string& device);

// Whether two model specs ("kind:PATH") name the same model: same kind, same path once normalised.
bool same_model_spec(const std::string& a, const std::string& b);

}  // namespace specula
