#include "verify/sampling/categorical.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"

namespace specula {
namespace {

// Inverse CDF over the listed weights (weight(j) of ids[j], ids ascending; every unlisted weight is zero).
// Zero weights add exact zeros to float64 sums and can never be picked, so skipping them changes no sum and
// no choice: the result is that of the loop over the whole row.
template <class Weight>
Token sample_listed(const int32_t* ids, int32_t n, double u, Weight weight) {
  double total = 0.0;
  int32_t last_positive = -1;
  for (int32_t j = 0; j < n; ++j) {
    const double w = weight(j);
    total += w;
    if (w > 0) last_positive = ids[j];
  }
  if (!(total > 0.0)) return -1;
  const double target = u * total;
  double cumulative = 0.0;
  for (int32_t j = 0; j < n; ++j) {
    const double w = weight(j);
    cumulative += w;
    if (inverse_cdf_picks(w, cumulative, target)) return ids[j];
  }
  return last_positive;  // u * total rounded up to total: the last token with weight
}

// The largest value, NaN ignored (a NaN lane never replaces the running maximum).
SPECULA_ROW_SCAN float largest(const float* __restrict values, int32_t size) {
  float m = values[0];
#pragma omp simd reduction(max : m)
  for (int32_t i = 1; i < size; ++i) m = values[i] > m ? values[i] : m;
  return m;
}

}  // namespace

Token sample_listed_weights(const int32_t* ids, const double* weights, int32_t n, double u) {
  return sample_listed(ids, n, u, [&](int32_t j) { return weights[j]; });
}

Token sample_listed_weights(const int32_t* ids, const float* row, int32_t n, double u) {
  return sample_listed(ids, n, u, [&](int32_t j) { return static_cast<double>(row[ids[j]]); });
}

Token sample_from_weights(const float* weights, int32_t size, double u) {
  thread_local std::vector<int32_t> ids;
  nonzero_ids(weights, size, ids);
  return sample_listed_weights(ids.data(), weights, static_cast<int32_t>(ids.size()), u);
}

Token sample_from_weights(const double* weights, int32_t size, double u) {
  thread_local std::vector<int32_t> ids;
  ids.clear();
  for (int32_t i = 0; i < size; ++i)
    if (weights[i] != 0.0) ids.push_back(i);
  return sample_listed(ids.data(), static_cast<int32_t>(ids.size()), u, [&](int32_t j) { return weights[ids[j]]; });
}

Token sample_categorical(const float* probs, int32_t size, const RandomKey& key) {
  const Token t = sample_from_weights(probs, size, key.uniform());
  if (t < 0) fail("cannot sample from a distribution with no mass");
  return t;
}

void sample_rows(const float* probs, int32_t rows, int32_t size, const RandomKey* keys, Token* out) {
  // Rows are independent: parallel over rows, errors carried out of the region (an exception must not
  // cross OpenMP) and reported for the first failing row.
  std::vector<std::string> errors(rows);
  const bool parallel = rows > 1 && static_cast<int64_t>(rows) * size >= (1 << 16);  // else not worth a region
#pragma omp parallel for schedule(dynamic, 1) if (parallel)
  for (int32_t r = 0; r < rows; ++r) {
    try {
      const RandomKey& key = mutant_on(Mutant::uniform_reused_across_rows) ? keys[0] : keys[r];
      out[r] = sample_categorical(probs + static_cast<size_t>(r) * size, size, key);
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  }
  for (int32_t r = 0; r < rows; ++r)
    if (!errors[r].empty()) throw Error(errors[r]);
}

// The first index holding the largest value, as a scan that replaces the best only on a strict increase:
// NaN never wins, except at index 0 where nothing can beat it.
Token argmax(const float* values, int32_t size) {
  if (size <= 0 || std::isnan(values[0])) return 0;
  const float m = largest(values, size);
  for (int32_t i = 0; i < size; ++i)
    if (values[i] == m) return i;
  return 0;
}

}  // namespace specula
