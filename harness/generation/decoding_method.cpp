#include "harness/generation/decoding_method.h"

#include "kernels/shared/error.h"

namespace specula {

DecodingMethod parse_decoding_method(const std::string& text) {
  DecodingMethod m;
  m.name = text;
  if (text == "ar") return m;
  if (text == "beam") {
    m.beam = true;
    return m;
  }
  for (VerifyMethod v :
       {VerifyMethod::greedy, VerifyMethod::chain, VerifyMethod::tree, VerifyMethod::block, VerifyMethod::typical})
    if (text == verify_method_name(v)) {
      m.verify = v;
      return m;
    }
  fail("unknown method '", text, "' (known: ar, greedy, chain, tree, block, typical, beam)");
}

GenerationConfig generation_config(const DecodingMethod& method, const DraftShape& shape, int32_t max_new_tokens,
                                   uint64_t seed) {
  GenerationConfig config;
  config.method = method.verify;
  config.num_draft_tokens = shape.num_draft_tokens;
  config.tree_shape = shape.tree_shape;
  if (method.verify == VerifyMethod::tree && config.tree_shape.empty())
    config.tree_shape.assign(config.num_draft_tokens, 1);
  config.tree_sampling = shape.tree_sampling;
  config.max_new_tokens = max_new_tokens;
  config.seed = seed;
  return config;
}

void apply_method_temperature(const DecodingMethod& method, bool temperature_given, SamplingParams& params) {
  if (method.verify == VerifyMethod::greedy && !temperature_given) params.temperature = 0.0f;
}

}  // namespace specula
