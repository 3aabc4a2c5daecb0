// The drafter kinds `--draft` (and `[experiment] draft`) can name, as one table (drafter_registry.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "draft/drafter.h"
#include "harness/models/language_model.h"
#include "verify/sampling/sampling_params.h"

namespace specula {

// A drafter from its spec (the value of --draft):
//   prompt-lookup[:max_n=N,min_n=M]  n-gram match against the context (point masses)
//   ngram:PATH                       a Kneser-Ney n-gram model from `specula train-ngram`, sampled with `draft_params`
//   synthetic:alpha=A                q = A p + (1 - A) delta_argmin p, p from `target` with `target_params`
//   medusa:DIR[,...], eagle:DIR[,...] heads on the target's features
//   any language model spec          (bigram:PATH, transformer:DIR, hf:DIR) sampled with `draft_params`
// `target` supplies the vocabulary of prompt lookup and the p of the synthetic drafter. Throws Error
// naming the spec on bad input; a vocabulary that differs from the target's is refused by the Generator.
// model_device: where a language-model drafter computes (model_registry.h's device); heads compute beside the target
// (on its device when it takes LibTorch's operations: a GPU, or `libtorch`).
std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params,
                                                   std::shared_ptr<const LanguageModel> target,
                                                   const SamplingParams& target_params,
                                                   const std::string& model_device = "cpu");

// The spec as far as it can be read without loading anything, so that a sweep refuses a bad one before its first
// record: a known kind, a path where the kind takes one, and prompt-lookup's and synthetic's options read as
// load_drafter reads them. Files (and Medusa/EAGLE options) are read, and refused, when the drafter loads. Throws
// Error naming the spec.
void check_drafter_spec(const std::string& spec);

// The vocabulary a drafter drafts over, read without loading its weights (a model's config, an n-gram model's
// header, heads' configs, which are checked against their target's here too), after check_drafter_spec's checks;
// nullopt for the drafter kinds without a vocabulary of their own (prompt-lookup, synthetic). Throws Error naming the
// spec or the file.
std::optional<int32_t> drafter_vocab_size(const std::string& spec);

// Refuses a drafter whose vocabulary (drafter_vocab_size) is not the target's (`target_vocab`, e.g. from
// language_model_vocab_size), so that a run refuses it before any model loads, not when its setting comes. Throws
// Error naming both specs and both sizes.
void check_drafter_vocabulary(const std::string& drafter_spec, int32_t target_vocab, const std::string& target_spec);

// How many tokens ahead a drafter can draft (DrafterFactory::max_draft_depth), read without loading it, after
// check_drafter_spec's checks: Medusa's heads from their config; 0 where there is no bound.
int32_t drafter_max_draft_depth(const std::string& spec);

// Refuses a draft `depth` tokens deep (`shape_key`: num_draft_tokens or tree) from a drafter that drafts fewer
// (drafter_max_draft_depth), as the Generator refuses it once the drafter loads: a run says it before its first record.
void check_drafter_depth(const std::string& spec, int64_t depth, const char* shape_key);

// Refuses a chain's early stop on the draft's doubt (`threshold` > 0, DraftRequest::confidence_threshold) for a
// drafter kind that proposes without a law to doubt (prompt-lookup, medusa, eagle:
// DrafterFactory::stops_on_confidence), read from the spec alone, as the Generator refuses it once the drafter loads: a
// ParameterError for "confidence_threshold".
void check_drafter_confidence(const std::string& spec, double threshold);

// The registered kinds' spec syntaxes, for help and error messages.
std::vector<std::string> drafter_kind_usages();

}  // namespace specula
