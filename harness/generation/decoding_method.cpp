#include "harness/generation/decoding_method.h"

#include <algorithm>

#include "kernels/shared/error.h"
#include "verify/verifiers/verify_methods.h"

namespace specula {

DecodingMethod parse_decoding_method(const std::string& text) {
  DecodingMethod m;
  m.name = text;
  if (text == "ar") return m;
  if (text == "beam") {
    m.beam = true;
    return m;
  }
  m.verify = find_verify_method(text);
  if (!m.verify) fail("unknown method '", text, "' (known: ", decoding_method_names(", "), ")");
  return m;
}

std::string decoding_method_names(const std::string& separator, bool mark_lossy) {
  std::string names = "ar";
  for (VerifyMethod m : verify_methods())
    names += separator + verify_method_name(m) + (mark_lossy && is_lossy(m) ? " (lossy)" : "");
  return names + separator + "beam";
}

bool DecodingMethod::verifies_trees() const { return verify && specula::verifies_trees(*verify); }

GenerationConfig generation_config(const DecodingMethod& method, const DraftShape& shape, int32_t max_new_tokens,
                                   uint64_t seed) {
  GenerationConfig config;
  config.method = method.verify;
  config.num_draft_tokens = shape.num_draft_tokens_given || max_new_tokens <= 0
                                ? shape.num_draft_tokens
                                : std::min(shape.num_draft_tokens, max_new_tokens);
  config.tree_shape = shape.tree_shape;
  // Refused here, before any model loads, as the Generator refuses it.
  if (!method.verifies_trees() && !config.tree_shape.empty()) fail_parameter("tree", " is only used by method tree");
  check_draft_schedule(shape.num_draft_tokens_schedule, method.verifies_trees(), method.name);
  check_confidence_threshold(shape.confidence_threshold, method.verifies_trees(), method.name);
  if (method.speculative()) {
    config.num_draft_tokens_schedule = shape.num_draft_tokens_schedule;
    config.confidence_threshold = shape.confidence_threshold;
  }
  // Before a tree method's chain of K is made of it.
  if (config.method && config.tree_shape.empty() && config.num_draft_tokens < 1)
    fail_parameter("num_draft_tokens", " must be >= 1, got ", config.num_draft_tokens);
  if (method.verifies_trees() && config.tree_shape.empty()) config.tree_shape.assign(config.num_draft_tokens, 1);
  config.tree_sampling = shape.tree_sampling;
  config.max_new_tokens = max_new_tokens;
  config.seed = seed;
  // A draft deeper than the whole generation can never be emitted past max_new_tokens: bounded before any work,
  // like K's hard cap (generator.h) and a tree's 4096 nodes.
  if (max_new_tokens > kMaxNewTokens)
    fail_parameter("max_new_tokens", " must be <= ", kMaxNewTokens, ", got ", max_new_tokens);
  const int64_t depth = draft_depth(config);
  if (config.method && config.tree_shape.empty() && depth > kMaxDraftTokens)
    fail_parameter("num_draft_tokens", " must be <= ", kMaxDraftTokens, ", got ", depth);
  if (config.method && max_new_tokens > 0 && depth > max_new_tokens)
    fail_parameter(shape.tree_shape.empty() ? "num_draft_tokens" : "tree", " asks for a draft ", depth,
                   " deep, more than the ", max_new_tokens, " tokens of max_new_tokens");
  return config;
}

void apply_method_temperature(const DecodingMethod& method, bool temperature_given, SamplingParams& params) {
  if (method.verify && verifies_greedily(*method.verify) && !temperature_given) params.temperature = 0.0f;
}

void check_method_temperature(const std::optional<VerifyMethod>& method, const SamplingParams& params) {
  if (method && verifies_greedily(*method) && !params.greedy())
    fail_parameter("method", " ", verify_method_name(*method), " verifies greedy decoding: use temperature 0 (got ",
                   params.temperature, ")");
}

}  // namespace specula
