// Step 3: temperature, greedy, and dynamic temperature.
#include <cmath>
#include <limits>

#include "verify/logits_processors.h"
#include "verify/mutants.h"

namespace specula {

void apply_temperature(LogitsRow row, float temperature) {
  const float inv = 1.0f / temperature;
  const bool twice = mutant_on(Mutant::temperature_applied_twice);
  for (int32_t i = 0; i < row.size; ++i) {
    row.logits[i] *= inv;
    if (twice) row.logits[i] *= inv;
  }
}

// Greedy decoding: the first (lowest-id) maximal logit survives, so ties break exactly as plain decoding.
void apply_greedy(LogitsRow row) {
  int32_t best = 0;
  for (int32_t i = 1; i < row.size; ++i)
    if (row.logits[i] > row.logits[best]) best = i;
  for (int32_t i = 0; i < row.size; ++i)
    if (i != best) row.logits[i] = -std::numeric_limits<float>::infinity();
  row.logits[best] = 0.0f;
}

// Dynamic temperature (llama.cpp `dynatemp`, after "Entropy-based dynamic temperature sampling",
// Zhang et al. 2024): T = T_min + (T_max - T_min) * (H / H_max)^exponent, where H is the entropy of the
// current distribution, H_max = log(#candidates) and [T_min, T_max] = [max(0, T - range), T + range].
// A temperature of 0 (only when T_min = 0 and H = 0, i.e. one candidate holds all mass) is greedy.
void apply_dynamic_temperature(LogitsRow row, const SamplingParams& s) {
  const int32_t candidates = count_finite(row);
  if (candidates <= 1) return;
  const double t_min = std::max(0.0, static_cast<double>(s.temperature) - s.dynatemp_range);
  const double t_max = static_cast<double>(s.temperature) + s.dynatemp_range;
  const std::vector<double> p = row_probabilities(row);
  double entropy = 0.0;
  for (double v : p)
    if (v > 0.0) entropy -= v * std::log(v);
  const double n = mutant_on(Mutant::dynatemp_full_vocab_entropy) ? row.size : candidates;
  const double normalized = entropy / std::log(n);
  const double t = t_min + (t_max - t_min) * std::pow(normalized, static_cast<double>(s.dynatemp_exponent));
  if (t <= 0.0) {
    apply_greedy(row);
    return;
  }
  const float inv = static_cast<float>(1.0 / t);
  for (int32_t i = 0; i < row.size; ++i) row.logits[i] *= inv;
}

}  // namespace specula
