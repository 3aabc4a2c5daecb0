// Step 2: repetition penalty over prompt ∪ output (Keskar et al. 2019, CTRL), frequency and presence
// penalties over the output only (OpenAI / vLLM semantics). Each token is penalised once by repetition,
// however often it occurs.
#include <unordered_map>
#include <unordered_set>

#include "kernels/sampler_math.h"
#include "verify/logits_processors.h"
#include "verify/mutants.h"

namespace specula {

void apply_penalties(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  if (s.repetition_penalty != 1.0f) {
    std::unordered_set<Token> seen(h.prompt.begin(), h.prompt.end());
    seen.insert(h.output.begin(), h.output.end());
    const bool ignore_sign = mutant_on(Mutant::repetition_penalty_ignores_sign);
    for (Token t : seen)
      row.logits[t] = ignore_sign ? row.logits[t] / s.repetition_penalty
                                  : apply_repetition_penalty(row.logits[t], s.repetition_penalty);
  }
  if (s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) {
    std::unordered_map<Token, int32_t> counts;
    for (Token t : h.output) ++counts[t];
    if (mutant_on(Mutant::frequency_penalty_counts_prompt))
      for (Token t : h.prompt) ++counts[t];
    const bool per_occurrence = mutant_on(Mutant::presence_penalty_per_occurrence);
    for (const auto& [t, count] : counts) {
      const float presence = per_occurrence ? s.presence_penalty * static_cast<float>(count) : s.presence_penalty;
      row.logits[t] = apply_frequency_presence(row.logits[t], count, s.frequency_penalty, presence);
    }
  }
}

}  // namespace specula
