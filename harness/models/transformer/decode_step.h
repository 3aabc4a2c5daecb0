// The transformer's forward for a few rows after a KV cache (a decoding or verification step) in plain loops
// around skinny_linear: RMSNorm, the q/k/v projection, RoPE, the cache write, masked attention over the cache,
// the output projection and the SwiGLU MLP, with the same math as TransformerImpl (transformer_model.h).
// Torch-free interface (the implementation uses only LibTorch's thread pool, to split the projections' output
// columns and the attention's heads).
//
// Why: at a handful of rows LibTorch spends more time dispatching its ~30 operations per layer than computing
// (about 250 of the 412 us of a 1-token forward of the bundled target). That fixed cost is the harness's, not
// the model's, and it flatters speculation: it makes a (K + 1)-row verification look almost as cheap as one
// row. Every row here is computed on its own (its attention in a fixed order), so, as with skinny_linear, a
// token's outputs do not depend on the rows computed beside it.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/models/transformer/skinny_linear.h"

namespace specula {

struct DecodeShape {
  int64_t d_model = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, d_ff = 0;
  double norm_eps = 0.0;
};

// One block's parameters (row-major, as torch::nn::Linear stores them) and its slice of the cache.
struct DecodeLayer {
  const float* attn_norm = nullptr;  // [d], or null: no norm before attention (EAGLE's layer)
  WeightView qkv;                    // [(H + 2 Hkv) D, d], as stored (fp32, fp16 or bf16)
  const float* qkv_bias = nullptr;   // [(H + 2 Hkv) D] or null
  WeightView out;                    // [d, H D]
  const float* mlp_norm = nullptr;   // [d]
  WeightView gate_up;                // [2 ff, d]: gate rows, then up rows
  WeightView down;                   // [d, ff]
  const float* rope_cos = nullptr;   // [max_len, D / 2]
  const float* rope_sin = nullptr;
  float* keys = nullptr;    // [Hkv, capacity, D]: this layer's cache (batch 1)
  float* values = nullptr;  // [Hkv, capacity, D]
  int64_t capacity = 0;
};

// The attention's heads are split over the compute threads only when a layer's attention has at least this
// many multiply-adds per product (rows x cached-and-new tokens x heads x head_dim): below it, about 10 us of
// work, waking a sleeping second thread costs more than it saves. The split never changes a bit.
constexpr int64_t kAttentionSplitWork = int64_t{1} << 15;

// One sequence's rows in a step that decodes several sequences at once (decode_segments): where they sit, what
// they see and the cache they attend to and write, as in decode_rows.
struct DecodeSegment {
  int64_t rows = 0;
  const int64_t* positions = nullptr;  // [rows]
  const float* mask = nullptr;         // [rows, cache_len + rows], or null: every column visible
  int64_t cache_len = 0;
  std::vector<float*> keys, values;  // per layer: [Hkv, capacity, D]
  int64_t capacity = 0;
};

// decode_rows for several sequences at once (batched lockstep decoding): x [sum of rows, d], segment s's rows after
// those of segments 0..s-1. Every linear layer runs once over all the rows (its weights streamed once per 32 rows
// for the whole batch instead of once per sequence); each segment's rows attend to their own cache. `layers`
// give the weights (their cache fields are not read). Rows are computed independently of each other, so every
// row's outputs are bit for bit those decode_rows gives its sequence alone.
void decode_segments(const DecodeShape& shape, const std::vector<DecodeLayer>& layers, const float* final_norm,
                     float* x, const std::vector<DecodeSegment>& segments);

// x [rows, d]: the rows' embeddings in, their final hidden states (after `final_norm`, unless null) out. Row r sits at
// positions[r] and, when `mask` [rows, cache_len + rows] (0 visible, -inf hidden) is given, attends to the
// columns it marks; without one it attends to every cached slot and every new row. The rows' keys and values
// go to cache slots [cache_len, cache_len + rows) of every layer.
void decode_rows(const DecodeShape& shape, const std::vector<DecodeLayer>& layers, const float* final_norm, float* x,
                 int64_t rows, const int64_t* positions, const float* mask, int64_t cache_len);

}  // namespace specula
