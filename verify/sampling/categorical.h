// Selectors: pick a token from a distribution. Separate from the processors on purpose (processors
// transform, selectors pick). All randomness comes from Philox keyed by (seed, stream, offset).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/shared/philox.h"
#include "verify/sampling/sampling_params.h"

namespace specula {

// Where a draw takes its uniform from.
struct RandomKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t offset = 0;
  double uniform() const { return philox_uniform(seed, stream, offset); }
};

// Inverse-CDF draw from unnormalised non-negative weights with uniform u in (0, 1), accumulated in
// float64. Zero weights are never chosen. Returns -1 when every weight is zero (the caller falls back).
Token sample_from_weights(const float* weights, int32_t size, double u);
Token sample_from_weights(const double* weights, int32_t size, double u);

// Draw from a processed distribution (weights need not sum exactly to 1). Throws if all are zero.
Token sample_categorical(const float* probs, int32_t size, const RandomKey& key);

// Draws one token from each of `rows` distributions [rows, size]; row r uses keys[r].
void sample_rows(const float* probs, int32_t rows, int32_t size, const RandomKey* keys, Token* out);

// Lowest-id token with the largest value.
Token argmax(const float* values, int32_t size);

}  // namespace specula
