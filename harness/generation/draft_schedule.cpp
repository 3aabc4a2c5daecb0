#include "harness/generation/draft_schedule.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

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

bool moves_k(DraftSchedule schedule, int64_t k_max, double confidence_threshold) {
  return (schedule != DraftSchedule::constant || confidence_threshold > 0.0) && k_max > 1;
}

void check_draft_schedule(DraftSchedule schedule, bool trees, const std::string& method) {
  if (trees && schedule != DraftSchedule::constant)
    fail_parameter("num_draft_tokens_schedule", " ", draft_schedule_name(schedule), " moves a chain's K; method ",
                   method, " verifies a tree of a fixed shape (the schedule is for methods that verify chains)");
}

double parse_confidence_threshold(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !(v >= 0.0 && v < 1.0))
    fail("confidence_threshold '", text, "' is not a number in [0, 1)");
  return v;
}

void check_confidence_threshold(double threshold, bool trees, const std::string& method) {
  if (!(threshold >= 0.0 && threshold < 1.0))
    fail_parameter("confidence_threshold", " must be in [0, 1) (0: chains never stop early), got ", threshold);
  // Applied in float (DraftRequest::confidence_threshold): one that rounds to 0 there would stop nothing.
  if (threshold > 0.0 && static_cast<float>(threshold) == 0.0f)
    fail_parameter("confidence_threshold", " ", threshold, " is 0 in float, where drafts are doubted");
  if (trees && threshold > 0.0)
    fail_parameter("confidence_threshold", " ", threshold, " stops a chain early; method ", method,
                   " verifies a tree of a fixed shape (the stop is for methods that verify chains)");
}

}  // namespace specula
