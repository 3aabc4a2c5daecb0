#include "draft/registry/drafter_registry.h"

#include "draft/heads/head_drafters.h"
#include "draft/model_drafter.h"
#include "draft/prompt_lookup_drafter.h"
#include "draft/synthetic_drafter.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/registry/torch_module.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

// One line per drafter kind: KIND(kind, usage, maker). `kind` is the spec's text before ':', `usage` its syntax
// for messages, `maker` a DrafterMaker defined in the drafter's own file. A spec whose kind is not here is read
// as a language model (any kind of harness/models/registry) drafting with the draft's sampling parameters.
#define SPECULA_DRAFTER_KINDS(KIND)                                                    \
  KIND("prompt-lookup", "prompt-lookup[:max_n=N,min_n=M]", make_prompt_lookup_drafter) \
  KIND("ngram", "ngram:PATH", make_ngram_drafter)                                      \
  KIND("synthetic", "synthetic:alpha=A", make_synthetic_drafter)                       \
  KIND("medusa", "medusa:DIR[,...]", make_torch_head_drafter)                          \
  KIND("eagle", "eagle:DIR[,...]", make_torch_head_drafter)

struct DrafterKind {
  const char* kind;
  const char* usage;
  DrafterMaker make;
};

}  // namespace

// Each maker's declaration, so that registering a drafter takes its line above and nothing else.
#define SPECULA_DECLARE_MAKER(kind, usage, maker) std::shared_ptr<const DrafterFactory> maker(const DrafterSpec& spec);
SPECULA_DRAFTER_KINDS(SPECULA_DECLARE_MAKER)
#undef SPECULA_DECLARE_MAKER

// Medusa and EAGLE heads read a LibTorch target: the LibTorch module's (harness/models/registry/torch_module.h).
std::shared_ptr<const DrafterFactory> make_torch_head_drafter(const DrafterSpec& spec) {
  return torch_function<decltype(&make_head_drafter)>("make_head_drafter")(spec);
}

namespace {

#define SPECULA_TABLE_ROW(kind, usage, maker) {kind, usage, maker},
const DrafterKind kDrafterKinds[] = {SPECULA_DRAFTER_KINDS(SPECULA_TABLE_ROW)};
#undef SPECULA_TABLE_ROW

}  // namespace

std::vector<std::string> drafter_kind_usages() {
  std::vector<std::string> out;
  for (const DrafterKind& k : kDrafterKinds) out.emplace_back(k.usage);
  return out;
}

namespace {

[[noreturn]] void fail_unknown_kind(const std::string& spec) {
  std::string known;
  for (const std::string& usage : drafter_kind_usages()) known += ", " + usage;
  fail_parameter("draft", ": unknown model '", spec, "' (known: ", language_model_kind_usages(), ")",
                 "; or a drafter: ", known.substr(2));
}

}  // namespace

void check_drafter_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon), rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "prompt-lookup") {
    parse_prompt_lookup_options(rest, spec);
  } else if (kind == "synthetic") {
    parse_synthetic_alpha(rest, spec);
  } else if (kind == "ngram" || kind == "medusa" || kind == "eagle" || is_language_model_kind(kind)) {
    if (rest.empty()) fail_parameter("draft", ": '", spec, "' names no path (", kind, ":PATH)");
  } else {
    fail_unknown_kind(spec);
  }
}

std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params,
                                                   std::shared_ptr<const LanguageModel> target,
                                                   const SamplingParams& target_params,
                                                   const std::string& model_device) {
  const size_t colon = spec.find(':');
  DrafterSpec parsed{spec,         spec.substr(0, colon), colon == std::string::npos ? "" : spec.substr(colon + 1),
                     draft_params, std::move(target),     target_params};
  for (const DrafterKind& k : kDrafterKinds)
    if (parsed.kind == k.kind) return k.make(parsed);
  if (!is_language_model_kind(parsed.kind)) fail_unknown_kind(spec);
  return std::make_shared<ModelDrafterFactory>(load_language_model(spec, "draft", "auto", model_device), draft_params);
}

}  // namespace specula
