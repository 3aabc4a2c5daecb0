#include "verify/sampling/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/shared/error.h"
#include "verify/sampling/filter_stages.h"
#include "verify/sampling/token_constraint.h"
#include "verify/sampling/token_history.h"

namespace specula {
namespace {

bool filter_active(const SamplingParams& s, FilterStage stage) { return filter_stage(stage).active(s); }

void check_token(const char* name, Token t, int32_t vocab_size) {
  if (t < 0 || t >= vocab_size)
    fail_parameter(name, ": token id ", t, " is outside the vocabulary [0, ", vocab_size, ")");
}

}  // namespace

const char* filter_stage_name(FilterStage stage) { return filter_stage(stage).name; }

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
    std::string known;
    bool found = false;
    for (size_t row = 0; row < filter_stages().size(); ++row) {
      const FilterStage stage = static_cast<FilterStage>(row);
      known += (known.empty() ? "" : ", ") + std::string(filter_stage_name(stage));
      if (item != filter_stage_name(stage)) continue;
      if (std::find(order.begin(), order.end(), stage) != order.end())
        fail_parameter(option, ": '", item, "' is listed twice in '", text, "'");
      order.push_back(stage);
      found = true;
    }
    if (!found) fail_parameter(option, ": unknown stage '", item, "' in '", text, "' (known: ", known, ")");
  }
  return order;
}

bool SamplingParams::ends_with(Token x, const TokenHistory& after) const {
  return std::find(stop_tokens.begin(), stop_tokens.end(), x) != stop_tokens.end() || match_ended(after);
}

bool SamplingParams::match_ended(const TokenHistory& history) const {
  return constraint && constraint->ended(history.constraint_state);
}

bool SamplingParams::uses_history() const {
  if (penalised() || !bad_words.empty() || (min_tokens > 0 && !stop_tokens.empty()) || constraint != nullptr)
    return true;
  for (const FilterStageRow& row : filter_stages())
    if (row.reads_history && row.active(*this) && !greedy()) return true;
  return false;
}

void SamplingParams::validate(int32_t vocab_size) const {
  if (vocab_size <= 0) fail("vocabulary size must be positive, got ", vocab_size);
  if (!std::isfinite(temperature) || temperature < 0.0f || (temperature > 0.0f && temperature < kMinTemperature))
    fail_parameter("temperature", " must be 0 (greedy) or a finite number >= ", kMinTemperature, ", got ", temperature);
  if (!std::isfinite(dynatemp_range) || dynatemp_range < 0.0f)
    fail_parameter("dynatemp_range", " must be a finite number >= 0, got ", dynatemp_range);
  if (!std::isfinite(dynatemp_exponent) || dynatemp_exponent <= 0.0f)
    fail_parameter("dynatemp_exponent", " must be a finite number > 0, got ", dynatemp_exponent);
  for (const FilterStageRow& row : filter_stages()) row.validate(*this);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
    fail_parameter("repetition_penalty", " must be a finite number > 0, got ", repetition_penalty);
  if (!std::isfinite(frequency_penalty))
    fail_parameter("frequency_penalty", " must be finite, got ", frequency_penalty);
  if (!std::isfinite(presence_penalty)) fail_parameter("presence_penalty", " must be finite, got ", presence_penalty);
  if (min_tokens < 0) fail_parameter("min_tokens", " must be >= 0, got ", min_tokens);
  for (Token t : allowed_tokens) check_token("allowed_tokens", t, vocab_size);
  for (Token t : banned_tokens) check_token("banned_tokens", t, vocab_size);
  for (Token t : stop_tokens) check_token("stop_tokens", t, vocab_size);
  for (const auto& [t, bias] : logit_bias) {
    check_token("logit_bias", t, vocab_size);
    if (std::isnan(bias) || bias == INFINITY)
      fail_parameter("logit_bias", ": bias for token ", t, " must be a number < +inf, got ", bias);
  }
  for (const auto& word : bad_words) {
    if (word.empty()) fail_parameter("bad_words", ": an entry is empty");
    for (Token t : word) check_token("bad_words", t, vocab_size);
  }
  if (constraint && constraint->vocab_size() != vocab_size)
    fail("constraint ", constraint->description(), ": built over ", constraint->vocab_size(),
         " token strings but the vocabulary has ", vocab_size, " tokens");
  if (!allowed_tokens.empty()) {
    bool any = false;
    for (Token t : allowed_tokens)
      any = any || std::find(banned_tokens.begin(), banned_tokens.end(), t) == banned_tokens.end();
    if (!any)  // two parameters at fault: named together, for the reader to place
      fail("allowed_tokens and banned_tokens leave no token at all (every allowed token is banned)");
  }
}

std::vector<FilterStage> SamplingParams::active_filters() const {
  std::vector<FilterStage> out;
  for (FilterStage s : order)
    if (filter_active(*this, s)) out.push_back(s);
  for (size_t row = 0; row < filter_stages().size(); ++row) {
    const FilterStage s = static_cast<FilterStage>(row);
    if (filter_active(*this, s) && std::find(order.begin(), order.end(), s) == order.end()) out.push_back(s);
  }
  return out;
}

std::string SamplingParams::unread_because(const std::string& parameter) const {
  constexpr const char* kGreedy = "greedy decoding (temperature 0) applies no temperature and no filter";
  for (const FilterStageRow& row : filter_stages())
    for (size_t i = 0; i < row.parameters.size(); ++i) {
      if (parameter != row.parameters[i].name) continue;
      if (greedy()) return kGreedy;
      if (i > 0 && !row.active(*this)) {
        std::ostringstream os;
        os << row.name << " is off (" << row.parameters[0].name << " = " << row.parameters[0].get(*this) << ")";
        return os.str();
      }
      return "";
    }
  if (parameter == "sampler_order" || parameter == "dynatemp_range" || parameter == "dynatemp_exponent")
    if (greedy()) return kGreedy;
  if (parameter == "dynatemp_exponent" && !(dynatemp_range > 0.0f))
    return "dynamic temperature is off (dynatemp_range = 0)";
  return "";
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
  for (size_t row = 0; row < filter_stages().size(); ++row) {
    const FilterStage s = static_cast<FilterStage>(row);
    if (filter_active(*this, s) && std::find(stages.begin(), stages.end(), s) == stages.end()) stages.push_back(s);
  }
  for (FilterStage s : stages) os << " -> " << filter_stage_name(s);
  os << " -> dist";
  return os.str();
}

SamplingParams at_unit_temperature(SamplingParams params) {
  if (!params.greedy()) return params;
  params.temperature = 1.0f;
  params.dynatemp_range = 0.0f;
  for (const FilterStageRow& row : filter_stages()) row.parameters[0].set(params, row.off);
  return params;
}

}  // namespace specula
