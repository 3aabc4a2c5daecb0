// Draft heads that read the target's features (verify/ALGORITHMS.md §6): Medusa heads and the EAGLE head, as
// LibTorch modules, and the checkpoint folder that stores them next to the target they were trained on.
// Includes LibTorch: only for torch translation units (the torch-free face is draft/heads/head_drafters.h).
// The checkpoint folder's config: draft_heads_config.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "draft/heads/draft_heads_config.h"
#include "harness/models/transformer/kv_cache.h"
#include "harness/models/transformer/transformer_config.h"
#include "harness/models/transformer/transformer_model.h"

namespace specula {

// One Medusa head (Cai et al. 2024, medusa_model.py): ResBlock x + SiLU(W1 x + b1) with W1 = 0 at
// initialisation (the block starts as the identity), then Linear(H -> V, no bias).
struct MedusaHeadImpl : torch::nn::Module {
  MedusaHeadImpl(int64_t hidden, int64_t vocab);
  torch::Tensor forward(const torch::Tensor& h);  // [.., H] -> [.., V]
  torch::nn::Linear res{nullptr}, out{nullptr};
};
TORCH_MODULE(MedusaHead);

// K heads on the target's final hidden state h_t; head k (k = 1..K) predicts token t + k + 1 (the target's
// own LM head predicts t + 1).
struct MedusaHeadsImpl : torch::nn::Module {
  MedusaHeadsImpl(int64_t heads, int64_t hidden, int64_t vocab);
  torch::Tensor forward(const torch::Tensor& h);  // [.., H] -> [K, .., V]
  // Every output layer := the target's LM head weight [V, H] (the paper's initialisation).
  void init_from_lm_head(const torch::Tensor& weight);
  torch::nn::ModuleList heads{nullptr};
  int64_t count;
};
TORCH_MODULE(MedusaHeads);

// The EAGLE head (Li et al. 2024, cnets1.py): g = Linear(2H -> H)(concat(e_{t+1}, f_t)), then one Llama
// decoder layer WITHOUT the input RMSNorm (layer 0 of EAGLE has none): h = g + Attn(g), out = h +
// MLP(RMSNorm(h)), with RoPE and its own KV cache. `out` is the predicted feature f^_{t+1}; its logits come
// from the target's frozen LM head.
struct EagleHeadImpl : torch::nn::Module {
  explicit EagleHeadImpl(const TransformerConfig& target);
  // embeddings, features [B, N, H]; positions [N]; mask [N, cache.length() + N] additive (undefined: all
  // visible); appends the rows' keys/values to `cache` when given. Returns f^ [B, N, H].
  torch::Tensor forward(const torch::Tensor& embeddings, const torch::Tensor& features, const torch::Tensor& positions,
                        const torch::Tensor& mask, KVCache* cache);
  KVCache new_cache() const;  // one layer, batch 1, the target's heads and max_seq_len
  torch::nn::Linear fc{nullptr};
  Attention attn{nullptr};
  RMSNorm mlp_norm{nullptr};
  SwiGLU mlp{nullptr};
  TransformerConfig config;
};
TORCH_MODULE(EagleHead);

// Writes DIR/config.json and the module's parameters (temporary file + rename, like save_checkpoint).
void save_draft_heads(const std::string& dir, torch::nn::Module& heads, const DraftHeadsConfig& config);
// Reads the weights of DIR into `heads` (built from the config): a missing, misshapen, non-finite or
// unexpected tensor is an Error naming the file and tensor.
void load_draft_heads_weights(const std::string& dir, const DraftHeadsConfig& config, torch::nn::Module& heads);

}  // namespace specula
