#include "verify/device/sampler_batch.h"

#include <algorithm>
#include <sstream>
#include <string>

#include "kernels/shared/error.h"
#include "verify/sampling/filter_stages.h"
#include "verify/sampling/penalty_counts.h"

namespace specula {
namespace {

void set_bit(std::vector<uint32_t>& bits, size_t row_word_offset, Token t) {
  bits[row_word_offset + static_cast<size_t>(t) / 32] |= 1u << (static_cast<uint32_t>(t) % 32);
}

}  // namespace

std::optional<UnsupportedSetting> unsupported_on_cuda(const SamplingParams& s) {
  const auto setting = [](const std::string& parameter, const std::string& what, auto value) {
    std::ostringstream os;
    os << value;
    return UnsupportedSetting{parameter, what, os.str()};
  };
  if (!s.bad_words.empty()) return UnsupportedSetting{"bad_words", "bad_words", ""};
  if (s.constraint) return UnsupportedSetting{"device", "constraint (regex / json schema)", ""};
  if (!s.greedy()) {  // greedy rows never reach temperature or the filters (SamplerPipeline::process)
    if (s.dynatemp_range > 0.0f) return setting("dynatemp_range", "dynatemp", s.dynatemp_range);
    // The filter stages the kernel applies are those whose row says so (verify/sampling/filter_stages.h).
    for (const FilterStageRow& row : filter_stages())
      if (!row.device && row.active(s)) {
        const StageParameter& p = row.parameters[0];
        return setting(p.name, row.name, p.get(s));
      }
  }
  // The CPU adds a listed bias once per entry; a dense bias row would add the sum, rounded differently.
  std::vector<Token> biased;
  for (const auto& [t, bias] : s.logit_bias) biased.push_back(t);
  std::sort(biased.begin(), biased.end());
  const auto dup = std::adjacent_find(biased.begin(), biased.end());
  if (dup != biased.end())
    return UnsupportedSetting{"logit_bias", "logit_bias lists token " + std::to_string(*dup) + " more than once", ""};
  return std::nullopt;
}

void check_supported_on_cuda(const SamplingParams& s) {
  if (const std::optional<UnsupportedSetting> u = unsupported_on_cuda(s)) fail("not supported on cuda: ", u->what);
}

SamplerBatch::SamplerBatch(int32_t vocab_size, const std::vector<SamplerBatchRow>& batch_rows)
    : batch(static_cast<int32_t>(batch_rows.size())), vocab(vocab_size) {
  if (batch_rows.empty()) fail("fused sampler batch: no rows");
  const size_t words = (static_cast<size_t>(vocab) + 31) / 32;
  const size_t b = batch_rows.size(), v = static_cast<size_t>(vocab);
  bool any_allowed = false, any_banned = false, any_prompt = false, any_counts = false, any_bias = false;
  for (size_t r = 0; r < b; ++r) {
    const SamplingParams& s = *batch_rows[r].params;
    try {
      s.validate(vocab);
      check_supported_on_cuda(s);
    } catch (const Error& e) {
      fail("row ", r, ": ", e.what());
    }
    const TokenHistory& h = *batch_rows[r].history;
    const bool penalised = s.penalised();
    any_allowed = any_allowed || !s.allowed_tokens.empty();
    any_banned = any_banned || !s.banned_tokens.empty() || (h.produced() < s.min_tokens && !s.stop_tokens.empty());
    any_prompt = any_prompt || s.repetition_penalty != 1.0f;
    any_counts = any_counts || penalised;
    any_bias = any_bias || !s.logit_bias.empty();
  }
  if (any_allowed) allowed.assign(b * words, 0u);
  if (any_banned) banned.assign(b * words, 0u);
  if (any_prompt) prompt.assign(b * words, 0u);
  if (any_counts) output_counts.assign(b * v, 0);
  if (any_bias) logit_bias.assign(b * v, 0.0f);

  rows.resize(b);
  for (size_t r = 0; r < b; ++r) {
    const SamplingParams& s = *batch_rows[r].params;
    const TokenHistory& h = *batch_rows[r].history;
    if (h.pending_ids.size() > h.output.size())
      fail("row ", r, ": ", h.pending_ids.size(), " pending ids for ", h.output.size(), " output tokens");
    const size_t known = h.output.size() - h.pending_ids.size();
    size_t uncounted = 0;
    try {
      uncounted = check_penalty_counts(h, s.penalised(), vocab);
    } catch (const Error& e) {
      fail("row ", r, ": ", e.what());
    }
    // A history with counts (penalty_counts.h) gives them, and the held tokens past them; one without gives every id.
    const PenaltyCounts* counts = s.penalised() ? h.counts.get() : nullptr;
    const size_t first_uncounted = counts ? h.output.size() - uncounted : 0;
    if (first_uncounted > known) fail("row ", r, ": its penalty counts cover output tokens still in device memory");
    SamplerRowParams& row = rows[r];
    row.temperature = s.temperature;
    row.min_p = s.min_p;
    row.top_k = s.top_k;
    row.top_p = s.top_p;
    row.repetition_penalty = s.repetition_penalty;
    row.frequency_penalty = s.frequency_penalty;
    row.presence_penalty = s.presence_penalty;
    row.seed = batch_rows[r].key.seed;
    row.stream = batch_rows[r].key.stream;
    row.offset = batch_rows[r].key.offset;
    if (!s.greedy()) {
      for (FilterStage stage : s.active_filters()) {
        KernelFilter f;
        switch (stage) {
          case FilterStage::min_p:
            f = KernelFilter::min_p;
            break;
          case FilterStage::top_k:
            f = KernelFilter::top_k;
            break;
          case FilterStage::top_p:
            f = KernelFilter::top_p;
            break;
          default:
            fail("row ", r, ": not supported on cuda: ", filter_stage_name(stage));
        }
        row.filters[row.num_filters++] = static_cast<uint8_t>(f);
      }
    }
    const size_t wo = r * words, vo = r * v;
    if (!s.allowed_tokens.empty()) {
      row.flags |= kRowAllowed;
      for (Token t : s.allowed_tokens) set_bit(allowed, wo, t);
    }
    const bool stops_banned = h.produced() < s.min_tokens && !s.stop_tokens.empty();
    if (!s.banned_tokens.empty() || stops_banned) {
      row.flags |= kRowBanned;
      for (Token t : s.banned_tokens) set_bit(banned, wo, t);
      if (stops_banned)
        for (Token t : s.stop_tokens) set_bit(banned, wo, t);
    }
    if (s.repetition_penalty != 1.0f) {
      row.flags |= kRowPrompt;
      if (counts) {
        for (Token t : counts->seen)
          if (counts->in_prompt[t] > 0) set_bit(prompt, wo, t);
      } else {
        for (Token t : h.prompt) {
          if (t < 0 || t >= vocab) fail("row ", r, ": prompt token ", t, " is outside the vocabulary [0, ", vocab, ")");
          set_bit(prompt, wo, t);
        }
      }
    }
    if (s.penalised()) {
      // The tokens the host knows; the pending ones' counts are added on the device (kernels/pending_counts.h).
      row.flags |= kRowCounts;
      if (counts)
        for (Token t : counts->produced) output_counts[vo + static_cast<size_t>(t)] += counts->in_output[t];
      for (size_t i = first_uncounted; i < known; ++i) {
        const Token t = h.output[i];
        if (t < 0 || t >= vocab) fail("row ", r, ": output token ", t, " is outside the vocabulary [0, ", vocab, ")");
        ++output_counts[vo + static_cast<size_t>(t)];
      }
    }
    if (!s.logit_bias.empty()) {
      row.flags |= kRowBias;
      for (const auto& [t, bias] : s.logit_bias) logit_bias[vo + static_cast<size_t>(t)] = bias;
    }
  }
}

SamplerKernelParams SamplerBatch::host_params(const float* logits, float* probs, int32_t* tokens,
                                              int32_t* status) const {
  SamplerKernelParams p;
  p.logits = logits;
  p.rows = rows.data();
  p.allowed_bitmap = allowed.empty() ? nullptr : allowed.data();
  p.banned_bitmap = banned.empty() ? nullptr : banned.data();
  p.prompt_bitmap = prompt.empty() ? nullptr : prompt.data();
  p.output_counts = output_counts.empty() ? nullptr : output_counts.data();
  p.logit_bias = logit_bias.empty() ? nullptr : logit_bias.data();
  p.probs = probs;
  p.tokens = tokens;
  p.status = status;
  p.batch = batch;
  p.vocab = vocab;
  return p;
}

}  // namespace specula
