#include "harness/models/hf/hf_model.h"

#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "harness/io/output_file.h"
#include "harness/models/hf/bpe_tokenizer.h"
#include "harness/models/hf/hf_config.h"
#include "harness/models/hf/hf_tokenizer.h"
#include "harness/models/hf/safetensors.h"
#include "harness/models/json_fields.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/memory_budget.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "kernels/shared/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

// A Hugging Face tensor and the Specula parameter (or rows of one) it fills.
struct Slot {
  std::string name;
  torch::Tensor dest;
};

std::vector<Slot> weight_slots(Transformer& m) {
  const TransformerConfig& c = m->config();
  const int64_t q = static_cast<int64_t>(c.n_heads) * c.head_dim(),
                kv = static_cast<int64_t>(c.kv_heads()) * c.head_dim();
  const int64_t ff = c.d_ff;
  std::vector<Slot> slots = {{"model.embed_tokens.weight", m->embedding->weight}};
  for (int32_t i = 0; i < c.n_layers; ++i) {
    BlockImpl& b = *m->blocks->ptr<BlockImpl>(i);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const torch::Tensor& qkv = b.attn->qkv->weight;
    slots.push_back({p + "input_layernorm.weight", b.attn_norm->weight});
    slots.push_back({p + "self_attn.q_proj.weight", qkv.narrow(0, 0, q)});
    slots.push_back({p + "self_attn.k_proj.weight", qkv.narrow(0, q, kv)});
    slots.push_back({p + "self_attn.v_proj.weight", qkv.narrow(0, q + kv, kv)});
    if (c.qkv_bias) {
      const torch::Tensor& bias = b.attn->qkv->bias;
      slots.push_back({p + "self_attn.q_proj.bias", bias.narrow(0, 0, q)});
      slots.push_back({p + "self_attn.k_proj.bias", bias.narrow(0, q, kv)});
      slots.push_back({p + "self_attn.v_proj.bias", bias.narrow(0, q + kv, kv)});
    }
    slots.push_back({p + "self_attn.o_proj.weight", b.attn->out->weight});
    slots.push_back({p + "post_attention_layernorm.weight", b.mlp_norm->weight});
    slots.push_back({p + "mlp.gate_proj.weight", b.mlp->gate_up->weight.narrow(0, 0, ff)});
    slots.push_back({p + "mlp.up_proj.weight", b.mlp->gate_up->weight.narrow(0, ff, ff)});
    slots.push_back({p + "mlp.down_proj.weight", b.mlp->down->weight});
  }
  slots.push_back({"model.norm.weight", m->final_norm->weight});
  if (!c.tie_embeddings) slots.push_back({"lm_head.weight", m->head->weight});
  return slots;
}

std::string shape_string(torch::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The open weight files of a folder, and which tensor lives where.
struct WeightFiles {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, const SafetensorsTensor*> tensors;
  std::map<std::string, std::string> file_of;  // tensor -> path, for errors
  std::string description;                     // "model.safetensors" or "3 shards of model.safetensors.index.json"
};

WeightFiles open_weights(const std::string& dir) {
  WeightFiles w;
  const fs::path single = fs::path(dir) / kWeightsFile, index = fs::path(dir) / kIndexFile;
  std::vector<std::string> paths;
  std::map<std::string, std::string> listed;  // from the index: tensor -> file
  if (fs::exists(single)) {
    paths.push_back(single.string());
    w.description = kWeightsFile;
  } else if (fs::exists(index)) {
    const json j = read_json_file(index.string(), "cannot open");
    const auto map = j.find("weight_map");
    if (!j.is_object() || map == j.end() || !map->is_object())
      fail(index.string(), ": needs a 'weight_map' object {tensor: file}");
    std::set<std::string> shard_names;
    for (const auto& item : map->items()) {
      if (!item.value().is_string()) fail(index.string(), ": weight_map['", item.key(), "'] must be a file name");
      const std::string file = item.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "..")
        fail(index.string(), ": weight_map['", item.key(), "'] = '", file, "' is not a file in the folder");
      listed[item.key()] = file;
      shard_names.insert(file);
    }
    for (const std::string& s : shard_names) paths.push_back((fs::path(dir) / s).string());
    w.description = std::to_string(paths.size()) + " shard" + (paths.size() == 1 ? "" : "s") + " of " + kIndexFile;
  } else {
    fail(dir, ": no ", kWeightsFile, " or ", kIndexFile,
         " (only safetensors weights are read; convert pytorch_model.bin first)");
  }
  for (const std::string& p : paths) {
    if (!fs::exists(p)) fail(p, ": missing weight shard (named by ", kIndexFile, ")");
    w.files.push_back(std::make_unique<SafetensorsFile>(p));
    for (const SafetensorsTensor& t : w.files.back()->tensors()) {
      const auto [it, fresh] = w.tensors.emplace(t.name, &t);
      if (!fresh) fail(p, ": tensor '", t.name, "' is also in ", w.file_of[t.name]);
      w.file_of[t.name] = p;
    }
  }
  for (const auto& [name, file] : listed) {
    const auto it = w.file_of.find(name);
    if (it == w.file_of.end() || fs::path(it->second).filename() != file)
      fail(index.string(), ": lists tensor '", name, "' in ", file, " but that file does not hold it");
  }
  return w;
}

// Copies a stored tensor into `dest` (same shape; its dtype as kept), converting from the stored dtype.
void load_tensor(const SafetensorsTensor& t, const std::string& file, torch::Tensor dest) {
  torch::Dtype dtype;
  switch (t.dtype) {
    case SafetensorsDtype::F32:
      dtype = torch::kFloat32;
      break;
    case SafetensorsDtype::F16:
      dtype = torch::kFloat16;
      break;
    case SafetensorsDtype::BF16:
      dtype = torch::kBFloat16;
      break;
    default:
      fail(file, ": tensor '", t.name, "' is ", dtype_name(t.dtype), "; weights must be F32, F16 or BF16");
  }
  if (torch::IntArrayRef(t.shape) != dest.sizes())
    fail(file, ": tensor '", t.name, "' has shape ", shape_string(t.shape), " but config.json implies ",
         shape_string(dest.sizes()));
  torch::Tensor src;
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) == 0) {
    // A view of the read-only mapping: only ever read (copy_ below), never written.
    src = torch::from_blob(const_cast<uint8_t*>(t.data), t.shape, torch::TensorOptions().dtype(dtype));
  } else {  // safetensors does not promise alignment: copy misaligned data out first
    src = torch::empty(t.shape, torch::TensorOptions().dtype(dtype));
    std::memcpy(src.data_ptr(), t.data, t.bytes);
  }
  copy_finite(dest, src, file, t.name);
}

bool ignored_tensor(const std::string& name, const TransformerConfig& c) {
  const std::string suffix = ".self_attn.rotary_emb.inv_freq";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
  return c.tie_embeddings && name == "lm_head.weight";  // transformers ties it to the embedding regardless
}

std::string dtype_summary(const WeightFiles& w) {
  std::set<std::string> names;
  for (const auto& [name, t] : w.tensors) names.insert(dtype_name(t->dtype));
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : "+") + n;
  return s;
}

// The dtype the matrices are kept in: options.weights_dtype, where "auto" is as stored — the matrices' dtype, so
// folders that keep norms in float32 beside bf16 matrices are bf16; mixed matrices are float32.
torch::ScalarType kept_matrices_dtype(const WeightFiles& weights, const HfLoadOptions& options) {
  std::set<SafetensorsDtype> stored;
  for (const auto& [name, t] : weights.tensors)
    if (t->shape.size() == 2) stored.insert(t->dtype);
  const torch::ScalarType as_stored = stored.size() != 1                          ? torch::kFloat32
                                      : *stored.begin() == SafetensorsDtype::F16  ? torch::kFloat16
                                      : *stored.begin() == SafetensorsDtype::BF16 ? torch::kBFloat16
                                                                                  : torch::kFloat32;
  return weights_dtype_for(options.weights_dtype, as_stored);
}

HfMemoryPlan plan_for(const HfConfig& config, torch::ScalarType kept) {
  return plan_model_memory(config.model, static_cast<int>(c10::elementSize(kept)));
}

}  // namespace

HfMemoryPlan plan_hf_memory(const std::string& dir, const HfLoadOptions& options) {
  const HfConfig config = read_hf_config(dir, options.max_seq_len);
  return plan_for(config, kept_matrices_dtype(open_weights(dir), options));
}

std::shared_ptr<const LanguageModel> load_hf_language_model(const std::string& dir, const HfLoadOptions& options) {
  const HfConfig config = read_hf_config(dir, options.max_seq_len);
  const std::string config_path = (fs::path(dir) / kHfConfigFile).string();
  const torch::Device device = torch_device_named(options.device);
  step_graphs_wanted();  // a bad SPECULA_STEP_GRAPHS refused before the weights are read, on any device
  WeightFiles weights = open_weights(dir);

  // Refuse what cannot be loaded before allocating it: a config whose model has more than twice the numbers its
  // weights hold (a config of another size would otherwise build the whole model first; a tensor or two missing is
  // left to the per-tensor check below, which names them), and a model that cannot fit.
  int64_t stored = 0;
  for (const auto& [name, t] : weights.tensors) {
    if (ignored_tensor(name, config.model)) continue;
    // A stored dtype the engine does not take (a quantized folder's packed I32 qweight) is named first: its packed
    // numbers would otherwise read as a config larger than its weights.
    if (t->dtype != SafetensorsDtype::F32 && t->dtype != SafetensorsDtype::F16 && t->dtype != SafetensorsDtype::BF16)
      fail(weights.file_of[name], ": tensor '", name, "' is ", dtype_name(t->dtype),
           "; weights must be F32, F16 or BF16");
    stored += t->numel();
  }
  if (stored < config.model.parameter_count() / 2)
    fail(dir, ": ", weights.description, " hold ", stored, " numbers, but ", kHfConfigFile, " describes ",
         config.model.parameter_count(), " parameters (", config.model.describe(),
         "): the config does not match the weights");
  const torch::ScalarType kept = kept_matrices_dtype(weights, options);
  const HfMemoryPlan plan = plan_for(config, kept);
  const int64_t available = options.memory_available >= 0 ? options.memory_available : mem_available_bytes();
  check_model_fits(plan, "hf:" + dir, available);

  std::shared_ptr<const Tokenizer> tokenizer = load_hf_tokenizer(dir);
  if (tokenizer && tokenizer->vocab_size() > config.model.vocab_size)
    fail(dir, ": the tokenizer has ", tokenizer->vocab_size(), " tokens but ", kHfConfigFile, " vocab_size is ",
         config.model.vocab_size);

  LoadedCheckpoint loaded;
  loaded.config.model = config.model;
  loaded.config.tokenizer = tokenizer ? tokenizer->name() : "none";
  loaded.config.weights_file = weights.description;
  loaded.config.weights_dtype = dtype_summary(weights);
  loaded.config.training = {{"architecture", config.architecture}};
  {
    torch::NoGradGuard no_grad;
    loaded.model = Transformer(config.model, kept);  // matrices built as kept: never all in float32
    std::set<std::string> used;
    for (const Slot& slot : weight_slots(loaded.model)) {
      const auto it = weights.tensors.find(slot.name);
      if (it == weights.tensors.end())
        fail(dir, ": missing tensor '", slot.name, "' (in none of ", weights.description, ")");
      load_tensor(*it->second, weights.file_of[slot.name], slot.dest);
      used.insert(slot.name);
    }
    for (const auto& [name, t] : weights.tensors)
      if (!used.count(name) && !ignored_tensor(name, config.model))
        fail(weights.file_of[name], ": unexpected tensor '", name, "' (not part of a ", config.architecture,
             " with this ", kHfConfigFile, ")");
    if (config.rope_scaling.type != "none") {
      const std::vector<double> inv =
          rope_inverse_frequencies(config.model.head_dim(), config.model.rope_theta, config.rope_scaling);
      const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
      const torch::Tensor angles = torch::outer(torch::arange(config.model.max_seq_len, f64),
                                                torch::tensor(inv, f64));  // [max_len, D/2], as the bundled RoPE
      for (size_t i = 0; i < loaded.model->blocks->size(); ++i) {
        RotaryEmbeddingImpl& rope = *loaded.model->blocks->ptr<BlockImpl>(i)->attn->rope;
        rope.cos.copy_(angles.cos());
        rope.sin.copy_(angles.sin());
      }
    }
  }
  weights = WeightFiles{};  // unmap before moving on
  loaded.model->to(device);
  loaded.model->eval();

  if (options.report) {
    const int64_t resident = resident_bytes(*loaded.model);
    std::cerr << "hf:" << dir << ": " << config.architecture << ", " << config.model.describe() << "; "
              << loaded.config.weights_dtype << " weights from " << loaded.config.weights_file << " -> "
              << dtype_string(loaded.model->embedding->weight.scalar_type()) << " matrices on " << device.str()
              << ", resident " << format_bytes(resident) << " + " << format_bytes(plan.kv_cache_bytes)
              << " KV cache per session (" << config.model.max_seq_len << " positions)";
    if (config.rope_scaling.type != "none")
      std::cerr << ", rope_scaling " << config.rope_scaling.type << " x" << config.rope_scaling.factor;
    if (available >= 0) std::cerr << "; " << format_bytes(available) << " available";
    std::cerr << "\n";
  }
  return std::make_shared<TransformerLanguageModel>("hf", dir, loaded, tokenizer);
}

void export_hf_checkpoint(const std::string& checkpoint_dir, const std::string& output_dir,
                          const HfExportOptions& options) {
  torch::Dtype dtype;
  SafetensorsDtype stored;
  if (options.dtype == "float32") {
    dtype = torch::kFloat32;
    stored = SafetensorsDtype::F32;
  } else if (options.dtype == "float16") {
    dtype = torch::kFloat16;
    stored = SafetensorsDtype::F16;
  } else if (options.dtype == "bfloat16") {
    dtype = torch::kBFloat16;
    stored = SafetensorsDtype::BF16;
  } else {
    fail_parameter("dtype", " '", options.dtype, "' is not float32, float16 or bfloat16");
  }
  LoadedCheckpoint checkpoint = load_checkpoint(checkpoint_dir);
  if (checkpoint.config.tokenizer != "byte")
    fail(checkpoint_dir, ": tokenizer '", checkpoint.config.tokenizer, "' has no Hugging Face equivalent here (byte)");
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) fail(output_dir, ": cannot create folder: ", ec.message());

  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> keep;  // owns the bytes the writer reads
  std::vector<SafetensorsWriteTensor> tensors;
  for (const Slot& slot : weight_slots(checkpoint.model)) {
    keep.push_back(slot.dest.detach().to(torch::kCPU).to(dtype).contiguous());
    tensors.push_back({slot.name, stored, keep.back().sizes().vec(), keep.back().data_ptr()});
  }
  write_safetensors((fs::path(output_dir) / kWeightsFile).string(), tensors, {{"format", "pt"}});

  auto write_json = [&](const char* name, const json& j) {
    const std::string path = (fs::path(output_dir) / name).string();
    write_output_file(path, j.dump(2) + "\n", "export");
  };
  json config = hf_config_json(checkpoint.model->config(), options.dtype);
  if (checkpoint.config.eos_token_id) config["eos_token_id"] = *checkpoint.config.eos_token_id;  // its runs stop alike
  write_json(kHfConfigFile, config);
  write_json("tokenizer.json", byte_tokenizer_json());
  write_json("tokenizer_config.json", {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                       {"add_bos_token", false},
                                       {"add_eos_token", false},
                                       {"model_max_length", checkpoint.model->config().max_seq_len}});
}

}  // namespace specula
