#include "verify/sampling/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/shared/error.h"
#include "verify/sampling/token_constraint.h"

namespace specula {
namespace {

constexpr FilterStage kCanonicalOrder[] = {FilterStage::min_p,     FilterStage::top_k, FilterStage::top_p,
                                           FilterStage::typical_p, FilterStage::tfs_z, FilterStage::mirostat};

bool filter_active(const SamplingParams& s, FilterStage stage) {
  switch (stage) {
    case FilterStage::min_p:
      return s.min_p > 0.0f;
    case FilterStage::top_k:
      return s.top_k > 0;
    case FilterStage::top_p:
      return s.top_p < 1.0f;
    case FilterStage::typical_p:
      return s.typical_p < 1.0f;
    case FilterStage::tfs_z:
      return s.tfs_z < 1.0f;
    case FilterStage::mirostat:
      return s.mirostat == 2;
  }
  return false;
}

void check_token(const char* name, Token t, int32_t vocab_size) {
  if (t < 0 || t >= vocab_size) fail(name, ": token id ", t, " is outside the vocabulary [0, ", vocab_size, ")");
}

void check_unit_open_closed(const char* name, float v) {  // (0, 1]
  if (!(v > 0.0f && v <= 1.0f)) fail(name, " must be in (0, 1], got ", v);
}

}  // namespace

const char* filter_stage_name(FilterStage stage) {
  switch (stage) {
    case FilterStage::min_p:
      return "min_p";
    case FilterStage::top_k:
      return "top_k";
    case FilterStage::top_p:
      return "top_p";
    case FilterStage::typical_p:
      return "typical_p";
    case FilterStage::tfs_z:
      return "tfs_z";
    case FilterStage::mirostat:
      return "mirostat";
  }
  return "?";
}

std::vector<FilterStage> parse_filter_order(const std::string& text, const std::string& option) {
  std::vector<FilterStage> order;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    std::replace(item.begin(), item.end(), '-', '_');
    if (item == "typical") item = "typical_p";
    if (item == "tfs") item = "tfs_z";
    bool found = false;
    for (FilterStage stage : kCanonicalOrder) {
      if (item == filter_stage_name(stage)) {
        if (std::find(order.begin(), order.end(), stage) != order.end())
          fail_parameter(option, ": '", item, "' is listed twice in '", text, "'");
        order.push_back(stage);
        found = true;
      }
    }
    if (!found)
      fail_parameter(option, ": unknown stage '", item, "' in '", text,
                     "' (known: min_p, top_k, top_p, typical_p, tfs_z, mirostat)");
  }
  return order;
}

bool SamplingParams::uses_history() const {
  return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f || !bad_words.empty() ||
         (min_tokens > 0 && !stop_tokens.empty()) || (mirostat == 2 && !greedy()) || constraint != nullptr;
}

void SamplingParams::validate(int32_t vocab_size) const {
  if (vocab_size <= 0) fail("vocabulary size must be positive, got ", vocab_size);
  if (!std::isfinite(temperature) || temperature < 0.0f || (temperature > 0.0f && temperature < kMinTemperature))
    fail("temperature must be 0 (greedy) or a finite number >= ", kMinTemperature, ", got ", temperature);
  if (!std::isfinite(dynatemp_range) || dynatemp_range < 0.0f)
    fail("dynatemp_range must be a finite number >= 0, got ", dynatemp_range);
  if (!std::isfinite(dynatemp_exponent) || dynatemp_exponent <= 0.0f)
    fail("dynatemp_exponent must be a finite number > 0, got ", dynatemp_exponent);
  check_unit_open_closed("top_p", top_p);
  check_unit_open_closed("typical_p", typical_p);
  check_unit_open_closed("tfs_z", tfs_z);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("min_p must be in [0, 1], got ", min_p);
  if (top_k < -1) fail("top_k must be >= 1, or 0 / -1 for off, got ", top_k);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    fail("repetition_penalty must be a finite number > 0, got ", repetition_penalty);
  if (!std::isfinite(frequency_penalty)) fail("frequency_penalty must be finite, got ", frequency_penalty);
  if (!std::isfinite(presence_penalty)) fail("presence_penalty must be finite, got ", presence_penalty);
  if (mirostat != 0 && mirostat != 2) fail("mirostat must be 0 (off) or 2 (mirostat v2), got ", mirostat);
  if (!std::isfinite(mirostat_tau) || mirostat_tau <= 0.0f) fail("mirostat_tau must be > 0, got ", mirostat_tau);
  if (!std::isfinite(mirostat_eta) || mirostat_eta < 0.0f) fail("mirostat_eta must be >= 0, got ", mirostat_eta);
  if (min_tokens < 0) fail("min_tokens must be >= 0, got ", min_tokens);
  for (Token t : allowed_tokens) check_token("allowed_tokens", t, vocab_size);
  for (Token t : banned_tokens) check_token("banned_tokens", t, vocab_size);
  for (Token t : stop_tokens) check_token("stop_tokens", t, vocab_size);
  for (const auto& [t, bias] : logit_bias) {
    check_token("logit_bias", t, vocab_size);
    if (std::isnan(bias) || bias == INFINITY)
      fail("logit_bias: bias for token ", t, " must be a number < +inf, got ", bias);
  }
  for (const auto& word : bad_words) {
    if (word.empty()) fail("bad_words: an entry is empty");
    for (Token t : word) check_token("bad_words", t, vocab_size);
  }
  if (constraint && constraint->vocab_size() != vocab_size)
    fail("constraint ", constraint->description(), ": built over ", constraint->vocab_size(),
         " token strings but the vocabulary has ", vocab_size, " tokens");
  if (!allowed_tokens.empty()) {
    bool any = false;
    for (Token t : allowed_tokens)
      any = any || std::find(banned_tokens.begin(), banned_tokens.end(), t) == banned_tokens.end();
    if (!any) fail("allowed_tokens and banned_tokens leave no token at all (every allowed token is banned)");
  }
}

std::vector<FilterStage> SamplingParams::active_filters() const {
  std::vector<FilterStage> out;
  for (FilterStage s : order)
    if (filter_active(*this, s)) out.push_back(s);
  for (FilterStage s : kCanonicalOrder)
    if (filter_active(*this, s) && std::find(order.begin(), order.end(), s) == order.end()) out.push_back(s);
  return out;
}

std::string SamplingParams::describe() const {
  std::ostringstream os;
  os << "logits";
  const bool masks = !allowed_tokens.empty() || !banned_tokens.empty() || !bad_words.empty() ||
                     (min_tokens > 0 && !stop_tokens.empty()) || !logit_bias.empty();
  if (masks) os << " -> masks";
  if (constraint) os << " -> constraint";
  os << " -> penalties";
  if (greedy()) return os.str() + " -> greedy";
  os << (dynatemp_range > 0.0f ? " -> dynatemp" : " -> temperature");
  std::vector<FilterStage> stages = order;
  for (FilterStage s : kCanonicalOrder)
    if (filter_active(*this, s) && std::find(stages.begin(), stages.end(), s) == stages.end()) stages.push_back(s);
  for (FilterStage s : stages) os << " -> " << filter_stage_name(s);
  os << " -> dist";
  return os.str();
}

SamplingParams at_unit_temperature(SamplingParams params) {
  if (!params.greedy()) return params;
  params.temperature = 1.0f;
  params.dynatemp_range = 0.0f;
  params.min_p = 0.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.typical_p = 1.0f;
  params.tfs_z = 1.0f;
  params.mirostat = 0;
  return params;
}

}  // namespace specula
