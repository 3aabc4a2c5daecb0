#include "verify/sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace specula {

std::vector<double> log_softmax(const float* logits, int32_t size) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < size; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double z = 0.0;
  for (int32_t i = 0; i < size; ++i) z += std::exp(logits[i] - m);
  const double log_z = m + std::log(z);
  std::vector<double> out(size);
  for (int32_t i = 0; i < size; ++i) out[i] = logits[i] - log_z;
  return out;
}

std::vector<TokenLogprob> top_logprobs(const std::vector<double>& log_probs, int32_t n) {
  std::vector<int32_t> idx(log_probs.size());
  std::iota(idx.begin(), idx.end(), 0);
  n = std::min<int32_t>(n, static_cast<int32_t>(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return log_probs[a] > log_probs[b] || (log_probs[a] == log_probs[b] && a < b);
  });
  std::vector<TokenLogprob> out;
  for (int32_t i = 0; i < n; ++i) out.push_back({idx[i], log_probs[idx[i]]});
  return out;
}

Logprobs compute_logprobs(const float* raw_logits, const float* processed_probs, int32_t size, Token sampled,
                          int32_t n) {
  const std::vector<double> raw = log_softmax(raw_logits, size);
  std::vector<double> processed(size);
  for (int32_t i = 0; i < size; ++i)
    processed[i] = processed_probs[i] > 0.0f ? std::log(static_cast<double>(processed_probs[i]))
                                             : -std::numeric_limits<double>::infinity();
  return {top_logprobs(raw, n), top_logprobs(processed, n), {sampled, raw[sampled]}, {sampled, processed[sampled]}};
}

}  // namespace specula
