// The synthetic workload `bench sampler` and `bench verify` share: Gaussian logits, a sampler configuration
// with every stage on, and a token history drawn the way generated text would be. Built from Philox, so
// both benchmarks see the same rows for the same (seed, stream) on every machine.
#pragma once

#include <cstdint>
#include <string>

#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula::bench {

// Logits ~ N(0, sigma^2). With sigma = 2 and temperature 0.8, min-p 0.05 keeps the tokens within
// 0.8 * ln 20 = 2.4 of the maximum, a few dozen to a few hundred of them, so min-p, top-k 50 and top-p 0.9
// all remove tokens: every stage does real work, none is a no-op.
constexpr float kLogitSigma = 2.0f;
constexpr int32_t kPromptTokens = 32;
constexpr int32_t kOutputTokens = 32;
// Output histories are drawn (with repeats) from a row's most likely tokens, as generated text would be,
// so the penalties change which tokens survive the filters rather than touching irrelevant ones.
constexpr int32_t kHistoryPool = 40;

// Every stage on: masks (a banned token), logit bias, all three penalties, temperature, min-p, top-k, top-p,
// in the default order.
SamplingParams all_stages_params();
// The parameters above in words, for the benchmarks' JSON.
std::string all_stages_description();

// row[0, V) ~ N(0, sigma^2) by Box-Muller: one Philox block of (seed, stream) gives two Gaussians.
void gaussian_row(uint64_t seed, uint64_t stream, float sigma, int32_t vocab_size, float* row);

// kPromptTokens prompt tokens (even positions from `row`'s kHistoryPool most likely tokens, odd ones
// uniform) and kOutputTokens output tokens from those most likely, drawn from (seed, stream).
TokenHistory likely_history(const float* row, int32_t vocab_size, uint64_t seed, uint64_t stream);

}  // namespace specula::bench
