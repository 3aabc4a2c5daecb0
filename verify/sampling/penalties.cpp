// Step 2: repetition penalty over prompt ∪ output (Keskar et al. 2019, CTRL), frequency and presence
// penalties over the output only (OpenAI / vLLM semantics). Each token is penalised once by repetition,
// however often it occurs.
#include <algorithm>
#include <vector>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"

namespace specula {

void apply_penalties(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  // The distinct tokens and their counts come from sorting copies of the (short) history; every token is
  // changed independently, so the order they are visited in does not matter.
  thread_local std::vector<Token> tokens;
  if (s.repetition_penalty != 1.0f) {
    tokens.assign(h.prompt.begin(), h.prompt.end());
    tokens.insert(tokens.end(), h.output.begin(), h.output.end());
    std::sort(tokens.begin(), tokens.end());
    tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
    const bool ignore_sign = mutant_on(Mutant::repetition_penalty_ignores_sign);
    for (Token t : tokens)
      row.logits[t] = ignore_sign ? row.logits[t] / s.repetition_penalty
                                  : apply_repetition_penalty(row.logits[t], s.repetition_penalty);
  }
  if (s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) {
    tokens.assign(h.output.begin(), h.output.end());
    if (mutant_on(Mutant::frequency_penalty_counts_prompt))
      tokens.insert(tokens.end(), h.prompt.begin(), h.prompt.end());
    std::sort(tokens.begin(), tokens.end());
    const bool per_occurrence = mutant_on(Mutant::presence_penalty_per_occurrence);
    for (size_t i = 0; i < tokens.size();) {
      const Token t = tokens[i];
      size_t end = i;
      while (end < tokens.size() && tokens[end] == t) ++end;
      const int32_t count = static_cast<int32_t>(end - i);
      const float presence = per_occurrence ? s.presence_penalty * static_cast<float>(count) : s.presence_penalty;
      row.logits[t] = apply_frequency_presence(row.logits[t], count, s.frequency_penalty, presence);
      i = end;
    }
  }
}

}  // namespace specula
