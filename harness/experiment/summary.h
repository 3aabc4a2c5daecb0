// summary.csv: one row per setting, computed from records alone (so `specula merge` of shards gives the
// same summary as one run). Theory beside measurement:
//   alpha      accepted drafts / draft positions the verifier reached (the per-position acceptance
//              probability of Leviathan et al.'s i.i.d. model, estimated by maximum likelihood)
//   c          drafting time per drafted token / target time per 1-token forward (from the baseline)
//   predicted  Leviathan et al. 2023, Thm 3.8: (1 - alpha^(K+1)) / ((1 - alpha)(K c + 1))
// The decoding loop apart from the prompt (prefill, the same work in both arms and outside that model):
//   decode speedup  per repetition, (tokens / (wall - prompt time)) over the baseline's
//   verify_cost     target time per verification call / per 1-token decoding call: the theorem assumes 1
//                   (a parallel target run of K + 1 tokens as cheap as one of 1 token)
// Paired timing (records with a "pair"): every speculative generation was timed beside a baseline generation of
// the same prompt, so speedup and decode speedup are means of the ratios within pairs: averaged per prompt
// over repetitions (not independent: at T = 0 the same computation), then over prompts with the Student-t
// interval over prompts. pair_drift: whether the repetitions (which ran apart in time) differ beyond chance,
// by a two-way analysis of variance of the decode ratios with prompts as blocks (F-test at 1%): the machine
// changed under the run. Records decoded in lockstep (a device, or [experiment] lockstep) share their batch's
// times: the ratios are averaged per repetition (one batch beside its baseline batch), the interval is over
// repetitions, and pair_drift is empty.
//   cost model      tau / (draft time per step + verify_cost), both in 1-token target calls: the speedup the
//                   measured acceptance and model costs allow when nothing else takes time; the measured
//                   decode speedup over it is the share the harness's own work (sampling, verification,
//                   bookkeeping) leaves. With paired records the 1-token unit (for c, verify_cost and the
//                   cost model) is each record's own pair's decoding time per token, so the cost model and
//                   the decode speedup see the machine at the same moments.
// With a cost profile of another machine (cost_profile.h), four more columns: profile_verify_cost,
// profile_draft_cost and profile_speedup, the cost model with that machine's step costs and this run's
// acceptance, and profile_draft_source ("profile" when the profile measured the draft model, "this run"
// otherwise); all empty where the profile cannot cost the run's steps.
#pragma once

#include <cmath>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "harness/experiment/cost_profile.h"
#include "harness/experiment/run_record.h"

namespace specula {

struct SummaryRow {
  std::map<std::string, std::string> setting;
  std::string setting_id;
  bool baseline = false;
  bool lossy = false;
  int64_t prompts = 0;             // records in the row (prompts x repetitions)
  int32_t draft_positions = 0;     // K (chain) or tree depth
  double acceptance_rate = 0;      // accepted / proposed
  double alpha = 0;                // accepted / reached positions
  double expected_acceptance = 0;  // mean sum_x min(p, q) over reached positions
  double tau = 0;                  // tokens per target step, bonus included
  double predicted_tau = 0;        // (1 - alpha^(K+1)) / (1 - alpha)
  double tokens_per_s = 0;
  double baseline_tokens_per_s = 0;
  double speedup = 0;                              // mean over repetitions of per-repetition speedups
  double speedup_ci_low = 0, speedup_ci_high = 0;  // 95% Student-t interval across repetitions
  double c = 0;
  double predicted_speedup = 0;  // NaN for trees (the chain formula does not apply)
  double decode_tokens_per_s = 0, baseline_decode_tokens_per_s = 0;
  double decode_speedup = 0, decode_speedup_ci_low = 0, decode_speedup_ci_high = 0;
  double verify_cost = 0;
  double draft_cost = 0;  // drafting time per step in 1-token target calls (the cost model's other term)
  double cost_model_speedup = 0;
  double profile_verify_cost = NAN, profile_draft_cost = NAN, profile_speedup = NAN;  // NaN: no profile, or it
  std::string profile_draft_source;  // cannot cost these steps (rows beyond it, records without rows)
  std::vector<double> per_position_acceptance;
  std::vector<int64_t> accepted_length_histogram;
  std::string greedy_lossless;  // "yes"/"no" at temperature 0, "" otherwise
  int64_t q_zero_errors = 0;
  // The host's waits for the device a step (GenerationMetrics::device_waits / steps): 0 on the CPU; on a device one for
  // the step's draw or verification, plus what drafting waited (kernels/README.md, "What a step waits for").
  double device_waits_per_step = NAN;
  // The models' step graphs (GenerationMetrics::step_graph_*): the share of their steps replayed from a captured CUDA
  // graph (NaN: no step graph ran), and the graphs evicted for room a step (shapes that keep changing).
  double step_graph_replay_share = NAN;
  double step_graphs_evicted_per_step = NAN;
  int64_t pairs = 0;             // paired timings behind speedup (0: unpaired, per-repetition totals)
  double pair_load_average = 0;  // mean 1-minute load average around the pairs
  std::string pair_drift;        // "yes" / "no"; "" when not paired or too few pairs per repetition
};

// `profile`: another machine's step costs, for the profile_* columns (none: left empty).
std::vector<SummaryRow> summarize(const std::vector<RunRecord>& records,
                                  const std::optional<CostProfile>& profile = std::nullopt);
void write_summary_csv(const std::vector<SummaryRow>& rows, const std::string& path);
// The speculative rows as a table for a terminal, fastest decoding first: drafter, method, K or tree, T,
// alpha, tau, c, verify cost, decode speedup with its 95% interval, Leviathan's prediction, the cost model,
// and the pairs' drift flag; with a profile, its predicted speedup after the cost model, and a line naming it; last,
// the other swept axes that differ between the settings that have them (`regex=...`). Beam rows show no drafter or K.
void print_summary_table(const std::vector<SummaryRow>& rows, std::ostream& os,
                         const std::optional<CostProfile>& profile = std::nullopt);

// Leviathan et al. 2023 (eq. 1 and Thm 3.8).
double expected_tokens_per_step(double alpha, int k);
double predicted_speedup(double alpha, int k, double c);

}  // namespace specula
