#include <cmath>
#include <string>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/sampling/logits_processors.h"
#include "verify/verifiers/verification.h"

namespace specula {

Token sample_residual(const std::vector<double>& weights, const float* fallback, int32_t vocab_size, double u) {
  const Token t = sample_from_weights(weights.data(), vocab_size, u);
  if (t >= 0) return t;
  // Every residual weight is zero: the rejection that led here has probability O(float eps).
  const Token f = sample_from_weights(fallback, vocab_size, u);
  if (f < 0) fail("residual and fallback distributions are both empty");
  return f;
}

Token sample_support_residual(const std::vector<int32_t>& support, const std::vector<double>& weights,
                              const float* fallback, double u) {
  const int32_t n = static_cast<int32_t>(support.size());
  const Token t = sample_listed_weights(support.data(), weights.data(), n, u);
  if (t >= 0) return t;
  const Token f = sample_listed_weights(support.data(), fallback, n, u);
  if (f < 0) fail("residual and fallback distributions are both empty");
  return f;
}

double accept_uniform(const StepRandom& rng, uint32_t slot) {
  const double u = rng.key(RandomRole::accept, slot).uniform();
  if (mutant_on(Mutant::uniform_closed_at_zero)) return std::floor(u * 256.0) / 256.0;
  return u;
}

}  // namespace specula
