// The sampler pipeline: logits + parameters + history -> the full processed distribution. Processors
// transform; choosing a token is a separate step (verify/sampling/categorical.h). The verifiers need the whole
// processed distribution at every draft position, which is why nothing here returns a single token.
//
//   1. masks: allowed_tokens, banned_tokens, bad_words, min_tokens/stop_tokens, then logit_bias
//   2. penalties: repetition (prompt ∪ output), frequency and presence (output)
//   3. temperature (0 = greedy: one-hot at the argmax, ties to the lowest id) or dynamic temperature
//   4. filters in the configured order: min_p, top_k, top_p, typical_p, tfs_z, mirostat
//   5. softmax over what remains (float32 output, float64 accumulation)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula {

class SamplerPipeline {
 public:
  // Validates `params` against the vocabulary; throws Error naming the bad parameter.
  SamplerPipeline(SamplingParams params, int32_t vocab_size);

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }
  std::string describe() const { return params_.describe(); }

  // One row: logits [V] -> probs [V] (sums to 1, zeros where a token is removed).
  // Throws Error on NaN/+inf logits or when no token survives the masks.
  void process(const float* logits, const TokenHistory& history, float* probs) const;
  std::vector<float> process(const std::vector<float>& logits, const TokenHistory& history) const;

  // The history after `token` was emitted from the processed distribution `probs` of that history:
  // appends the token and advances mirostat's mu (Basu et al. 2021, Alg. 2: mu -= eta * (surprise - tau)).
  TokenHistory advance(const TokenHistory& history, Token token, const float* probs) const;
  // The same, taking the history over: a sequence's own history grows in place, so emitting n tokens costs O(n),
  // not the O(n^2) of a copy a token.
  TokenHistory advance(TokenHistory&& history, Token token, const float* probs) const;

  // The part of `history` this pipeline reads, for a draft or verifier row to start from: its states, its counts where
  // a penalty reads them, and the output's last tokens that a bad word can match or the counts have not counted, the
  // rest counted in output_dropped and the prompt left out. A row then costs that tail, not the output's length: a
  // whole copy per row would make a generation's cost grow with the square of its length. The whole history where a
  // penalty reads ids it has no counts for, or where ids are still in device memory.
  TokenHistory trimmed(const TokenHistory& history) const;
  // Gives a sequence's history its penalty counts (verify/sampling/penalty_counts.h), which advance then keeps up,
  // where a penalty reads them; else nothing. Costs the history's length and two vocabulary-sized arrays, once.
  void keep_counts(TokenHistory& history) const;

 private:
  SamplingParams params_;
  int32_t vocab_size_;
  bool reads_history_ids_;  // a penalty or an active filter stage reads the history's ids
  bool stage_reads_ids_;    // an active filter stage other than mirostat (which reads mu) reads the history
  size_t bad_word_tail_;    // output tokens a bad word's prefix reads: the longest word's length - 1
  size_t kept_tail_;        // output tokens a trimmed row keeps: that, or a constraint's error message's context
};

// A batch of rows [B, V] with per-row pipelines and histories, processed in parallel over rows.
void process_batch(const float* logits, int32_t rows, int32_t vocab_size, const SamplerPipeline* const* pipelines,
                   const TokenHistory* const* histories, float* probs);

}  // namespace specula
