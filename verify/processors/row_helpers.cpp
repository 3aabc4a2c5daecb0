// Row statistics shared by the filters.
#include <cmath>
#include <limits>

#include "verify/error.h"
#include "verify/logits_processors.h"

namespace specula {

float max_logit(LogitsRow row) {
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t i = 0; i < row.size; ++i) m = row.logits[i] > m ? row.logits[i] : m;
  return m;
}

int32_t count_finite(LogitsRow row) {
  int32_t n = 0;
  for (int32_t i = 0; i < row.size; ++i) n += std::isfinite(row.logits[i]) ? 1 : 0;
  return n;
}

std::vector<double> row_probabilities(LogitsRow row) {
  const double m = max_logit(row);
  std::vector<double> p(row.size, 0.0);
  double z = 0.0;
  for (int32_t i = 0; i < row.size; ++i) {
    if (row.logits[i] == -std::numeric_limits<float>::infinity()) continue;
    p[i] = std::exp(static_cast<double>(row.logits[i]) - m);
    z += p[i];
  }
  for (double& v : p) v /= z;
  return p;
}

void keep_only(LogitsRow row, const std::vector<char>& keep) {
  for (int32_t i = 0; i < row.size; ++i)
    if (!keep[i]) row.logits[i] = -std::numeric_limits<float>::infinity();
}

void softmax_row(const float* logits, int32_t size, float* probs) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t i = 0; i < size; ++i) m = logits[i] > m ? logits[i] : m;
  if (m == -std::numeric_limits<double>::infinity()) fail("sampler pipeline: no token left to sample from");
  double z = 0.0;
  for (int32_t i = 0; i < size; ++i) z += std::exp(static_cast<double>(logits[i]) - m);
  const double inv = 1.0 / z;
  for (int32_t i = 0; i < size; ++i) probs[i] = static_cast<float>(std::exp(static_cast<double>(logits[i]) - m) * inv);
}

}  // namespace specula
