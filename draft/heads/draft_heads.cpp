#include "draft/heads/draft_heads.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/io/output_file.h"
#include "harness/models/json_fields.h"
#include "harness/models/transformer/checkpoint.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string string_field(const json& j, const std::string& key, const std::string& where) {
  return json_string(json_field(j, key, where), key, where);
}

}  // namespace

MedusaHeadImpl::MedusaHeadImpl(int64_t hidden, int64_t vocab) {
  res = register_module("res", torch::nn::Linear(torch::nn::LinearOptions(hidden, hidden).bias(true)));
  out = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(hidden, vocab).bias(false)));
  torch::NoGradGuard no_grad;
  res->weight.zero_();  // the ResBlock starts as the identity (Medusa's ResBlock: zeros_(linear.weight))
}

torch::Tensor MedusaHeadImpl::forward(const torch::Tensor& h) {
  return apply_linear(out, h + torch::silu(apply_linear(res, h)));
}

MedusaHeadsImpl::MedusaHeadsImpl(int64_t heads_, int64_t hidden, int64_t vocab) : count(heads_) {
  if (heads_ < 1) fail("medusa: the number of heads must be >= 1, got ", heads_);
  heads = register_module("heads", torch::nn::ModuleList());
  for (int64_t k = 0; k < heads_; ++k) heads->push_back(MedusaHead(hidden, vocab));
}

torch::Tensor MedusaHeadsImpl::forward(const torch::Tensor& h) {
  std::vector<torch::Tensor> out;
  for (size_t k = 0; k < heads->size(); ++k) out.push_back(heads->ptr<MedusaHeadImpl>(k)->forward(h));
  return torch::stack(out);
}

void MedusaHeadsImpl::init_from_lm_head(const torch::Tensor& weight) {
  torch::NoGradGuard no_grad;
  for (size_t k = 0; k < heads->size(); ++k) heads->ptr<MedusaHeadImpl>(k)->out->weight.copy_(weight);
}

EagleHeadImpl::EagleHeadImpl(const TransformerConfig& target) : config(target) {
  const int64_t H = target.d_model;
  fc = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(2 * H, H).bias(true)));
  attn = register_module("attn", Attention(target));
  mlp_norm = register_module("mlp_norm", RMSNorm(H, target.norm_eps));
  mlp = register_module("mlp", SwiGLU(H, target.d_ff));
}

torch::Tensor EagleHeadImpl::forward(const torch::Tensor& embeddings, const torch::Tensor& features,
                                     const torch::Tensor& positions, const torch::Tensor& mask, KVCache* cache) {
  torch::Tensor g = apply_linear(fc, torch::cat({embeddings, features}, -1));
  // At inference, a few rows after the cache: the LibTorch-free decoding step (no norm before attention).
  if (g.dim() == 3 && g.size(0) == 1 && decode_cache_applies(cache, g.size(1)) &&
      decode_layer_applies(*attn, nullptr, *mlp_norm, *mlp)) {
    run_decode_layers(config, {decode_layer(*attn, nullptr, *mlp_norm, *mlp, *cache, 0)}, nullptr, g, positions, mask,
                      *cache);
    return g;
  }
  const torch::Tensor h = g + attn->forward(g, positions, mask, cache, 0);  // no input norm in EAGLE's layer 0
  if (cache) cache->advance(embeddings.size(1));
  return h + mlp->forward(mlp_norm->forward(h));
}

KVCache EagleHeadImpl::new_cache() const {
  // Key/value heads from the projection's shape: [(H + 2 Hkv) D, d] (multi-head or grouped-query).
  const int64_t kv_heads = (matrix_outputs(attn->qkv->weight) / attn->head_dim - attn->n_heads) / 2;
  // Where the head computes (a GPU beside its target), float32 whatever the matrices' dtype.
  return KVCache(1, 1, kv_heads, config.max_seq_len, attn->head_dim, fc->weight.options().dtype(torch::kFloat32));
}

DraftHeadsConfig read_draft_heads_config(const std::string& dir) {
  if (!fs::is_directory(dir)) fail("draft heads '", dir, "': no such folder");
  const std::string path = (fs::path(dir) / "config.json").string();
  const json j =
      read_json_file(path, "missing config (is '" + dir + "' a folder written by specula train-medusa/train-eagle?)");
  if (!j.is_object()) fail(path, ": expected a JSON object");
  reject_unknown_json_fields(
      j, {"format", "kind", "target", "target_model", "target_weights", "medusa_heads", "weights", "training"}, path);
  const std::string format = string_field(j, "format", path);
  if (format != kDraftHeadsFormat) fail(path, ": format '", format, "' is not '", kDraftHeadsFormat, "'");
  DraftHeadsConfig c;
  c.kind = string_field(j, "kind", path);
  if (c.kind != "medusa" && c.kind != "eagle") fail(path, ": kind '", c.kind, "' is not medusa or eagle");
  c.target = string_field(j, "target", path);
  c.target_model = transformer_config_from_json(json_field(j, "target_model", path), path + ": target_model");
  if (c.kind == "medusa") {
    const json& k = json_field(j, "medusa_heads", path);
    if (!k.is_number_integer() || k.get<int64_t>() < 1 || k.get<int64_t>() > 64)
      fail(path, ": medusa_heads must be an integer in 1..64, got ", k.dump());
    c.medusa_heads = k.get<int32_t>();
  } else if (j.contains("medusa_heads")) {
    fail(path, ": medusa_heads is only for kind medusa");
  }
  const json& weights = json_field(j, "weights", path);
  if (!weights.is_object()) fail(path, ": 'weights' must be an object");
  reject_unknown_json_fields(weights, {"file", "matrices_dtype", "bytes", "crc32"}, path + ": weights");
  c.weights_file = string_field(weights, "file", path + ": weights");
  if (weights.contains("matrices_dtype")) {
    c.matrices_dtype = string_field(weights, "matrices_dtype", path + ": weights");
    if (!is_weights_dtype_name(c.matrices_dtype))
      fail(path, ": weights.matrices_dtype '", c.matrices_dtype, "' is not float32, float16 or bfloat16");
  }
  c.weights_checksum = read_weights_checksum(weights, path + ": weights");
  if (j.contains("target_weights")) {
    const json& tw = json_field(j, "target_weights", path);
    if (!tw.is_object()) fail(path, ": 'target_weights' must be an object");
    reject_unknown_json_fields(tw, {"bytes", "crc32"}, path + ": target_weights");
    c.target_weights_checksum = read_weights_checksum(tw, path + ": target_weights");
  }
  if (j.contains("training")) c.training = j["training"];
  return c;
}

void write_draft_heads_config(const std::string& dir, const DraftHeadsConfig& c) {
  json weights = {{"file", c.weights_file}, {"matrices_dtype", c.matrices_dtype}};
  write_weights_checksum(weights, c.weights_checksum);
  json j = {{"format", kDraftHeadsFormat}, {"kind", c.kind},
            {"target", c.target},          {"target_model", to_json(c.target_model)},
            {"weights", weights},          {"training", c.training}};
  if (c.kind == "medusa") j["medusa_heads"] = c.medusa_heads;
  if (c.target_weights_checksum) {
    json tw = json::object();
    write_weights_checksum(tw, c.target_weights_checksum);
    j["target_weights"] = tw;
  }
  const std::string path = (fs::path(dir) / "config.json").string();
  write_output_file(path, j.dump(2) + "\n", "the heads config");
}

std::string resolve_heads_target(const std::string& dir, const DraftHeadsConfig& config) {
  const fs::path target(config.target);
  return (target.is_absolute() ? target : (fs::path(dir) / target).lexically_normal()).string();
}

void save_draft_heads(const std::string& dir, torch::nn::Module& heads, const DraftHeadsConfig& config) {
  DraftHeadsConfig written = config;
  written.weights_checksum = save_parameters_atomically(
      dir, config.weights_file, heads, storage_dtype(config.matrices_dtype), "heads folder", DtypeScope::matrices);
  write_draft_heads_config(dir, written);
}

void load_draft_heads_weights(const std::string& dir, const DraftHeadsConfig& config, torch::nn::Module& heads) {
  load_parameters((fs::path(dir) / config.weights_file).string(), heads, (fs::path(dir) / "config.json").string(),
                  config.matrices_dtype, "these heads", config.weights_checksum, DtypeScope::matrices);
  heads.eval();
}

}  // namespace specula
