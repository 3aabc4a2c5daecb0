// Log-probabilities for inspection: the top-n of the raw distribution (softmax of the unprocessed logits)
// and of the processed one, and those of the sampled token.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

struct TokenLogprob {
  Token token;
  double logprob;
};

struct Logprobs {
  std::vector<TokenLogprob> top_raw;        // n most likely under softmax(raw logits)
  std::vector<TokenLogprob> top_processed;  // n most likely under the processed distribution
  TokenLogprob sampled_raw;                 // the sampled token under each
  TokenLogprob sampled_processed;
};

// The n largest log-probabilities of `probs` (ties by id), as (token, log p).
std::vector<TokenLogprob> top_logprobs(const std::vector<double>& log_probs, int32_t n);
// log softmax of raw logits in float64.
std::vector<double> log_softmax(const float* logits, int32_t size);

Logprobs compute_logprobs(const float* raw_logits, const float* processed_probs, int32_t size, Token sampled,
                          int32_t n);

}  // namespace specula
