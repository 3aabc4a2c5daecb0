#include "verify/sampler_pipeline.h"

#include <cmath>
#include <limits>
#include <vector>

#include "verify/constraints/token_constraint.h"
#include "verify/error.h"
#include "verify/logits_processors.h"
#include "verify/mutants.h"

namespace specula {
namespace {

void check_logits(const float* logits, int32_t size) {
  for (int32_t i = 0; i < size; ++i) {
    if (std::isnan(logits[i])) fail("logits: token ", i, " is NaN");
    if (logits[i] == std::numeric_limits<float>::infinity()) fail("logits: token ", i, " is +inf");
  }
}

// Penalties index the row by history tokens, so an id outside the vocabulary must be an error, not a read
// or write out of bounds.
void check_history(const TokenHistory& h, int32_t vocab_size) {
  for (const auto* part : {&h.prompt, &h.output})
    for (Token t : *part)
      if (t < 0 || t >= vocab_size)
        fail("history: ", part == &h.prompt ? "prompt" : "output", " token id ", t,
             " is outside the vocabulary [0, ", vocab_size, ")");
}

double mirostat_mu(const SamplingParams& s, const TokenHistory& h) {
  return std::isnan(h.mirostat_mu) ? 2.0 * s.mirostat_tau : h.mirostat_mu;
}

void apply_filter(FilterStage stage, LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  switch (stage) {
    case FilterStage::min_p: return apply_min_p(row, s.min_p);
    case FilterStage::top_k: return apply_top_k(row, s.top_k);
    case FilterStage::top_p: return apply_top_p(row, s.top_p);
    case FilterStage::typical_p: return apply_typical_p(row, s.typical_p);
    case FilterStage::tfs_z: return apply_tfs_z(row, s.tfs_z);
    case FilterStage::mirostat: return apply_mirostat_v2(row, mirostat_mu(s, h));
  }
}

}  // namespace

SamplerPipeline::SamplerPipeline(SamplingParams params, int32_t vocab_size)
    : params_(std::move(params)), vocab_size_(vocab_size) {
  params_.validate(vocab_size_);
}

void SamplerPipeline::process(const float* logits, const TokenHistory& history, float* probs) const {
  check_logits(logits, vocab_size_);
  check_history(history, vocab_size_);
  thread_local std::vector<float> scratch;
  scratch.assign(logits, logits + vocab_size_);
  LogitsRow row{scratch.data(), vocab_size_};
  const SamplingParams& s = params_;

  apply_masks_and_bias(row, s, history);
  apply_token_constraint(row, s, history);
  if (count_finite(row) == 0)
    fail("sampler pipeline: allowed_tokens / banned_tokens / bad_words / min_tokens leave no token at all");
  apply_penalties(row, s, history);

  if (s.greedy()) {
    apply_greedy(row);
  } else {
    // The min-p mutant decides the min-p threshold before temperature (a classic ordering bug).
    const bool early_min_p = mutant_on(Mutant::min_p_before_temperature) && s.min_p > 0.0f;
    if (early_min_p) apply_min_p(row, s.min_p);
    if (s.dynatemp_range > 0.0f)
      apply_dynamic_temperature(row, s);
    else
      apply_temperature(row, s.temperature);
    if (mutant_on(Mutant::logit_bias_after_temperature))
      for (const auto& [t, bias] : s.logit_bias) row.logits[t] += bias;
    for (FilterStage stage : s.active_filters())
      if (!(early_min_p && stage == FilterStage::min_p)) apply_filter(stage, row, s, history);
  }
  softmax_row(row.logits, row.size, probs);
}

std::vector<float> SamplerPipeline::process(const std::vector<float>& logits, const TokenHistory& history) const {
  if (static_cast<int32_t>(logits.size()) != vocab_size_)
    fail("logits row has ", logits.size(), " entries but the vocabulary has ", vocab_size_);
  std::vector<float> probs(vocab_size_);
  process(logits.data(), history, probs.data());
  return probs;
}

TokenHistory SamplerPipeline::advance(const TokenHistory& history, Token token, const float* probs) const {
  if (token < 0 || token >= vocab_size_)
    fail("advance: token id ", token, " is outside the vocabulary [0, ", vocab_size_, ")");
  TokenHistory next = history.extended(token);
  if (params_.constraint) next.constraint_state = params_.constraint->next_state(history.constraint_state, token);
  if (params_.mirostat == 2 && !params_.greedy()) {
    // Surprise of the emitted token under the distribution it was drawn from (llama.cpp computes it on
    // the mirostat-truncated, renormalised distribution, which is ours when mirostat is the last stage).
    const double surprise = -std::log2(static_cast<double>(probs[token]));
    next.mirostat_mu = mirostat_mu(params_, history) - params_.mirostat_eta * (surprise - params_.mirostat_tau);
  }
  return next;
}

void process_batch(const float* logits, int32_t rows, int32_t vocab_size, const SamplerPipeline* const* pipelines,
                   const TokenHistory* const* histories, float* probs) {
  // Errors inside the parallel region are carried out of it: an exception must not cross OpenMP.
  std::vector<std::string> errors(rows);
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t r = 0; r < rows; ++r) {
    try {
      pipelines[r]->process(logits + static_cast<size_t>(r) * vocab_size, *histories[r],
                            probs + static_cast<size_t>(r) * vocab_size);
    } catch (const std::exception& e) {
      errors[r] = e.what();
    }
  }
  for (int32_t r = 0; r < rows; ++r)
    if (!errors[r].empty()) fail("row ", r, ": ", errors[r]);
}

}  // namespace specula
