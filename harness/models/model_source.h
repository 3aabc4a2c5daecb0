// Model sources named on the command line: `bigram:PATH` now; `transformer:PATH`, `hf:DIR` and the
// non-model drafters (prompt lookup, n-gram) register here as they land.
#pragma once

#include <memory>
#include <string>

#include "draft/drafter.h"
#include "harness/models/language_model.h"
#include "verify/sampling_params.h"

namespace specula {

// A target (or draft) language model from "kind:PATH". Throws Error naming the option and value.
std::shared_ptr<const LanguageModel> load_language_model(const std::string& spec, const std::string& option);

// A drafter from "kind:PATH" (any language model, sampled with `draft_params`).
std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params);

}  // namespace specula
