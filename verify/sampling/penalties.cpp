// Step 2: repetition penalty over prompt ∪ output (Keskar et al. 2019, CTRL), frequency and presence
// penalties over the output only (OpenAI / vLLM semantics). Each token is penalised once by repetition,
// however often it occurs. A history with counts (verify/sampling/penalty_counts.h) is read as its counts and the few
// output tokens they have not counted; one without is walked whole.
#include <cstdint>
#include <vector>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"
#include "verify/sampling/penalty_counts.h"

namespace specula {
namespace {

// How often each id occurs in the tokens tallied, in a per-thread array of vocabulary size that is all zeros between
// uses: a row's penalties cost the tokens they walk, with no sort and no allocation per call. Every token is changed
// independently, so the order the distinct ids are visited in does not matter. The ids are in the vocabulary: the
// pipeline checked them (sampler_pipeline.cpp, check_history). One tally at a time on a thread: they share the array.
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

  void add(const Token* begin, const Token* end) {
    for (const Token* t = begin; t != end; ++t)
      if (count_[*t]++ == 0) distinct_.push_back(*t);
  }
  void add(const std::vector<Token>& ids) { add(ids.data(), ids.data() + ids.size()); }
  const std::vector<Token>& distinct() const { return distinct_; }
  int32_t count(Token t) const { return count_[t]; }

 private:
  static thread_local std::vector<int32_t> count_;
  static thread_local std::vector<Token> distinct_;
};

thread_local std::vector<int32_t> IdTally::count_;
thread_local std::vector<Token> IdTally::distinct_;

void penalise_repetition(LogitsRow row, const SamplingParams& s, Token t) {
  row.logits[t] = mutant_on(Mutant::repetition_penalty_ignores_sign)
                      ? row.logits[t] / s.repetition_penalty
                      : apply_repetition_penalty(row.logits[t], s.repetition_penalty);
}

void penalise_frequency(LogitsRow row, const SamplingParams& s, Token t, int32_t count) {
  const float presence = mutant_on(Mutant::presence_penalty_per_occurrence)
                             ? s.presence_penalty * static_cast<float>(count)
                             : s.presence_penalty;
  row.logits[t] = apply_frequency_presence(row.logits[t], count, s.frequency_penalty, presence);
}

bool frequency_or_presence(const SamplingParams& s) {
  return s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f;
}

// The whole history walked.
void penalise_walked(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  if (s.repetition_penalty != 1.0f) {
    IdTally seen(row.size);
    seen.add(h.prompt);
    seen.add(h.output);
    for (Token t : seen.distinct()) penalise_repetition(row, s, t);
  }
  if (frequency_or_presence(s)) {
    IdTally produced(row.size);
    produced.add(h.output);
    if (mutant_on(Mutant::frequency_penalty_counts_prompt)) produced.add(h.prompt);
    for (Token t : produced.distinct()) penalise_frequency(row, s, t, produced.count(t));
  }
}

// The counts, and the output tokens past them (a row's draft path): each distinct id penalised once, with its count in
// both.
void penalise_counted(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  const PenaltyCounts& c = *h.counts;
  const Token* const end = h.output.data() + h.output.size();
  IdTally extra(row.size);  // the tokens past the counts, tallied once for both penalties
  extra.add(end - uncounted_tokens(h), end);
  if (s.repetition_penalty != 1.0f) {
    for (Token t : c.seen) penalise_repetition(row, s, t);
    for (Token t : extra.distinct())
      if (c.in_prompt[t] == 0 && c.in_output[t] == 0) penalise_repetition(row, s, t);
  }
  if (frequency_or_presence(s)) {
    const bool with_prompt = mutant_on(Mutant::frequency_penalty_counts_prompt);
    const auto count = [&](Token t) { return c.in_output[t] + extra.count(t) + (with_prompt ? c.in_prompt[t] : 0); };
    for (Token t : c.produced) penalise_frequency(row, s, t, count(t));
    for (Token t : extra.distinct())
      if (c.in_output[t] == 0) penalise_frequency(row, s, t, count(t));
    if (with_prompt)
      for (Token t : c.seen)
        if (c.in_output[t] == 0 && extra.count(t) == 0) penalise_frequency(row, s, t, count(t));
  }
}

}  // namespace

void apply_penalties(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  if (s.repetition_penalty == 1.0f && !frequency_or_presence(s)) return;
  if (h.counts)
    penalise_counted(row, s, h);
  else
    penalise_walked(row, s, h);
}

}  // namespace specula
