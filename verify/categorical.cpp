#include "verify/categorical.h"

#include "kernels/sampler_math.h"
#include "verify/error.h"
#include "verify/mutants.h"

namespace specula {
namespace {
template <typename T>
Token sample_from_weights_impl(const T* weights, int32_t size, double u) {
  double total = 0.0;
  int32_t last_positive = -1;
  for (int32_t i = 0; i < size; ++i) {
    total += static_cast<double>(weights[i]);
    if (weights[i] > 0) last_positive = i;
  }
  if (!(total > 0.0)) return -1;
  const double target = u * total;
  double cumulative = 0.0;
  for (int32_t i = 0; i < size; ++i) {
    cumulative += static_cast<double>(weights[i]);
    if (cumulative_crosses(cumulative, target)) return i;
  }
  return last_positive;  // u * total rounded up to total: the last token with weight
}
}  // namespace

Token sample_from_weights(const float* weights, int32_t size, double u) {
  return sample_from_weights_impl(weights, size, u);
}
Token sample_from_weights(const double* weights, int32_t size, double u) {
  return sample_from_weights_impl(weights, size, u);
}

Token sample_categorical(const float* probs, int32_t size, const RandomKey& key) {
  const Token t = sample_from_weights(probs, size, key.uniform());
  if (t < 0) fail("cannot sample from a distribution with no mass");
  return t;
}

void sample_rows(const float* probs, int32_t rows, int32_t size, const RandomKey* keys, Token* out) {
  for (int32_t r = 0; r < rows; ++r) {
    const RandomKey& key = mutant_on(Mutant::uniform_reused_across_rows) ? keys[0] : keys[r];
    out[r] = sample_categorical(probs + static_cast<size_t>(r) * size, size, key);
  }
}

Token argmax(const float* values, int32_t size) {
  Token best = 0;
  for (int32_t i = 1; i < size; ++i)
    if (values[i] > values[best]) best = i;
  return best;
}

}  // namespace specula
