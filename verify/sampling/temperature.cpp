// Step 3: temperature, greedy, and dynamic temperature.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/shared/mutation_points.h"
#include "verify/sampling/logits_processors.h"

namespace specula {

void apply_temperature(Candidates& c, float temperature) {
  const float inv = 1.0f / temperature;
  const bool twice = mutant_on(Mutant::temperature_applied_twice);
  for (float& x : c.logits) {
    x *= inv;
    if (twice) x *= inv;
  }
}

// Greedy decoding: the first (lowest-id) maximal logit survives, so ties break exactly as plain decoding.
// Token 0 is the starting guess, as in a scan of the whole row: when every logit is -inf, token 0 wins.
void apply_greedy(Candidates& c) {
  Token best = 0;
  float best_logit = -std::numeric_limits<float>::infinity();
  if (!c.ids.empty() && c.ids[0] == 0) best_logit = c.logits[0];
  for (size_t j = 0; j < c.ids.size(); ++j) {
    if (c.logits[j] > best_logit) {
      best = c.ids[j];
      best_logit = c.logits[j];
    }
  }
  c.ids.assign(1, best);
  c.logits.assign(1, 0.0f);
}

// Dynamic temperature (llama.cpp `dynatemp`, after "Entropy-based dynamic temperature sampling",
// Zhang et al. 2024): T = T_min + (T_max - T_min) * (H / H_max)^exponent, where H is the entropy of the
// current distribution, H_max = log(#candidates) and [T_min, T_max] = [max(0, T - range), T + range].
// A temperature of 0 (only when T_min = 0 and H = 0, i.e. one candidate holds all mass) is greedy.
void apply_dynamic_temperature(Candidates& c, const SamplingParams& s) {
  const int32_t candidates = count_finite(c);
  if (candidates <= 1) return;
  const double t_min = std::max(0.0, static_cast<double>(s.temperature) - s.dynatemp_range);
  const double t_max = static_cast<double>(s.temperature) + s.dynatemp_range;
  thread_local std::vector<double> p;
  candidate_probabilities(c, p);
  double entropy = 0.0;
  for (double v : p)
    if (v > 0.0) entropy -= v * std::log(v);
  const double n = mutant_on(Mutant::dynatemp_full_vocab_entropy) ? c.vocab_size : candidates;
  const double normalized = entropy / std::log(n);
  const double t = t_min + (t_max - t_min) * std::pow(normalized, static_cast<double>(s.dynatemp_exponent));
  if (t <= 0.0) {
    apply_greedy(c);
    return;
  }
  const float inv = static_cast<float>(1.0 / t);
  for (float& x : c.logits) x *= inv;
}

}  // namespace specula
