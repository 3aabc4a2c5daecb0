// The individual stages of the sampler pipeline. Each transforms a logits row in place (removed tokens
// become -inf); none picks a token. Definitions, with citations, are in each stage's source file.
#pragma once

#include <cstdint>
#include <vector>

#include "verify/sampling_params.h"
#include "verify/token_history.h"

namespace specula {

// A row being processed: float32 logits, -inf marking removed tokens.
struct LogitsRow {
  float* logits;
  int32_t size;
};

void apply_masks_and_bias(LogitsRow row, const SamplingParams& s, const TokenHistory& h);
void apply_penalties(LogitsRow row, const SamplingParams& s, const TokenHistory& h);
void apply_temperature(LogitsRow row, float temperature);
void apply_dynamic_temperature(LogitsRow row, const SamplingParams& s);
void apply_greedy(LogitsRow row);  // keeps only the first maximal logit
void apply_min_p(LogitsRow row, float min_p);
void apply_top_k(LogitsRow row, int32_t k);
void apply_top_p(LogitsRow row, float top_p);
void apply_typical_p(LogitsRow row, float typical_p);
void apply_tfs_z(LogitsRow row, float z);
void apply_mirostat_v2(LogitsRow row, double mu);
// Softmax over finite entries into `probs` (float64 accumulation). Throws if no entry is finite.
void softmax_row(const float* logits, int32_t size, float* probs);

// Helpers shared by the filters: max finite logit, and probabilities (float64) of the current row.
float max_logit(LogitsRow row);
std::vector<double> row_probabilities(LogitsRow row);
int32_t count_finite(LogitsRow row);
// Keeps exactly the tokens whose flag is set (others -> -inf).
void keep_only(LogitsRow row, const std::vector<char>& keep);

}  // namespace specula
