// How a chain's draft length K moves between the steps of one sequence (--num-draft-tokens-schedule, [draft]
// num_draft_tokens_schedule). K is decided before a step drafts, from the sequence's earlier steps alone, so each step
// is an ordinary chain of its K and the output keeps the target's law (verify/ALGORITHMS.md §1, "A draft length that
// varies between steps").
#pragma once

#include <cstdint>
#include <string>

namespace specula {

enum class DraftSchedule {
  constant,   // K at every step
  heuristic,  // Hugging Face assisted generation's "heuristic" schedule, per sequence and bounded by K
};

// "constant" | "heuristic"; throws Error naming the known values.
DraftSchedule parse_draft_schedule(const std::string& text);
const char* draft_schedule_name(DraftSchedule schedule);

// The next step's K after a step that asked for `k` drafts, got `proposed` (a drafter may propose fewer: prompt lookup
// without a match, a constraint's cut) and accepted `accepted` of them. heuristic: two more after a step that accepted
// every draft proposed, one fewer (never below 1) otherwise (transformers' AssistedCandidateGenerator.
// update_candidate_strategy, which compares the matches with the candidates made; versions before it compared them
// with the tokens asked for). Bounded where transformers is not: never above `k_max`, the K given, which bounds a
// run's buffers, graphs and positions; and each sequence starts at k_max (as "heuristic_transient" resets it for
// every generation).
int32_t next_num_draft_tokens(DraftSchedule schedule, int32_t k, int32_t proposed, int32_t accepted, int32_t k_max);

// Whether a run's chains may be shorter than its K, `k_max`: `schedule` moves K between steps, or a chain stops early
// on the draft's doubt (`confidence_threshold` > 0). At K = 1 neither can.
bool moves_k(DraftSchedule schedule, int64_t k_max, double confidence_threshold = 0.0);

// Refuses a schedule that moves K with `method`, which verifies trees of a fixed shape (`trees`): a ParameterError for
// "num_draft_tokens_schedule".
void check_draft_schedule(DraftSchedule schedule, bool trees, const std::string& method);

// A chain's early stop on the draft's doubt (--confidence-threshold, [draft] confidence_threshold; Hugging Face's
// assistant_confidence_threshold): after a draft its law gave less than the threshold, no more are drawn that step, and
// that draft is kept (the drafter applies it: stops_after_doubt, draft/candidate_sampling.h). 0 never stops.
// parse_confidence_threshold reads one ("0.4"), throwing Error outside [0, 1); check_confidence_threshold refuses one
// outside [0, 1), and one above 0 with `method`, which verifies trees of a fixed shape (`trees`): a ParameterError for
// "confidence_threshold".
double parse_confidence_threshold(const std::string& text);
void check_confidence_threshold(double threshold, bool trees, const std::string& method);

}  // namespace specula
