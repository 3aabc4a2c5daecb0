#include "harness/generation/draft_schedule.h"

#include <algorithm>

#include "kernels/shared/error.h"

namespace specula {

DraftSchedule parse_draft_schedule(const std::string& text) {
  if (text == "constant") return DraftSchedule::constant;
  if (text == "heuristic") return DraftSchedule::heuristic;
  fail("unknown num_draft_tokens_schedule '", text, "' (known: constant, heuristic)");
}

const char* draft_schedule_name(DraftSchedule schedule) {
  return schedule == DraftSchedule::heuristic ? "heuristic" : "constant";
}

int32_t next_num_draft_tokens(DraftSchedule schedule, int32_t k, int32_t proposed, int32_t accepted, int32_t k_max) {
  if (schedule == DraftSchedule::constant) return k_max;
  return accepted >= proposed ? std::min(k + 2, k_max) : std::max(k - 1, 1);
}

bool moves_k(DraftSchedule schedule, int64_t k_max) { return schedule != DraftSchedule::constant && k_max > 1; }

void check_draft_schedule(DraftSchedule schedule, bool trees, const std::string& method) {
  if (trees && schedule != DraftSchedule::constant)
    fail_parameter("num_draft_tokens_schedule", " ", draft_schedule_name(schedule), " moves a chain's K; method ",
                   method, " verifies a tree of a fixed shape (the schedule is for methods that verify chains)");
}

}  // namespace specula
