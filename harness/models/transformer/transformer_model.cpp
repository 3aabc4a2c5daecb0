// TransformerImpl and its modules (transformer_model.h): the LibTorch forward, the path through the decoding step
// (decode_step.h) and the attention layouts. The matrices' storage and apply_linear: transformer_matrices.cpp.
#include "harness/models/transformer/transformer_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/models/transformer/decode_step.h"
#include "harness/models/transformer/skinny_linear.h"
#include "harness/models/transformer/weight_view.h"
#include "kernels/shared/error.h"

namespace specula {

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps) * weight;
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(int64_t head_dim, int64_t max_len, double theta) {
  // inv_freq_i = theta^(-2i/D), angle(pos, i) = pos * inv_freq_i; computed in double, stored in fp32.
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor inv_freq =
      torch::pow(theta, -torch::arange(0, head_dim, 2, opts) / static_cast<double>(head_dim));
  const torch::Tensor angles = torch::outer(torch::arange(max_len, opts), inv_freq);
  cos = register_buffer("cos", angles.cos().to(torch::kFloat32));
  sin = register_buffer("sin", angles.sin().to(torch::kFloat32));
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x, const torch::Tensor& positions) {
  const int64_t half = x.size(-1) / 2;
  // Positions [N] take rows [N, D/2]; [B, N] (each sequence its own) take [B, 1, N, D/2], against x's heads.
  std::vector<int64_t> shape = positions.sizes().vec();
  if (positions.dim() == 2) shape.insert(shape.begin() + 1, 1);
  shape.push_back(half);
  const torch::Tensor flat = positions.reshape({-1});
  const torch::Tensor c = cos.index_select(0, flat).view(shape), s = sin.index_select(0, flat).view(shape);
  const torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

AttentionImpl::AttentionImpl(const TransformerConfig& c)
    : n_heads(c.n_heads), n_kv_heads(c.kv_heads()), head_dim(c.head_dim()) {
  const int64_t qkv_width = (n_heads + 2 * n_kv_heads) * head_dim;
  qkv = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, qkv_width).bias(c.qkv_bias)));
  out = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, c.d_model).bias(false)));
  rope = register_module("rope", RotaryEmbedding(head_dim, c.max_seq_len, c.rope_theta));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& mask,
                                     KVCache* cache, int64_t layer, const torch::Tensor& slots) {
  return apply_linear(out, attend(apply_linear(qkv, x), positions, mask, cache, layer, slots));
}

torch::Tensor AttentionImpl::attend(const torch::Tensor& projected, const torch::Tensor& positions,
                                    const torch::Tensor& mask, KVCache* cache, int64_t layer,
                                    const torch::Tensor& slots) {
  const int64_t B = projected.size(0), N = projected.size(1), G = n_heads / n_kv_heads;
  const auto heads = projected.view({B, N, n_heads + 2 * n_kv_heads, head_dim}).transpose(1, 2);
  torch::Tensor q = rope->forward(heads.narrow(1, 0, n_heads), positions);           // [B, H, N, D]
  torch::Tensor k = rope->forward(heads.narrow(1, n_heads, n_kv_heads), positions);  // [B, Hkv, N, D]
  torch::Tensor v = heads.narrow(1, n_heads + n_kv_heads, n_kv_heads);
  if (cache && slots.defined())
    std::tie(k, v) = cache->write_at(layer, k, v, slots, mask.size(-1));  // now [B, Hkv, columns, D]
  else if (cache)
    std::tie(k, v) = cache->write(layer, k, v);  // now [B, Hkv, T, D]
  const int64_t T = k.size(2);
  // The G query heads of a group share one key/value head: stack their rows, [B, Hkv, G * N, D].
  q = q.reshape({B, n_kv_heads, G * N, head_dim});
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (mask.defined()) {  // [N, T], or [B, N, T]: each sequence its own
    const torch::Tensor m = mask.dim() == 3 ? mask.view({B, 1, 1, N, T}) : mask;
    scores = (scores.view({B, n_kv_heads, G, N, T}) + m).view({B, n_kv_heads, G * N, T});
  }
  const torch::Tensor y = torch::matmul(torch::softmax(scores, -1), v).view({B, n_heads, N, head_dim});
  return y.transpose(1, 2).reshape({B, N, n_heads * head_dim});
}

SwiGLUImpl::SwiGLUImpl(int64_t d_model, int64_t d_ff) {
  gate_up = register_module("gate_up", torch::nn::Linear(torch::nn::LinearOptions(d_model, 2 * d_ff).bias(false)));
  down = register_module("down", torch::nn::Linear(torch::nn::LinearOptions(d_ff, d_model).bias(false)));
}

torch::Tensor SwiGLUImpl::forward(const torch::Tensor& x) {
  const auto parts = apply_linear(gate_up, x).chunk(2, -1);
  return apply_linear(down, torch::silu(parts[0]) * parts[1]);
}

BlockImpl::BlockImpl(const TransformerConfig& c) {
  attn_norm = register_module("attn_norm", RMSNorm(c.d_model, c.norm_eps));
  attn = register_module("attn", Attention(c));
  mlp_norm = register_module("mlp_norm", RMSNorm(c.d_model, c.norm_eps));
  mlp = register_module("mlp", SwiGLU(c.d_model, c.d_ff));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& mask,
                                 KVCache* cache, int64_t layer, const torch::Tensor& slots) {
  const torch::Tensor h = x + attn->forward(attn_norm->forward(x), positions, mask, cache, layer, slots);
  return h + mlp->forward(mlp_norm->forward(h));
}

TransformerImpl::TransformerImpl(const TransformerConfig& config) : TransformerImpl(config, torch::kFloat32, true) {}

TransformerImpl::TransformerImpl(const TransformerConfig& config, torch::ScalarType matrices)
    : TransformerImpl(config, matrices, false) {}

TransformerImpl::TransformerImpl(const TransformerConfig& config, torch::ScalarType matrices, bool initialise)
    : config_(config) {
  config_.validate("transformer config");
  const bool narrow = matrices != torch::kFloat32;
  if (narrow && matrices != torch::kFloat16 && matrices != torch::kBFloat16)
    fail("transformer: matrices in ", dtype_string(matrices), ": not float32, float16 or bfloat16");
  // Built for loading, the embedding is allocated in its final dtype (LibTorch's own N(0, 1) fill is skipped);
  // built for training, it is LibTorch's, so a seed gives the initial weights it always gave.
  const torch::nn::EmbeddingOptions embedding_options(config_.vocab_size, config_.d_model);
  embedding = register_module(
      "embedding",
      torch::nn::Embedding(initialise ? embedding_options
                                      : torch::nn::EmbeddingOptions(embedding_options)
                                            ._weight(torch::empty({config_.vocab_size, config_.d_model},
                                                                  torch::TensorOptions().dtype(matrices)))));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int32_t i = 0; i < config_.n_layers; ++i) {
    Block block(config_);
    if (narrow) store_matrices_as(*block, matrices);  // one block in float32 at a time
    blocks->push_back(block);
  }
  final_norm = register_module("final_norm", RMSNorm(config_.d_model, config_.norm_eps));
  if (!config_.tie_embeddings) {
    head = register_module(
        "head", torch::nn::Linear(torch::nn::LinearOptions(config_.d_model, config_.vocab_size).bias(false)));
    if (narrow) store_matrices_as(*head, matrices);
  }
  if (!initialise) return;

  // GPT-2 initialisation: N(0, 0.02) everywhere, the projections that write into the residual stream scaled
  // by 1/sqrt(2 * n_layers) so the residual's variance does not grow with depth.
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layers);
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    if (p.value().dim() < 2) {  // norm weights stay 1, biases start at 0
      if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) p.value().zero_();
      continue;
    }
    const bool residual = name.find("attn.out.") != std::string::npos || name.find("mlp.down.") != std::string::npos;
    p.value().normal_(0.0, residual ? residual_std : 0.02);
  }
}

namespace {

// Whether t (if defined) can be read as contiguous CPU data of `type`; and t made so, converting only when
// needed (each LibTorch call costs microseconds, a fair share of a decoding step).
bool cpu_contiguous(const torch::Tensor& t, torch::ScalarType type) {
  return !t.defined() || (t.device().is_cpu() && t.scalar_type() == type && t.is_contiguous());
}
torch::Tensor as_cpu_contiguous(const torch::Tensor& t, torch::ScalarType type) {
  return cpu_contiguous(t, type) ? t : t.to(torch::kCPU).to(type).contiguous();
}
bool plain_float(const torch::Tensor& t) { return cpu_contiguous(t, torch::kFloat32); }

}  // namespace

bool decode_layer_applies(const AttentionImpl& attn, const RMSNormImpl* attn_norm, const RMSNormImpl& mlp_norm,
                          const SwiGLUImpl& mlp) {
  for (const torch::Tensor& t : {attn.qkv->bias, mlp_norm.weight, attn.rope->cos, attn.rope->sin})
    if (!plain_float(t)) return false;
  for (const torch::Tensor& t : {attn.qkv->weight, attn.out->weight, mlp.gate_up->weight, mlp.down->weight})
    if (!weight_view(t).data) return false;
  return !attn_norm || plain_float(attn_norm->weight);
}

bool decode_cache_applies(const KVCache* cache, int64_t rows) {
  return !torch::GradMode::is_enabled() && !LibTorchOperationsOnly::active() && cache && cache->plain_cpu_float() &&
         cache->batch() == 1 && rows >= 1 && rows <= kSkinnyLinearMaxRows;
}

DecodeLayer decode_layer(AttentionImpl& attn, RMSNormImpl* attn_norm, RMSNormImpl& mlp_norm, SwiGLUImpl& mlp,
                         KVCache& cache, int64_t layer) {
  DecodeLayer L;
  L.attn_norm = attn_norm ? attn_norm->weight.data_ptr<float>() : nullptr;
  L.qkv = weight_view(attn.qkv->weight);
  L.qkv_bias = attn.qkv->bias.defined() ? attn.qkv->bias.data_ptr<float>() : nullptr;
  L.out = weight_view(attn.out->weight);
  L.mlp_norm = mlp_norm.weight.data_ptr<float>();
  L.gate_up = weight_view(mlp.gate_up->weight);
  L.down = weight_view(mlp.down->weight);
  L.rope_cos = attn.rope->cos.data_ptr<float>();
  L.rope_sin = attn.rope->sin.data_ptr<float>();
  L.keys = cache.key_data(layer);
  L.values = cache.value_data(layer);
  L.capacity = cache.capacity();
  return L;
}

namespace {

DecodeShape decode_shape(const TransformerConfig& c) {
  DecodeShape shape;
  shape.d_model = c.d_model;
  shape.n_heads = c.n_heads;
  shape.n_kv_heads = c.kv_heads();
  shape.head_dim = c.head_dim();
  shape.d_ff = c.d_ff;
  shape.norm_eps = c.norm_eps;
  return shape;
}

// n rows' positions and mask as the decoding step reads them (kept alive here beside the segment's raw pointers),
// checked against the cache they follow; the segment's cache slices are left to the caller.
struct CheckedSegment {
  torch::Tensor positions, mask;
  DecodeSegment segment;
};
CheckedSegment checked_segment(const TransformerConfig& c, int64_t n, const torch::Tensor& positions,
                               const torch::Tensor& mask, const KVCache& cache) {
  if (cache.length() + n > cache.capacity())
    fail("KV cache overflow: ", cache.length(), " cached + ", n, " new tokens exceed the capacity of ",
         cache.capacity(), " (reserve more slots first)");
  CheckedSegment out{as_cpu_contiguous(positions, torch::kInt64), as_cpu_contiguous(mask, torch::kFloat32), {}};
  if (out.positions.numel() != n) fail("decode step: ", out.positions.numel(), " positions for ", n, " rows");
  if (out.mask.defined() && (out.mask.dim() != 2 || out.mask.size(0) != n || out.mask.size(1) != cache.length() + n))
    fail("decode step: mask ", out.mask.sizes(), " for ", n, " rows after ", cache.length(), " cached slots");
  const int64_t* p = out.positions.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r)
    if (p[r] < 0 || p[r] >= c.max_seq_len) fail("decode step: position ", p[r], " outside [0, max_seq_len)");
  out.segment.rows = n;
  out.segment.positions = p;
  out.segment.mask = out.mask.defined() ? out.mask.data_ptr<float>() : nullptr;
  out.segment.cache_len = cache.length();
  out.segment.capacity = cache.capacity();
  return out;
}

}  // namespace

void run_decode_layers(const TransformerConfig& c, const std::vector<DecodeLayer>& layers, const float* final_norm,
                       torch::Tensor& x, const torch::Tensor& positions, const torch::Tensor& mask, KVCache& cache) {
  const int64_t n = x.size(1);
  const CheckedSegment in = checked_segment(c, n, positions, mask, cache);
  x = x.contiguous();
  decode_rows(decode_shape(c), layers, final_norm, x.data_ptr<float>(), n, in.segment.positions, in.segment.mask,
              cache.length());
  cache.advance(n);
}

bool TransformerImpl::decode_path_applies(const torch::Tensor& tokens, const KVCache* cache) const {
  if (!decode_step_ || tokens.dim() != 2 || tokens.size(0) != 1 || !decode_cache_applies(cache, tokens.size(1)))
    return false;
  if (!weight_view(embedding->weight).data || !plain_float(final_norm->weight) ||
      (head && !weight_view(head->weight).data))
    return false;
  for (size_t i = 0; i < blocks->size(); ++i) {
    const BlockImpl& b = *blocks->ptr<BlockImpl>(i);
    if (!decode_layer_applies(*b.attn, b.attn_norm.get(), *b.mlp_norm, *b.mlp)) return false;
  }
  return true;
}

void TransformerImpl::embed_rows(const int64_t* id, int64_t n, float* xp) {
  const int64_t d = config_.d_model;
  const torch::Tensor& emb = embedding->weight;
  const bool packed = is_packed_matrix(emb);
  for (int64_t r = 0; r < n; ++r) {
    if (id[r] < 0 || id[r] >= config_.vocab_size) fail("decode step: token id ", id[r], " outside the vocabulary");
    float* row = xp + r * d;
    // Row t of a row-major matrix starts at t * d, step 1; of panels, at panel t / 16, lane t % 16, step 16.
    const int64_t first = packed ? (id[r] / kPanelOutputs) * kPanelOutputs * d + id[r] % kPanelOutputs : id[r] * d;
    const int64_t step = packed ? kPanelOutputs : 1;
    switch (emb.scalar_type()) {  // widened exactly, as the kernel widens the other matrices
      case torch::kFloat16: {
        const c10::Half* e = emb.data_ptr<c10::Half>() + first;
        for (int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(e[i * step]);
        break;
      }
      case torch::kBFloat16: {
        const c10::BFloat16* e = emb.data_ptr<c10::BFloat16>() + first;
        for (int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(e[i * step]);
        break;
      }
      default: {
        const float* e = emb.data_ptr<float>() + first;
        for (int64_t i = 0; i < d; ++i) row[i] = e[i * step];
      }
    }
  }
}

torch::Tensor TransformerImpl::decode_hidden_states(const torch::Tensor& tokens, const torch::Tensor& positions,
                                                    const torch::Tensor& mask, KVCache& cache) {
  const int64_t n = tokens.size(1), d = config_.d_model;
  const torch::Tensor ids = as_cpu_contiguous(tokens, torch::kInt64);
  torch::Tensor x = torch::empty({1, n, d});
  embed_rows(ids.data_ptr<int64_t>(), n, x.data_ptr<float>());
  std::vector<DecodeLayer> layers;
  for (size_t i = 0; i < blocks->size(); ++i) {
    BlockImpl& b = *blocks->ptr<BlockImpl>(i);
    layers.push_back(decode_layer(*b.attn, b.attn_norm.get(), *b.mlp_norm, *b.mlp, cache, static_cast<int64_t>(i)));
  }
  run_decode_layers(config_, layers, final_norm->weight.data_ptr<float>(), x, positions, mask, cache);
  return x;
}

torch::Tensor with_fed_tokens(const RowSegment& segment) {
  if (!segment.fed.defined()) return segment.tokens;
  const int64_t n = segment.fed.numel();
  if (segment.fed_row < 0 || segment.fed_row + n > segment.tokens.numel())
    fail("a segment of ", segment.tokens.numel(), " rows fed ", n, " token ids from row ", segment.fed_row);
  torch::Tensor whole = segment.tokens.to(segment.fed.device(), torch::kInt64).clone();
  whole.narrow(0, segment.fed_row, n).copy_(segment.fed);
  return whole;
}

torch::Tensor TransformerImpl::batch_hidden_states(const std::vector<RowSegment>& segments) {
  for (const RowSegment& s : segments) {
    if (!s.cache || s.tokens.dim() != 1 || s.tokens.size(0) < 1)
      fail("batch_hidden_states: every segment needs a cache and tokens [N] with N >= 1, got ", s.tokens.sizes());
    if (s.fed.defined()) fail("batch_hidden_states: a segment's fed token ids must be made whole (with_fed_tokens)");
  }
  if (segments.empty()) return torch::empty({0, config_.d_model}, embedding->weight.options().dtype(torch::kFloat32));
  if (segments.size() == 1) {
    const RowSegment& s = segments[0];
    return hidden_states(s.tokens.unsqueeze(0), s.positions, s.mask, s.cache)[0];
  }
  if (!decode_step_) return libtorch_batch_hidden_states(segments);
  // The segments the decoding step takes run together; the rest alone, as hidden_states would run them.
  std::vector<torch::Tensor> parts(segments.size());
  std::vector<const RowSegment*> together;
  std::vector<size_t> together_at;
  for (size_t i = 0; i < segments.size(); ++i) {
    const RowSegment& s = segments[i];
    if (decode_path_applies(s.tokens.unsqueeze(0), s.cache)) {
      together.push_back(&s);
      together_at.push_back(i);
    } else {
      parts[i] = hidden_states(s.tokens.unsqueeze(0), s.positions, s.mask, s.cache)[0];
    }
  }
  if (!together.empty()) {
    const torch::Tensor rows = decode_batch_hidden_states(together);
    int64_t first = 0;
    for (size_t k = 0; k < together.size(); ++k) {
      const int64_t n = together[k]->tokens.size(0);
      parts[together_at[k]] = rows.narrow(0, first, n);
      first += n;
    }
  }
  return torch::cat(parts);
}

torch::Tensor TransformerImpl::decode_batch_hidden_states(const std::vector<const RowSegment*>& segments) {
  int64_t rows = 0;
  std::vector<CheckedSegment> checked;
  std::vector<DecodeSegment> decode;
  std::vector<torch::Tensor> ids;
  for (const RowSegment* s : segments) {
    KVCache& cache = *s->cache;
    const int64_t n = s->tokens.size(0);
    checked.push_back(checked_segment(config_, n, s->positions, s->mask, cache));
    DecodeSegment& seg = checked.back().segment;
    for (int64_t layer = 0; layer < cache.layers(); ++layer) {
      seg.keys.push_back(cache.key_data(layer));
      seg.values.push_back(cache.value_data(layer));
    }
    decode.push_back(seg);
    ids.push_back(s->tokens);
    rows += n;
  }
  const torch::Tensor all_ids = as_cpu_contiguous(torch::cat(ids), torch::kInt64);
  torch::Tensor x = torch::empty({rows, config_.d_model});
  embed_rows(all_ids.data_ptr<int64_t>(), rows, x.data_ptr<float>());
  std::vector<DecodeLayer> layers;  // the weights (decode_segments reads each segment's own cache)
  for (size_t i = 0; i < blocks->size(); ++i) {
    BlockImpl& b = *blocks->ptr<BlockImpl>(i);
    layers.push_back(
        decode_layer(*b.attn, b.attn_norm.get(), *b.mlp_norm, *b.mlp, *segments[0]->cache, static_cast<int64_t>(i)));
  }
  decode_segments(decode_shape(config_), layers, final_norm->weight.data_ptr<float>(), x.data_ptr<float>(), decode);
  for (const RowSegment* s : segments) s->cache->advance(s->tokens.size(0));
  return x;
}

torch::Tensor TransformerImpl::libtorch_batch_hidden_states(const std::vector<RowSegment>& segments) {
  const LibTorchOperationsOnly scope(!decode_step_);
  const torch::Device device = embedding->weight.device();
  std::vector<torch::Tensor> ids, positions, masks;
  for (const RowSegment& s : segments) {
    ids.push_back(s.tokens);
    positions.push_back(s.positions.to(device));
    masks.push_back(s.mask.defined() ? s.mask.to(device) : s.mask);
  }
  torch::Tensor x = embed(torch::cat(ids).to(device)).unsqueeze(0);  // [1, R, d]
  for (size_t i = 0; i < blocks->size(); ++i) {
    BlockImpl& b = *blocks->ptr<BlockImpl>(i);
    const torch::Tensor projected = apply_linear(b.attn->qkv, b.attn_norm->forward(x));
    std::vector<torch::Tensor> attended;
    int64_t first = 0;
    for (size_t k = 0; k < segments.size(); ++k) {
      const int64_t n = segments[k].tokens.size(0);
      attended.push_back(b.attn->attend(projected.narrow(1, first, n), positions[k], masks[k], segments[k].cache,
                                        static_cast<int64_t>(i)));
      first += n;
    }
    const torch::Tensor h = x + apply_linear(b.attn->out, torch::cat(attended, 1));
    x = h + b.mlp->forward(b.mlp_norm->forward(h));
  }
  for (const RowSegment& s : segments) s.cache->advance(s.tokens.size(0));
  return final_norm->forward(x)[0];
}

torch::Tensor TransformerImpl::hidden_states(const torch::Tensor& tokens, const torch::Tensor& positions,
                                             const torch::Tensor& mask, KVCache* cache) {
  if (decode_path_applies(tokens, cache)) return decode_hidden_states(tokens, positions, mask, *cache);
  const LibTorchOperationsOnly scope(!decode_step_);
  const torch::Device device = embedding->weight.device();
  const torch::Tensor on_device_positions = positions.to(device);
  const torch::Tensor on_device_mask = mask.defined() ? mask.to(device) : mask;
  torch::Tensor x = embed(tokens.to(device));
  for (size_t i = 0; i < blocks->size(); ++i)
    x = blocks->ptr<BlockImpl>(i)->forward(x, on_device_positions, on_device_mask, cache, static_cast<int64_t>(i));
  if (cache) cache->advance(tokens.size(1));
  return final_norm->forward(x);
}

torch::Tensor TransformerImpl::static_hidden_states(const torch::Tensor& tokens, const torch::Tensor& positions,
                                                    const torch::Tensor& slots, const torch::Tensor& mask,
                                                    KVCache& cache) {
  if (decode_step_) fail("static_hidden_states: the model is on the decoding step (set_decode_step(false) first)");
  if (tokens.dim() != 2 || positions.sizes() != tokens.sizes() || slots.sizes() != tokens.sizes() || mask.dim() != 3 ||
      mask.size(0) != tokens.size(0) || mask.size(1) != tokens.size(1) || tokens.size(0) != cache.batch())
    fail("static_hidden_states: tokens ", tokens.sizes(), ", positions ", positions.sizes(), ", slots ", slots.sizes(),
         " and mask ", mask.sizes(), " for a cache of batch ", cache.batch());
  const LibTorchOperationsOnly scope(true);
  torch::Tensor x = embed(tokens);  // [B, N, d]
  for (size_t i = 0; i < blocks->size(); ++i)
    x = blocks->ptr<BlockImpl>(i)->forward(x, positions, mask, &cache, static_cast<int64_t>(i), slots);
  return final_norm->forward(x);
}

torch::Tensor TransformerImpl::embed(const torch::Tensor& tokens) {
  using torch::indexing::Slice;
  const torch::Tensor& w = embedding->weight;
  // A packed matrix: token t is panel t / 16, lane t % 16 ([.., d] after indexing).
  const torch::Tensor e =
      is_packed_matrix(w)
          ? w.index({torch::div(tokens, kPanelOutputs, "floor"), Slice(), torch::remainder(tokens, kPanelOutputs)})
          : embedding->forward(tokens);
  return e.scalar_type() == torch::kFloat32 ? e : e.to(torch::kFloat32);
}

torch::Tensor TransformerImpl::lm_head(const torch::Tensor& hidden) {
  const LibTorchOperationsOnly scope(!decode_step_);
  return config_.tie_embeddings ? apply_linear(hidden, embedding->weight, torch::Tensor()) : apply_linear(head, hidden);
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  const AttentionLayout layout = causal_layout(0, tokens.size(1));
  return lm_head(hidden_states(tokens, layout.positions, layout.mask, nullptr));
}

TransformerOutput TransformerImpl::forward(const torch::Tensor& tokens, KVCache& cache) {
  const int64_t n = tokens.size(1);
  const AttentionLayout layout = causal_layout(cache.length(), n);
  // A single row sees every column: skip the mask.
  const torch::Tensor hidden = hidden_states(tokens, layout.positions, n == 1 ? torch::Tensor() : layout.mask, &cache);
  return {hidden, lm_head(hidden)};
}

TransformerOutput TransformerImpl::forward_tree(const torch::Tensor& tokens, const std::vector<int32_t>& parents,
                                                KVCache& cache) {
  if (tokens.dim() != 1 || tokens.size(0) != static_cast<int64_t>(parents.size()))
    fail("forward_tree: tokens must be [N] with one parent per node, got ", tokens.sizes(), " and ", parents.size(),
         " parents");
  const AttentionLayout layout = tree_layout(cache.length(), 0, parents);
  const torch::Tensor hidden = hidden_states(tokens.unsqueeze(0), layout.positions, layout.mask, &cache);
  return {hidden, lm_head(hidden)};
}

KVCache TransformerImpl::new_cache(int64_t batch) const {
  KVCache cache(config_.n_layers, batch, config_.kv_heads(), config_.max_seq_len, config_.head_dim(),
                embedding->weight.options().dtype(torch::kFloat32));  // float32 whatever the matrices' dtype
  if (!decode_step_) cache.use_libtorch_operations();
  return cache;
}

AttentionLayout causal_layout(int64_t cache_len, int64_t n) {
  AttentionLayout layout;
  layout.positions = torch::arange(cache_len, cache_len + n, torch::kInt64);
  // Row r sees columns [0, cache_len + r].
  layout.mask = torch::full({n, cache_len + n}, -std::numeric_limits<float>::infinity())
                    .triu(cache_len + 1);  // keeps -inf strictly above the shifted diagonal, zeros the rest
  layout.window = torch::zeros({n, 4}, torch::kInt64);
  int64_t* win = layout.window.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r) {
    win[4 * r] = cache_len + r + 1;
    win[4 * r + 1] = cache_len + n;
  }
  return layout;
}

torch::Tensor mask_from_window(const torch::Tensor& window, int64_t columns) {
  const torch::Tensor w = window.to(torch::kCPU, torch::kInt64).contiguous();
  const int64_t n = w.size(0);
  torch::Tensor mask = torch::full({n, columns}, -std::numeric_limits<float>::infinity());
  const int64_t* row = w.data_ptr<int64_t>();
  float* m = mask.data_ptr<float>();
  for (int64_t r = 0; r < n; ++r, row += 4, m += columns) {
    const int64_t prefix = std::min(row[0], columns), used = std::min(row[1], columns);
    std::fill(m, m + prefix, 0.0f);
    for (int64_t c = prefix; c < used && c - prefix < kMaskWindow; ++c) {
      const int64_t j = c - prefix;
      if ((static_cast<uint64_t>(row[2 + j / 64]) >> (j % 64)) & 1u) m[c] = 0.0f;
    }
  }
  return mask;
}

AttentionLayout tree_layout(int64_t cache_len, int64_t chunk, const std::vector<int32_t>& parents, int64_t cached_nodes,
                            bool full_mask) {
  const int64_t n_nodes = static_cast<int64_t>(parents.size());
  if (cached_nodes < 0 || cached_nodes > n_nodes || cached_nodes > cache_len || (cached_nodes > 0 && chunk > 0))
    fail("tree_layout: ", cached_nodes, " cached nodes with a chunk of ", chunk, " and ", cache_len, " cached slots");
  std::vector<int64_t> depth(n_nodes);
  for (int64_t j = 0; j < n_nodes; ++j) {
    const int32_t p = parents[j];
    if (p < -1 || p >= j) fail("tree_layout: node ", j, " has parent ", p, " (parents must precede children)");
    depth[j] = p < 0 ? 1 : depth[p] + 1;
  }
  if (!full_mask && n_nodes > kMaskWindow)
    fail("tree_layout: a tree of ", n_nodes, " nodes has no compact mask (at most ", kMaskWindow,
         "): ask for the mask");
  const int64_t base = cache_len - cached_nodes;  // linear prefix length
  const int64_t rows = chunk + n_nodes - cached_nodes;
  const int64_t cols = cache_len + rows;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  torch::Tensor mask = full_mask ? torch::full({rows, cols}, neg_inf) : torch::Tensor();
  torch::Tensor positions = torch::empty({rows}, torch::kInt64);
  // The compact form: the nodes' bits are their offsets from node 0's slot, so the tree must fit the window.
  torch::Tensor window = n_nodes <= kMaskWindow ? torch::zeros({rows, 4}, torch::kInt64) : torch::Tensor();
  float* m = full_mask ? mask.data_ptr<float>() : nullptr;
  int64_t* pos = positions.data_ptr<int64_t>();
  int64_t* win = window.defined() ? window.data_ptr<int64_t>() : nullptr;
  for (int64_t r = 0; r < chunk; ++r) {
    pos[r] = base + r;
    if (m) std::fill(m + r * cols, m + r * cols + base + r + 1, 0.0f);
    if (win) {
      win[4 * r] = base + r + 1;
      win[4 * r + 1] = cols;
    }
  }
  const int64_t tree_slot0 = base + chunk;  // slot of node 0
  for (int64_t j = cached_nodes; j < n_nodes; ++j) {
    const int64_t r = chunk + j - cached_nodes;
    pos[r] = tree_slot0 + depth[j] - 1;
    if (m) {
      float* row = m + r * cols;
      std::fill(row, row + tree_slot0, 0.0f);
      for (int64_t a = j; a >= 0; a = parents[a]) row[tree_slot0 + a] = 0.0f;
    }
    if (win) {
      win[4 * r] = tree_slot0;
      win[4 * r + 1] = cols;
      for (int64_t a = j; a >= 0; a = parents[a])
        win[4 * r + 2 + a / 64] =
            static_cast<int64_t>(static_cast<uint64_t>(win[4 * r + 2 + a / 64]) | (uint64_t{1} << (a % 64)));
    }
  }
  return {positions, mask, window};
}

}  // namespace specula
