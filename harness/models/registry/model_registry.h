// The model kinds a spec "kind:PATH" can name (--target, --draft, [experiment] target/draft), as one table
// (model_registry.cpp): each kind's loader and its tokenizer.
#pragma once

#include <memory>
#include <string>

#include "harness/models/language_model.h"
#include "harness/models/tokenizer.h"

namespace specula {

// A target (or draft) language model from "kind:PATH". Throws Error naming the option and value.
// weights_dtype: the matrices' dtype in memory for transformer: and hf: models (float32 | float16 | bfloat16 |
// auto = as stored).
// device: where transformer: and hf: models compute: "cpu" (Specula's decoding step) or "cuda" (the GPU, through
// a CUDA LibTorch); for transformer: also "libtorch", the GPU's path (LibTorch's operations) on the CPU, for tests
// (transformer_language_model.h); hf: takes it as "cpu".
std::shared_ptr<const LanguageModel> load_language_model(const std::string& spec, const std::string& option,
                                                         const std::string& weights_dtype = "auto",
                                                         const std::string& device = "cpu");

// The tokenizer of a model named by a "kind:PATH" spec (as for --target): for transformer:DIR, the one named
// in DIR/config.json; for hf:DIR, its tokenizer files. nullptr for models without one (bigram tables speak
// token ids only) and for specs that name no model kind. Throws Error on a missing or malformed config.
std::shared_ptr<const Tokenizer> load_tokenizer_for(const std::string& model_spec);

// What a spec names, read without loading it: a known kind, a path, and that the path is there as the kind needs it (a
// file for bigram:, a folder for transformer: and hf:). Throws Error naming the option and the spec. A drafter's model
// is checked so before the target loads (its files are read only when its settings run).
void check_language_model_spec(const std::string& spec, const std::string& option);

// The vocabulary of the model a spec names, read from its description without loading its weights (a transformer's
// or hf: model's config.json; a bigram table, which is small), so that a drafter's vocabulary is compared with the
// target's before either loads. Throws Error as check_language_model_spec does, or naming the file.
int32_t language_model_vocab_size(const std::string& spec, const std::string& option);

// Whether `kind` (a spec's text before ':') names a model kind.
bool is_language_model_kind(const std::string& kind);

// The kinds' syntaxes, comma-separated ("bigram:PATH, transformer:DIR, hf:DIR"), for messages.
std::string language_model_kind_usages();

}  // namespace specula
