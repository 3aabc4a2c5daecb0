// Step 1 of the pipeline: hard masks, then additive logit bias (vLLM semantics).
#include <algorithm>
#include <limits>

#include "kernels/shared/mutation_points.h"
#include "verify/sampling/logits_processors.h"

namespace specula {
namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A bad word w bans its last token when the output ends with w[0 .. n-2] (a one-token word is always
// banned). The history is the generated output only, as in vLLM's bad_words.
bool bad_word_prefix_matches(const std::vector<Token>& word, const std::vector<Token>& output) {
  const size_t prefix = word.size() - 1;
  if (mutant_on(Mutant::bad_words_ignore_prefix)) return true;
  if (output.size() < prefix) return false;
  return std::equal(word.begin(), word.end() - 1, output.end() - static_cast<std::ptrdiff_t>(prefix));
}
}  // namespace

void apply_masks_and_bias(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  if (!s.allowed_tokens.empty()) {
    thread_local TokenSet allowed;  // reused from row to row: no allocation of vocabulary size per call
    allowed.clear(row.size);
    for (Token t : s.allowed_tokens) allowed.set(t);
    keep_only(row, allowed);
  }
  for (Token t : s.banned_tokens) row.logits[t] = kNegInf;
  for (const auto& word : s.bad_words)
    if (bad_word_prefix_matches(word, h.output)) row.logits[word.back()] = kNegInf;
  const int64_t produced = h.produced();
  const int32_t threshold = mutant_on(Mutant::min_tokens_off_by_one) ? s.min_tokens - 1 : s.min_tokens;
  if (produced < threshold)
    for (Token t : s.stop_tokens) row.logits[t] = kNegInf;
  if (!mutant_on(Mutant::logit_bias_after_temperature))
    for (const auto& [t, bias] : s.logit_bias) row.logits[t] += bias;
}

}  // namespace specula
