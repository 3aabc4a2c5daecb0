#include "harness/bench/bench_workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/shared/philox.h"

namespace specula::bench {

SamplingParams all_stages_params() {
  SamplingParams s;
  s.banned_tokens = {2};
  s.logit_bias = {{10, 3.0f}, {11, -2.0f}, {12, 5.0f}, {13, -100.0f}};
  s.repetition_penalty = 1.1f;
  s.frequency_penalty = 0.2f;
  s.presence_penalty = 0.3f;
  s.temperature = 0.8f;
  s.min_p = 0.05f;
  s.top_k = 50;
  s.top_p = 0.9f;
  return s;
}

std::string all_stages_description() {
  return "banned token 2; logit_bias {10:+3, 11:-2, 12:+5, 13:-100}; repetition 1.1, frequency 0.2, presence 0.3; "
         "temperature 0.8; min_p 0.05, top_k 50, top_p 0.9";
}

void gaussian_row(uint64_t seed, uint64_t stream, float sigma, int32_t vocab_size, float* row) {
  for (int32_t i = 0; i < vocab_size; i += 2) {
    const PhiloxBlock b = philox_block(seed, stream, static_cast<uint64_t>(i / 2));
    const double u1 = uniform_open_from_bits(b.x[0], b.x[1]);
    const double u2 = uniform_open_from_bits(b.x[2], b.x[3]);
    const double radius = std::sqrt(-2.0 * std::log(u1)) * sigma;
    row[i] = static_cast<float>(radius * std::cos(2.0 * M_PI * u2));
    if (i + 1 < vocab_size) row[i + 1] = static_cast<float>(radius * std::sin(2.0 * M_PI * u2));
  }
}

TokenHistory likely_history(const float* row, int32_t vocab_size, uint64_t seed, uint64_t stream) {
  std::vector<Token> ids(vocab_size);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + kHistoryPool, ids.end(),
                    [&](Token a, Token b) { return row[a] > row[b]; });
  uint64_t offset = 0;
  auto pick = [&](int32_t n) { return static_cast<int32_t>(philox_uniform(seed, stream, offset++) * n); };
  TokenHistory h;
  for (int32_t j = 0; j < kPromptTokens; ++j)
    h.prompt.push_back(j % 2 == 0 ? ids[pick(kHistoryPool)] : pick(vocab_size));
  for (int32_t j = 0; j < kOutputTokens; ++j) h.output.push_back(ids[pick(kHistoryPool)]);
  return h;
}

}  // namespace specula::bench
