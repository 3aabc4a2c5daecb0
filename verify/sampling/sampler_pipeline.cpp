#include "verify/sampling/sampler_pipeline.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/sampling/filter_stages.h"
#include "verify/sampling/logits_processors.h"
#include "verify/sampling/penalty_counts.h"
#include "verify/sampling/token_constraint.h"

namespace specula {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Penalties index the row by history tokens, so an id outside the vocabulary must be an error, not a read
// or write out of bounds. The ids are checked only where something reads them (a penalty, or a filter stage that
// reads the history): the check walks what they walk, the ids past the counts or the whole history, and other rows
// stay independent of its length.
void check_history(const TokenHistory& h, const SamplingParams& s, int32_t vocab_size, bool reads_ids,
                   bool stage_reads_ids, size_t bad_word_tail) {
  if (!h.pending_ids.empty())
    fail("history: its last ", h.pending_ids.size(),
         " output tokens are still in device memory; the host cannot read them");
  // The held tokens the counts have not counted, whose ids are checked below: counted ids were checked as counted.
  const size_t unchecked = check_penalty_counts(h, s.penalised(), vocab_size);
  if (h.output_dropped > 0 && stage_reads_ids)
    fail("history: its first ", h.output_dropped,
         " output tokens were left out (SamplerPipeline::trimmed), but a filter stage reads the history");
  if (h.output_dropped > 0 && h.output.size() < bad_word_tail)
    fail("history: it holds the last ", h.output.size(), " of ", h.produced(),
         " output tokens, but a bad word reads the last ", bad_word_tail);
  if (!reads_ids) return;
  if (!h.counts)
    for (Token t : h.prompt)
      if (t < 0 || t >= vocab_size)
        fail("history: prompt token id ", t, " is outside the vocabulary [0, ", vocab_size, ")");
  for (size_t i = h.output.size() - unchecked; i < h.output.size(); ++i)
    if (h.output[i] < 0 || h.output[i] >= vocab_size)
      fail("history: output token id ", h.output[i], " is outside the vocabulary [0, ", vocab_size, ")");
}

double mirostat_mu(const SamplingParams& s, const TokenHistory& h) {
  return std::isnan(h.mirostat_mu) ? 2.0 * s.mirostat_tau : h.mirostat_mu;
}

void apply_filter(FilterStage stage, Candidates& c, const SamplingParams& s, const TokenHistory& h) {
  filter_stage(stage).apply(c, s, h);
}

// A logit x lowered by a margin far wider than the float32 rounding of x * inv (relative 2^-24, absolute
// 2^-150 among subnormals), and rounded down: no logit below the result can reach x after temperature.
float lowered(double x, float inv) {
  const double y = x - std::fabs(x) * 1e-6 - (1e-30 + 1e-38 / static_cast<double>(inv));
  const float f = static_cast<float>(y);
  return f > y ? std::nextafter(f, kNegInf) : f;
}

// The first cut: a threshold on the penalised logits (before temperature) below which the first filter
// removes every token, so the filters need only see the tokens above it. min-p and top-k keep upper sets of
// the logits, which temperature (a positive factor, rounding monotonically) maps to upper sets, so each
// gives one; any other first filter gets no cut (-inf: every token that is not -inf is a candidate), and
// so do dynamic temperature (its factor depends on the whole row), rows holding NaN or +inf, and the
// mutants that move stages across temperature.
float first_cut(const SamplingParams& s, const RowSummary& row) {
  if (row.unusual || row.max == kNegInf || s.dynatemp_range > 0.0f) return kNegInf;
  if (mutant_on(Mutant::min_p_before_temperature) || mutant_on(Mutant::temperature_applied_twice) ||
      mutant_on(Mutant::logit_bias_after_temperature))
    return kNegInf;
  const std::vector<FilterStage> filters = s.active_filters();
  if (filters.empty()) return kNegInf;
  const float inv = 1.0f / s.temperature;  // as apply_temperature
  const float max_tempered = row.max * inv;
  if (!std::isfinite(max_tempered)) return kNegInf;
  if (filters[0] == FilterStage::min_p) {
    // Tempered logits below the window's lower end fail min-p; map that bound back through temperature.
    const MinPWindow w = min_p_window(max_tempered, s.min_p);
    return w.lower == kNegInf ? kNegInf : lowered(static_cast<double>(w.lower) / static_cast<double>(inv), inv);
  }
  if (filters[0] == FilterStage::top_k) {
    // The k-th largest chunk maximum: k distinct tokens are at least that large, so the k-th largest logit
    // is too. The margin keeps tokens that temperature's rounding could tie with the k-th.
    thread_local std::vector<float> maxima;
    maxima.clear();
    for (float m : row.chunk_max)
      if (m != kNegInf) maxima.push_back(m);
    const int32_t k = s.top_k;
    if (static_cast<int32_t>(maxima.size()) < k) return kNegInf;
    std::nth_element(maxima.begin(), maxima.begin() + (k - 1), maxima.end(), std::greater<float>());
    return lowered(maxima[k - 1], inv);
  }
  return kNegInf;
}

// Step 1 of the pipeline: what removes tokens or biases them.
void apply_step_1(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  apply_masks_and_bias(row, s, h);
  apply_token_constraint(row, s, h);
}

// Is any logit finite? From the summary when the row holds neither NaN nor +inf, else by counting.
bool any_finite(LogitsRow row, const RowSummary& summary) {
  return summary.unusual ? count_finite(row) > 0 : summary.max != kNegInf;
}

}  // namespace

SamplerPipeline::SamplerPipeline(SamplingParams params, int32_t vocab_size)
    : params_(std::move(params)),
      vocab_size_(vocab_size),
      reads_history_ids_(params_.penalised()),
      stage_reads_ids_(false),
      bad_word_tail_(0) {
  params_.validate(vocab_size_);
  for (const std::vector<Token>& word : params_.bad_words) bad_word_tail_ = std::max(bad_word_tail_, word.size() - 1);
  // A constraint's dead-end error shows the output's end: a trimmed row keeps that much of it.
  constexpr size_t kConstraintContext = 32;
  kept_tail_ = std::max(bad_word_tail_, params_.constraint ? kConstraintContext : 0);
  for (FilterStage stage : params_.active_filters()) {
    reads_history_ids_ = reads_history_ids_ || filter_stage(stage).reads_history;
    // A stage that reads the history may read any of it, except mirostat, which reads mu alone.
    stage_reads_ids_ = stage_reads_ids_ || (filter_stage(stage).reads_history && stage != FilterStage::mirostat);
  }
}

void SamplerPipeline::process(const float* logits, const TokenHistory& history, float* probs) const {
  // Per-thread scratch, reused from row to row: no allocation of vocabulary size per call.
  thread_local std::vector<float> scratch;
  thread_local RowSummary summary;
  thread_local Candidates candidates;
  scratch.resize(vocab_size_);
  copy_checked_logits(logits, vocab_size_, scratch.data());
  check_history(history, params_, vocab_size_, reads_history_ids_, stage_reads_ids_, bad_word_tail_);
  LogitsRow row{scratch.data(), vocab_size_};
  const SamplingParams& s = params_;

  apply_step_1(row, s, history);
  apply_penalties(row, s, history);
  summarise_row(row, summary);
  // Finite logits can overflow: a bias or a penalty that pushes one past float32's range leaves +inf or NaN,
  // and the distribution would be NaN. Refuse it by name instead.
  if (summary.unusual)
    for (Token t = 0; t < vocab_size_; ++t)
      if (std::isnan(row.logits[t]) || row.logits[t] == -kNegInf)
        fail("sampler pipeline: token ", t, "'s logit is ", row.logits[t],
             " after logit_bias and the penalties (the input logit was ", logits[t],
             "): a bias or penalty overflows float32");
  // The masks must leave a finite logit. Penalties never make a non-finite logit finite, so a finite one
  // now settles it without a pass of its own; otherwise the masks are redone on a copy and counted.
  if (!any_finite(row, summary)) {
    thread_local std::vector<float> masked;
    masked.assign(logits, logits + vocab_size_);
    const LogitsRow before_penalties{masked.data(), vocab_size_};
    apply_step_1(before_penalties, s, history);
    if (count_finite(before_penalties) == 0) {
      if (std::none_of(logits, logits + vocab_size_, [](float x) { return std::isfinite(x); }))
        fail("sampler pipeline: every logit of the row is -inf: no token can be drawn");
      fail("sampler pipeline: allowed_tokens / banned_tokens / bad_words / min_tokens leave no token at all");
    }
  }

  Candidates& c = candidates;
  if (s.greedy()) {
    collect_candidates(row, summary, summary.unusual ? kNegInf : summary.max, c);
    apply_greedy(c);
  } else {
    collect_candidates(row, summary, first_cut(s, summary), c);
    // The min-p mutant decides the min-p threshold before temperature (a classic ordering bug).
    const bool early_min_p = mutant_on(Mutant::min_p_before_temperature) && s.min_p > 0.0f;
    if (early_min_p) apply_min_p(c, s.min_p);
    if (s.dynatemp_range > 0.0f)
      apply_dynamic_temperature(c, s);
    else
      apply_temperature(c, s.temperature);
    for (int32_t j = 0; j < c.size(); ++j)
      if (std::isnan(c.logits[j]) || c.logits[j] == -kNegInf)
        fail("sampler pipeline: token ", c.ids[j], "'s logit is ", c.logits[j], " after ",
             s.dynatemp_range > 0.0f ? "dynamic temperature (dynatemp_range " : "temperature (",
             s.dynatemp_range > 0.0f ? s.dynatemp_range : s.temperature, "): the logits / T overflow float32");
    if (mutant_on(Mutant::logit_bias_after_temperature))
      for (const auto& [t, bias] : s.logit_bias) {
        const auto it = std::lower_bound(c.ids.begin(), c.ids.end(), t);
        if (it != c.ids.end() && *it == t) c.logits[it - c.ids.begin()] += bias;  // others stay -inf
      }
    for (FilterStage stage : s.active_filters())
      if (!(early_min_p && stage == FilterStage::min_p)) apply_filter(stage, c, s, history);
  }
  softmax_candidates(c, probs);
}

std::vector<float> SamplerPipeline::process(const std::vector<float>& logits, const TokenHistory& history) const {
  if (static_cast<int32_t>(logits.size()) != vocab_size_)
    fail("logits row has ", logits.size(), " entries but the vocabulary has ", vocab_size_);
  std::vector<float> probs(vocab_size_);
  process(logits.data(), history, probs.data());
  return probs;
}

TokenHistory SamplerPipeline::advance(const TokenHistory& history, Token token, const float* probs) const {
  return advance(TokenHistory(history), token, probs);
}

TokenHistory SamplerPipeline::advance(TokenHistory&& history, Token token, const float* probs) const {
  if (token < 0 || token >= vocab_size_)
    fail("advance: token id ", token, " is outside the vocabulary [0, ", vocab_size_, ")");
  const bool mirostat = params_.mirostat == 2 && !params_.greedy();
  const double mu = mirostat ? mirostat_mu(params_, history) : 0.0;  // the state before the token
  const int32_t state = history.constraint_state;
  history.extend(token);
  // Counts this history alone holds are kept up; shared ones (a step's rows hold them) leave the token uncounted.
  if (history.counts && history.counts.use_count() == 1) history.counts->catch_up(history);
  if (params_.constraint) history.constraint_state = params_.constraint->next_state(state, token);
  if (mirostat) {
    // Surprise of the emitted token under the distribution it was drawn from (llama.cpp computes it on
    // the mirostat-truncated, renormalised distribution, which is ours when mirostat is the last stage).
    const double surprise = -std::log2(static_cast<double>(probs[token]));
    history.mirostat_mu = mu - params_.mirostat_eta * (surprise - params_.mirostat_tau);
  }
  return std::move(history);
}

TokenHistory SamplerPipeline::trimmed(const TokenHistory& history) const {
  const bool penalised = params_.penalised();
  if (!history.pending_ids.empty() || (penalised && !history.counts) || stage_reads_ids_) return history;
  const size_t keep = std::min(history.output.size(), std::max(kept_tail_, penalised ? uncounted_tokens(history) : 0));
  TokenHistory h;
  h.output.assign(history.output.end() - static_cast<std::ptrdiff_t>(keep), history.output.end());
  h.output_dropped = history.output_dropped + static_cast<int64_t>(history.output.size() - keep);
  h.mirostat_mu = history.mirostat_mu;
  h.constraint_state = history.constraint_state;
  if (penalised) h.counts = history.counts;
  return h;
}

void SamplerPipeline::keep_counts(TokenHistory& history) const {
  if (params_.penalised() && !history.counts)
    history.counts = std::make_shared<PenaltyCounts>(PenaltyCounts::of(history, vocab_size_));
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
