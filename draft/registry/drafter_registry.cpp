#include "draft/registry/drafter_registry.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "draft/draft_vocabulary.h"
#include "draft/heads/head_drafter_spec.h"
#include "draft/heads/head_drafters.h"
#include "draft/model_drafter.h"
#include "draft/ngram_model.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/registry/torch_module.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

// One line per drafter kind: KIND(kind, usage, maker, check, doubts). `kind` is the spec's text before ':', `usage`
// its syntax for messages, `maker` a DrafterMaker defined in the drafter's own file, `check` a DrafterSpecCheck that
// reads the spec without loading anything (check_drafter_spec), defined beside the maker, and `doubts` whether its
// chains stop on the draft's doubt (DrafterFactory::stops_on_confidence, read before it loads). A spec whose kind is
// not here is read as a language model (any kind of harness/models/registry) drafting with the draft's sampling
// parameters, which doubts.
#define SPECULA_DRAFTER_KINDS(KIND)                                                                              \
  KIND("prompt-lookup", "prompt-lookup[:max_n=N,min_n=M]", make_prompt_lookup_drafter, check_prompt_lookup_spec, \
       false)                                                                                                    \
  KIND("ngram", "ngram:PATH", make_ngram_drafter, check_ngram_spec, true)                                        \
  KIND("synthetic", "synthetic:alpha=A", make_synthetic_drafter, check_synthetic_spec, true)                     \
  KIND("medusa", "medusa:DIR[,...]", make_torch_head_drafter, check_head_spec, false)                            \
  KIND("eagle", "eagle:DIR[,...]", make_torch_head_drafter, check_head_spec, false)

// The kinds above that draft over a vocabulary of their own files, each with the reader of its size from what
// describes it (never its weights: drafter_vocab_size). A kind not here drafts over the target's vocabulary
// (prompt lookup copies the context, the synthetic drafter reshapes the target's p), or has its vocabulary compared
// with the target's when it loads (the Generator's check).
struct OwnVocabulary {
  const char* kind;
  int32_t (*read)(const DrafterSpec& spec);
};
int32_t ngram_vocabulary(const DrafterSpec& spec) { return NgramModel::read_vocab_size(spec.rest); }
int32_t head_vocabulary(const DrafterSpec& spec) { return head_drafter_vocab_size(spec.kind, spec.rest, spec.spec); }
const OwnVocabulary kOwnVocabularies[] = {
    {"ngram", ngram_vocabulary}, {"medusa", head_vocabulary}, {"eagle", head_vocabulary}};

struct DrafterKind {
  const char* kind;
  const char* usage;
  DrafterMaker make;
  DrafterSpecCheck check;
  bool doubts;
};

}  // namespace

// A language model drafting: its path must be there as its kind needs it (what it names is read when the drafter
// loads).
void check_path_spec(const DrafterSpec& spec) {
  if (spec.rest.empty()) fail_parameter("draft", ": '", spec.spec, "' names no path (", spec.kind, ":PATH)");
  check_language_model_spec(spec.spec, "draft");
}

// Medusa and EAGLE heads: the spec's options, and the folders and files it names (read when the drafter loads).
void check_head_spec(const DrafterSpec& spec) { check_head_drafter_spec(spec.kind, spec.rest, spec.spec); }

// Each maker's and check's declaration, so that registering a drafter takes its line above and nothing else.
#define SPECULA_DECLARE_MAKER(kind, usage, maker, check, doubts)        \
  std::shared_ptr<const DrafterFactory> maker(const DrafterSpec& spec); \
  void check(const DrafterSpec& spec);
SPECULA_DRAFTER_KINDS(SPECULA_DECLARE_MAKER)
#undef SPECULA_DECLARE_MAKER

// Medusa and EAGLE heads read a LibTorch target: the LibTorch module's (harness/models/registry/torch_module.h).
std::shared_ptr<const DrafterFactory> make_torch_head_drafter(const DrafterSpec& spec) {
  return torch_function<decltype(&make_head_drafter)>("make_head_drafter")(spec);
}

namespace {

#define SPECULA_TABLE_ROW(kind, usage, maker, check, doubts) {kind, usage, maker, check, doubts},
const DrafterKind kDrafterKinds[] = {SPECULA_DRAFTER_KINDS(SPECULA_TABLE_ROW)};
#undef SPECULA_TABLE_ROW

}  // namespace

std::vector<std::string> drafter_kind_usages() {
  std::vector<std::string> out;
  for (const DrafterKind& k : kDrafterKinds) out.emplace_back(k.usage);
  return out;
}

namespace {

DrafterSpec parse_spec(const std::string& spec) {
  const size_t colon = spec.find(':');
  DrafterSpec parsed;
  parsed.spec = spec;
  parsed.kind = spec.substr(0, colon);
  parsed.rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  return parsed;
}

[[noreturn]] void fail_unknown_kind(const std::string& spec) {
  std::string known;
  for (const std::string& usage : drafter_kind_usages()) known += ", " + usage;
  fail_parameter("draft", ": unknown model '", spec, "' (known: ", language_model_kind_usages(), ")",
                 "; or a drafter: ", known.substr(2));
}

}  // namespace

void check_drafter_spec(const std::string& spec) {
  const DrafterSpec parsed = parse_spec(spec);
  for (const DrafterKind& k : kDrafterKinds)
    if (parsed.kind == k.kind) return k.check(parsed);
  if (!is_language_model_kind(parsed.kind)) fail_unknown_kind(spec);
  check_path_spec(parsed);
}

std::optional<int32_t> drafter_vocab_size(const std::string& spec) {
  check_drafter_spec(spec);
  const DrafterSpec parsed = parse_spec(spec);
  for (const OwnVocabulary& v : kOwnVocabularies)
    if (parsed.kind == v.kind) return v.read(parsed);
  for (const DrafterKind& k : kDrafterKinds)
    if (parsed.kind == k.kind) return std::nullopt;
  return language_model_vocab_size(spec, "draft");
}

void check_drafter_vocabulary(const std::string& drafter_spec, int32_t target_vocab, const std::string& target_spec) {
  // Heads read a transformer target's features: said before a vocabulary comparison would say less.
  const std::string kind = parse_spec(drafter_spec).kind, target_kind = parse_spec(target_spec).kind;
  if ((kind == "medusa" || kind == "eagle") && target_kind != "transformer" && target_kind != "hf")
    fail_parameter("draft", " ", drafter_spec, ": ", kind, " heads read a transformer target's features; the target ",
                   target_spec, " is not a transformer (use --target transformer:DIR)");
  const std::optional<int32_t> draft = drafter_vocab_size(drafter_spec);
  if (draft && *draft != target_vocab)
    fail("vocabulary mismatch: target ", target_spec, " has ", target_vocab, " tokens but draft ", drafter_spec,
         " has ", *draft);
}

int32_t drafter_max_draft_depth(const std::string& spec) {
  const DrafterSpec parsed = parse_spec(spec);
  return parsed.kind == "medusa" ? head_drafter_max_depth(parsed.kind, parsed.rest, spec) : 0;
}

void check_drafter_depth(const std::string& spec, int64_t depth, const char* shape_key) {
  if (const int32_t most = drafter_max_draft_depth(spec); most > 0 && depth > most)
    fail_parameter(shape_key, " asks for a draft ", depth, " deep, but ", spec, " drafts at most ", most,
                   " tokens ahead");
}

void check_drafter_confidence(const std::string& spec, double threshold) {
  const std::string kind = parse_spec(spec).kind;
  const auto row = std::find_if(std::begin(kDrafterKinds), std::end(kDrafterKinds),
                                [&](const DrafterKind& k) { return kind == k.kind; });
  if (threshold > 0.0 && row != std::end(kDrafterKinds) && !row->doubts)
    fail_parameter("confidence_threshold", " ", threshold, ": drafter ", spec,
                   " does not stop on its confidence (a draft model, an n-gram and the synthetic drafter do)");
}

std::shared_ptr<const DrafterFactory> load_drafter(const std::string& spec, const SamplingParams& draft_params,
                                                   std::shared_ptr<const LanguageModel> target,
                                                   const SamplingParams& target_params,
                                                   const std::string& model_device) {
  DrafterSpec parsed = parse_spec(spec);
  parsed.draft_params = draft_params;
  parsed.target = std::move(target);
  parsed.target_params = target_params;
  for (const DrafterKind& k : kDrafterKinds)
    if (parsed.kind == k.kind) return k.make(parsed);
  if (!is_language_model_kind(parsed.kind)) fail_unknown_kind(spec);
  auto model = load_language_model(spec, "draft", "auto", model_device);
  if (parsed.target) check_draft_vocabulary(*parsed.target, model->vocab_size(), model->description());
  return std::make_shared<ModelDrafterFactory>(std::move(model), draft_params);
}

}  // namespace specula
