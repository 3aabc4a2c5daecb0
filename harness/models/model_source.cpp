#include "harness/models/model_source.h"

#include <iostream>

#include "draft/head_drafters.h"
#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
#include "draft/prompt_lookup_drafter.h"
#include "draft/synthetic_drafter.h"
#include "harness/models/hf/hf_model.h"
#include "harness/models/hf/memory_budget.h"
#include "harness/models/table_model.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "verify/error.h"

namespace specula {

std::shared_ptr<const LanguageModel> load_language_model(const std::string& spec, const std::string& option,
                                                         const std::string& weights_dtype) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string path = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "bigram") {
    if (path.empty()) fail("--", option, ": 'bigram:' needs a path, e.g. bigram:model.txt");
    return std::make_shared<TableModel>(load_bigram_model(path));
  }
  if (kind == "transformer") {
    if (path.empty()) fail("--", option, ": 'transformer:' needs a checkpoint folder, e.g. transformer:results/models/target");
    auto model = std::make_shared<TransformerLanguageModel>(path, weights_dtype);
    std::cerr << "transformer:" << path << ": " << model->parameter_count() << " parameters, " << model->matrices_dtype()
              << " matrices, resident " << format_bytes(model->resident_weight_bytes()) << "\n";
    return model;
  }
  if (kind == "hf") {
    if (path.empty()) fail("--", option, ": 'hf:' needs a Hugging Face model folder, e.g. hf:models/TinyLlama");
    HfLoadOptions options;
    options.weights_dtype = weights_dtype;
    return load_hf_language_model(path, options);
  }
  fail("--", option, ": unknown model '", spec, "' (known: bigram:PATH, transformer:DIR, hf:DIR)");
}

std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params,
                                                   std::shared_ptr<const LanguageModel> target,
                                                   const SamplingParams& target_params) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "prompt-lookup" || kind == "synthetic") {
    if (!target) fail("--draft ", spec, ": needs the target model");
    if (kind == "prompt-lookup")
      return std::make_shared<PromptLookupDrafterFactory>(parse_prompt_lookup_options(rest, spec), target->vocab_size());
    return std::make_shared<SyntheticDrafterFactory>(target, target_params, parse_synthetic_alpha(rest, spec));
  }
  if (kind == "medusa" || kind == "eagle") return load_head_drafter(spec, target);
  if (kind == "ngram") {
    if (rest.empty()) fail("--draft: 'ngram:' needs a path, e.g. ngram:model.ngram (from specula train-ngram)");
    return std::make_shared<NgramDrafterFactory>(std::make_shared<NgramModel>(NgramModel::load(rest)), draft_params, spec);
  }
  try {
    return std::make_shared<ModelDrafterFactory>(load_language_model(spec, "draft"), draft_params);
  } catch (const Error& e) {
    if (std::string(e.what()).find("unknown model") == std::string::npos) throw;
    fail(e.what(), "; or a drafter: prompt-lookup[:max_n=N,min_n=M], ngram:PATH, synthetic:alpha=A,"
         " medusa:DIR[,...], eagle:DIR[,...]");
  }
}

}  // namespace specula
