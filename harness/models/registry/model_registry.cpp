#include "harness/models/registry/model_registry.h"

#include "harness/io/input_file.h"
#include "harness/models/hf/hf_config.h"
#include "harness/models/hf/hf_model.h"
#include "harness/models/hf/hf_tokenizer.h"
#include "harness/models/registry/torch_module.h"
#include "harness/models/table_model.h"
#include "harness/models/transformer/byte_tokenizer.h"
#include "harness/models/transformer/transformer_config.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

struct LoadRequest {
  std::string path;  // after "kind:"
  std::string weights_dtype;
  std::string device;
};

std::shared_ptr<const LanguageModel> load_bigram(const LoadRequest& r) {
  return std::make_shared<TableModel>(load_bigram_model(r.path));
}

// The LibTorch kinds are the LibTorch module's (torch_module.h).
std::shared_ptr<const LanguageModel> load_transformer(const LoadRequest& r) {
  return torch_function<decltype(&load_transformer_language_model)>("load_transformer")(r.path, r.weights_dtype,
                                                                                        r.device);
}

std::shared_ptr<const LanguageModel> load_hf(const LoadRequest& r) {
  HfLoadOptions options;
  options.weights_dtype = r.weights_dtype;
  options.device = r.device == "libtorch" ? "cpu" : r.device;
  return torch_function<decltype(&load_hf_language_model)>("load_hf")(r.path, options);
}

std::shared_ptr<const Tokenizer> no_tokenizer(const std::string&) { return nullptr; }

// Vocabularies from what describes the model, never its weights (a bigram table is its own description: small).
int32_t bigram_vocab_size(const std::string& path) { return load_bigram_model(path).vocab_size(); }
int32_t transformer_vocab_size(const std::string& dir) {
  return static_cast<int32_t>(read_checkpoint_config(dir).model.vocab_size);
}
int32_t hf_vocab_size(const std::string& dir) {
  return static_cast<int32_t>(read_hf_config(dir, HfLoadOptions{}.max_seq_len).model.vocab_size);
}

std::shared_ptr<const Tokenizer> transformer_tokenizer(const std::string& dir) {
  const std::string tokenizer = read_checkpoint_config(dir).tokenizer;
  return with_source(dir + "/" + kCheckpointConfigFile, [&] { return make_tokenizer(tokenizer); });
}

struct ModelKind {
  const char* kind;
  const char* usage;    // for messages
  const char* example;  // for the "needs a path" message
  bool folder;          // the path names a folder (else a file)
  std::shared_ptr<const LanguageModel> (*load)(const LoadRequest&);
  std::shared_ptr<const Tokenizer> (*tokenizer)(const std::string& path);
  int32_t (*vocab_size)(const std::string& path);
};

// One line per model kind.
const ModelKind kModelKinds[] = {
    {"bigram", "bigram:PATH", "a path, e.g. bigram:model.txt", false, load_bigram, no_tokenizer, bigram_vocab_size},
    {"transformer", "transformer:DIR", "a checkpoint folder, e.g. transformer:results/models/target", true,
     load_transformer, transformer_tokenizer, transformer_vocab_size},
    {"hf", "hf:DIR", "a Hugging Face model folder, e.g. hf:models/TinyLlama", true, load_hf, load_hf_tokenizer,
     hf_vocab_size},
};

const ModelKind* find_kind(const std::string& kind) {
  for (const ModelKind& k : kModelKinds)
    if (kind == k.kind) return &k;
  return nullptr;
}

}  // namespace

bool is_language_model_kind(const std::string& kind) { return find_kind(kind) != nullptr; }

std::string language_model_kind_usages() {
  std::string out;
  for (const ModelKind& k : kModelKinds) out += std::string(out.empty() ? "" : ", ") + k.usage;
  return out;
}

std::shared_ptr<const LanguageModel> load_language_model(const std::string& spec, const std::string& option,
                                                         const std::string& weights_dtype, const std::string& device) {
  const size_t colon = spec.find(':');
  const ModelKind* kind = find_kind(spec.substr(0, colon));
  if (!kind) fail_parameter(option, ": unknown model '", spec, "' (known: ", language_model_kind_usages(), ")");
  const std::string path = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (path.empty()) fail_parameter(option, ": '", kind->kind, ":' needs ", kind->example);
  return kind->load(LoadRequest{path, weights_dtype, device});
}

void check_language_model_spec(const std::string& spec, const std::string& option) {
  const size_t colon = spec.find(':');
  const ModelKind* kind = find_kind(spec.substr(0, colon));
  if (!kind) fail_parameter(option, ": unknown model '", spec, "' (known: ", language_model_kind_usages(), ")");
  const std::string path = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (path.empty()) fail_parameter(option, ": '", kind->kind, ":' needs ", kind->example);
  if (const std::string problem = path_kind_problem(path, kind->folder); !problem.empty())
    fail_parameter(option, ": '", path, "'", problem);
}

int32_t language_model_vocab_size(const std::string& spec, const std::string& option) {
  check_language_model_spec(spec, option);
  const size_t colon = spec.find(':');
  return find_kind(spec.substr(0, colon))->vocab_size(spec.substr(colon + 1));
}

std::shared_ptr<const Tokenizer> load_tokenizer_for(const std::string& model_spec) {
  const size_t colon = model_spec.find(':');
  if (colon == std::string::npos) return nullptr;
  const ModelKind* kind = find_kind(model_spec.substr(0, colon));
  return kind ? kind->tokenizer(model_spec.substr(colon + 1)) : nullptr;
}

}  // namespace specula
