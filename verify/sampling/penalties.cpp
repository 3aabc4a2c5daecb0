// Step 2: repetition penalty over prompt ∪ output (Keskar et al. 2019, CTRL), frequency and presence
// penalties over the output only (OpenAI / vLLM semantics). Each token is penalised once by repetition,
// however often it occurs.
#include <cstdint>
#include <vector>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"

namespace specula {
namespace {

// How often each id occurs in the parts tallied, in a per-thread array of vocabulary size that is all zeros between
// uses: a row's penalties cost the length of its history, with no sort and no allocation per call. Every token is
// changed independently, so the order the distinct ids are visited in does not matter. The ids are in the vocabulary:
// the pipeline checked them (sampler_pipeline.cpp, check_history). One tally at a time on a thread: they share the
// array.
class IdTally {
 public:
  explicit IdTally(int32_t vocab_size) {
    if (count_.size() < static_cast<size_t>(vocab_size)) count_.resize(static_cast<size_t>(vocab_size), 0);
  }
  ~IdTally() {
    for (Token t : distinct_) count_[t] = 0;
    distinct_.clear();
  }
  IdTally(const IdTally&) = delete;
  IdTally& operator=(const IdTally&) = delete;

  void add(const std::vector<Token>& ids) {
    for (Token t : ids)
      if (count_[t]++ == 0) distinct_.push_back(t);
  }
  const std::vector<Token>& distinct() const { return distinct_; }
  int32_t count(Token t) const { return count_[t]; }

 private:
  static thread_local std::vector<int32_t> count_;
  static thread_local std::vector<Token> distinct_;
};

thread_local std::vector<int32_t> IdTally::count_;
thread_local std::vector<Token> IdTally::distinct_;

}  // namespace

void apply_penalties(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  if (s.repetition_penalty != 1.0f) {
    IdTally seen(row.size);
    seen.add(h.prompt);
    seen.add(h.output);
    const bool ignore_sign = mutant_on(Mutant::repetition_penalty_ignores_sign);
    for (Token t : seen.distinct())
      row.logits[t] = ignore_sign ? row.logits[t] / s.repetition_penalty
                                  : apply_repetition_penalty(row.logits[t], s.repetition_penalty);
  }
  if (s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) {
    IdTally produced(row.size);
    produced.add(h.output);
    if (mutant_on(Mutant::frequency_penalty_counts_prompt)) produced.add(h.prompt);
    const bool per_occurrence = mutant_on(Mutant::presence_penalty_per_occurrence);
    for (Token t : produced.distinct()) {
      const int32_t count = produced.count(t);
      const float presence = per_occurrence ? s.presence_penalty * static_cast<float>(count) : s.presence_penalty;
      row.logits[t] = apply_frequency_presence(row.logits[t], count, s.frequency_penalty, presence);
    }
  }
}

}  // namespace specula
