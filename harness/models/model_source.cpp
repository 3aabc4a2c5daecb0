#include "harness/models/model_source.h"

#include "draft/model_drafter.h"
#include "harness/models/table_model.h"
#include "verify/error.h"

namespace specula {

std::shared_ptr<const LanguageModel> load_language_model(const std::string& spec, const std::string& option) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string path = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "bigram") {
    if (path.empty()) fail("--", option, ": 'bigram:' needs a path, e.g. bigram:model.txt");
    return std::make_shared<TableModel>(load_bigram_model(path));
  }
  fail("--", option, ": unknown model '", spec, "' (known: bigram:PATH)");
}

std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params) {
  return std::make_shared<ModelDrafterFactory>(load_language_model(spec, "draft"), draft_params);
}

}  // namespace specula
