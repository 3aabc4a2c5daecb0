// Model sources named on the command line: `bigram:PATH` now; `transformer:PATH` and `hf:DIR` register here
// as they land. Drafters: any model, plus prompt lookup, n-gram and synthetic (load_drafter).
#pragma once

#include <memory>
#include <string>

#include "draft/drafter.h"
#include "harness/models/language_model.h"
#include "verify/sampling_params.h"

namespace specula {

// A target (or draft) language model from "kind:PATH". Throws Error naming the option and value.
// weights_dtype: the matrices' dtype in memory for transformer: and hf: models (float32 | float16 | bfloat16 |
// auto = as stored).
std::shared_ptr<const LanguageModel> load_language_model(const std::string& spec, const std::string& option,
                                                         const std::string& weights_dtype = "auto");

// A drafter from its spec (the value of --draft):
//   prompt-lookup[:max_n=N,min_n=M]  n-gram match against the context (point masses)
//   ngram:PATH                       a Kneser-Ney n-gram model from `specula train-ngram`, sampled with `draft_params`
//   synthetic:alpha=A                q = A p + (1 - A) delta_argmin p, p from `target` with `target_params`
//   any language model spec          (bigram:PATH, ...) sampled with `draft_params`
// `target` supplies the vocabulary of prompt lookup and the p of the synthetic drafter. Throws Error
// naming the spec on bad input; a vocabulary that differs from the target's is refused by the Generator.
std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params,
                                                   std::shared_ptr<const LanguageModel> target,
                                                   const SamplingParams& target_params);

}  // namespace specula
