#include "draft/heads/draft_heads.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "harness/io/output_file.h"
#include "harness/models/transformer/checkpoint.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
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
