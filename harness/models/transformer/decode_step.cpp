#include "harness/models/transformer/decode_step.h"

#include <ATen/Parallel.h>  // the compute threads' pool only (LibTorch's intra-op pool: no tensors here)

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "harness/models/transformer/skinny_linear.h"
#include "harness/models/transformer/vector_exp.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/sampling/logits_processors.h"  // SPECULA_ROW_SCAN: an AVX2 clone picked at load time

// The 32-byte vector type below only passes between always-inlined functions of one target, so the ABI note
// GCC gives for such values (-Wpsabi) concerns no real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace specula {
namespace {

// 8 floats as one value (GCC lowers it to the function's vectors): keeps partial sums in registers.
typedef float V8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) V8 load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 8 lanes added in a fixed tree: (l, l + 4), then (0, 2) and (1, 3).
inline __attribute__((always_inline)) float sum_lanes(V8 v) {
  const auto h = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  return (h[0] + h[2]) + (h[1] + h[3]);
}

// a . b: one 8-lane partial sum over the 8-float blocks, added in a fixed tree, then the tail in order (the
// same arithmetic as dot4 below, so a key's score does not depend on which of the two computed it).
inline __attribute__((always_inline)) float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  V8 acc = {};
  const int64_t body = n - n % 8;
  for (int64_t i = 0; i < body; i += 8) acc += load8(a + i) * load8(b + i);
  float total = sum_lanes(acc);
  for (int64_t i = body; i < n; ++i) total += a[i] * b[i];
  return total;
}

// y[0, 8B) = sum_t w[t] * rows[t][0, 8B) over t = 0..T-1 in order (rows of stride n), B blocks of 8 held in
// registers.
template <int B>
inline __attribute__((always_inline)) void weighted_columns(const float* w, const float* rows, int64_t T, int64_t n,
                                                            float* y) {
  V8 acc[B] = {};
  for (int64_t t = 0; t < T; ++t) {
    if (w[t] == 0.0f) continue;
    const V8 wt = {w[t], w[t], w[t], w[t], w[t], w[t], w[t], w[t]};
    const float* r = rows + t * n;
    for (int b = 0; b < B; ++b) acc[b] += wt * load8(r + 8 * b);
  }
  std::memcpy(y, acc, sizeof acc);
}

// y = sum_t w[t] * rows[t] over t = 0..T-1 (rows of length n, stride n), t in order for every element, 64
// elements per pass: a head of 64 floats (256 bytes, four cache lines per value row) is read whole and in
// order, which the hardware prefetcher follows, where passes of 32 read every other pair of lines, twice.
inline __attribute__((always_inline)) void weighted_sum(const float* w, const float* rows, int64_t T, int64_t n,
                                                        float* y) {
  int64_t c = 0;
  for (; c + 64 <= n; c += 64) weighted_columns<8>(w, rows + c, T, n, y + c);
  for (; c + 32 <= n; c += 32) weighted_columns<4>(w, rows + c, T, n, y + c);
  for (; c < n; ++c) {
    float acc = 0.0f;
    for (int64_t t = 0; t < T; ++t)
      if (w[t] != 0.0f) acc += w[t] * rows[t * n + c];
    y[c] = acc;
  }
}

// out = x / sqrt(mean(x^2) + eps) * weight (Zhang & Sennrich 2019); out may be x.
SPECULA_ROW_SCAN void rms_norm(const float* x, const float* weight, double eps, int64_t d, float* out) {
  const float mean_square = dot(x, x, d) / static_cast<float>(d);
  const float scale = 1.0f / std::sqrt(mean_square + static_cast<float>(eps));
  for (int64_t i = 0; i < d; ++i) out[i] = x[i] * scale * weight[i];
}

// Rotate-half RoPE (GPT-NeoX / Llama): pairs (i, i + D/2) turned by the position's angles.
void rope(float* v, const float* cos_row, const float* sin_row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * cos_row[i] - x2 * sin_row[i];
    v[i + half] = x2 * cos_row[i] + x1 * sin_row[i];
  }
}

// q . k_t for four consecutive keys at once (four independent 8-lane sums, one per key, each added in the
// same fixed tree as `dot`): the reductions overlap instead of serialising. D % 8 == 0.
inline __attribute__((always_inline)) void dot4(const float* __restrict q, const float* __restrict k, int64_t D,
                                                float* out) {
  V8 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  for (int64_t i = 0; i < D; i += 8) {
    const V8 qv = load8(q + i);
    a0 += qv * load8(k + i);
    a1 += qv * load8(k + D + i);
    a2 += qv * load8(k + 2 * D + i);
    a3 += qv * load8(k + 3 * D + i);
  }
  out[0] = sum_lanes(a0);
  out[1] = sum_lanes(a1);
  out[2] = sum_lanes(a2);
  out[3] = sum_lanes(a3);
}

// v[i] = exp(v[i] - shift) for i < n, 8 at a time; the last partial block is padded, so every element goes
// through the same exp8 whatever n is (a row's weights must not depend on how many columns sit beside it).
inline __attribute__((always_inline)) void exp_shifted(float* v, int64_t n, float shift) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {  // whole blocks: fixed-size copies, i.e. plain vector loads and stores
    const V8 e = exp8(load8(v + i) - shift);
    std::memcpy(v + i, &e, sizeof e);
  }
  if (i == n) return;
  V8 block = V8{} - __builtin_inff();
  std::memcpy(&block, v + i, sizeof(float) * (n - i));
  const V8 e = exp8(block - shift);
  std::memcpy(v + i, &e, sizeof(float) * (n - i));
}

// act[j] = silu(gate[j]) * up[j] = gate / (1 + exp(-gate)) * up (Shazeer 2020), 8 at a time, padded like
// exp_shifted.
inline __attribute__((always_inline)) V8 swiglu8(V8 g, V8 u) { return g / (1.0f + exp8(-g)) * u; }

SPECULA_ROW_SCAN void swiglu(const float* gate, const float* up, int64_t n, float* act) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const V8 a = swiglu8(load8(gate + j), load8(up + j));
    std::memcpy(act + j, &a, sizeof a);
  }
  if (j == n) return;
  V8 g = {}, u = {};
  std::memcpy(&g, gate + j, sizeof(float) * (n - j));
  std::memcpy(&u, up + j, sizeof(float) * (n - j));
  const V8 a = swiglu8(g, u);
  std::memcpy(act + j, &a, sizeof(float) * (n - j));
}

// One query row of one head: softmax(q . k_t * scale + mask_t) over the T columns, times the values, into y.
SPECULA_ROW_SCAN void attend(const float* q, const float* keys, const float* values, int64_t T, int64_t D, float scale,
                             const float* mask_row, float* scores, float* y) {
  const float hidden = -std::numeric_limits<float>::infinity();
  int64_t t = 0;
  if (D % 8 == 0)
    for (; t + 4 <= T; t += 4) dot4(q, keys + t * D, D, scores + t);
  for (; t < T; ++t) scores[t] = dot(q, keys + t * D, D);
  float top = hidden;
  for (t = 0; t < T; ++t) {
    scores[t] = mask_row && mask_row[t] == hidden ? hidden : scores[t] * scale + (mask_row ? mask_row[t] : 0.0f);
    top = std::max(top, scores[t]);
  }
  exp_shifted(scores, T, top);
  float total = 0.0f;
  for (t = 0; t < T; ++t) total += scores[t];
  const float inverse = 1.0f / total;
  for (t = 0; t < T; ++t) scores[t] *= inverse;
  weighted_sum(scores, values, T, D, y);
}

// y = x W^T (+ b) with the output columns split over the compute threads (blocks of 16 columns, one range per
// thread): each thread streams its own share of the weights, which is what a second core adds to a step bound
// by the weight stream. Columns are independent dot products, so the split never changes a bit. The pool
// is LibTorch's (OpenMP: with OMP_WAIT_POLICY=passive its idle threads sleep instead of spinning).
// More rows than the kernel takes (a batch of sequences) go kSkinnyLinearMaxRows at a time within each thread's
// columns, each weight block read once per 32 rows.
void linear(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out, float* y) {
  const auto columns = [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; r += kSkinnyLinearMaxRows)
      skinny_linear(x + r * in, std::min(kSkinnyLinearMaxRows, rows - r), in, w, bias, out, y + r * out, begin, end);
  };
  const int threads = at::get_num_threads();
  constexpr int64_t kBlock = 16;
  const int64_t blocks = (out + kBlock - 1) / kBlock;
  if (threads <= 1 || at::in_parallel_region() || blocks < 2 * threads) return columns(0, out);
  at::parallel_for(0, blocks, (blocks + threads - 1) / threads,
                   [&](int64_t first, int64_t last) { columns(first * kBlock, std::min(out, last * kBlock)); });
}

template <typename T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// One layer's attention over every row: the rows' q vectors (in qkv, rows of qkv_width), the layer's cached keys
// and values, T columns (mask [rows, T] or none), H heads of size D sharing a key/value head in groups of G.
struct LayerAttention {
  const DecodeLayer& layer;
  const float* qkv;
  int64_t qkv_width, rows, T, H, G, D;
  float scale;
  const float* mask;
  float* out;  // [rows, H * D]

  // Heads [first, last): head by head, then row by row, so a head's keys and values (T x D floats each: 128 KB
  // together at 128 cached tokens and D = 64) stay in L2 for every row instead of the whole layer's (8 heads:
  // 1 MB) being read again from L3 for each row. Each (row, head) pair is computed alone, in a fixed order, into
  // its own output: neither the order of the pairs nor the thread that runs them moves a bit.
  void heads(int64_t first, int64_t last) const {
    thread_local std::vector<float> scores_v;
    float* scores = scratch(scores_v, static_cast<size_t>(T));
    for (int64_t h = first; h < last; ++h) {
      const float* keys = layer.keys + (h / G) * layer.capacity * D;
      const float* values = layer.values + (h / G) * layer.capacity * D;
      for (int64_t r = 0; r < rows; ++r)
        attend(qkv + r * qkv_width + h * D, keys, values, T, D, scale, mask ? mask + r * T : nullptr, scores,
               out + (r * H + h) * D);
    }
  }
};

// Every (sequence, head) pair of a layer's attention, split over the compute threads as `linear` splits columns:
// with a second core, attention (about a sixth of a 1-token step at 160 cached tokens, and each extra verified
// row's second-largest cost) is not left to one thread while the other waits, and a batch's small sequences are
// not each run on one thread. `work` is the layer's multiply-adds (kAttentionSplitWork). Each pair is computed
// alone: the split moves no bit.
void run_attention(const std::vector<LayerAttention>& attention, int64_t H, int64_t work) {
  const int threads = at::get_num_threads();
  const int64_t pairs = static_cast<int64_t>(attention.size()) * H;
  if (threads <= 1 || at::in_parallel_region() || pairs < 2 || work < kAttentionSplitWork) {
    for (const LayerAttention& a : attention) a.heads(0, H);
    return;
  }
  at::parallel_for(0, pairs, (pairs + threads - 1) / threads, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) attention[i / H].heads(i % H, i % H + 1);
  });
}

}  // namespace

void decode_rows(const DecodeShape& s, const std::vector<DecodeLayer>& layers, const float* final_norm, float* x,
                 int64_t rows, const int64_t* positions, const float* mask, int64_t cache_len) {
  DecodeSegment one;
  one.rows = rows;
  one.positions = positions;
  one.mask = mask;
  one.cache_len = cache_len;
  for (const DecodeLayer& L : layers) {
    one.keys.push_back(L.keys);
    one.values.push_back(L.values);
    one.capacity = L.capacity;
  }
  decode_segments(s, layers, final_norm, x, {one});
}

void decode_segments(const DecodeShape& s, const std::vector<DecodeLayer>& layers, const float* final_norm, float* x,
                     const std::vector<DecodeSegment>& segments) {
  const int64_t d = s.d_model, H = s.n_heads, Hkv = s.n_kv_heads, D = s.head_dim, ff = s.d_ff;
  const int64_t G = H / Hkv, qkv_width = (H + 2 * Hkv) * D, half = D / 2;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  int64_t rows = 0, shortest = segments.empty() ? 0 : segments[0].cache_len;
  for (const DecodeSegment& seg : segments) {
    shortest = std::min(shortest, seg.cache_len);
    if (seg.keys.size() != layers.size() || seg.values.size() != layers.size())
      fail("decode step: a segment's cache has ", seg.keys.size(), " layers for a model of ", layers.size());
    rows += seg.rows;
  }
  thread_local std::vector<float> normed_v, qkv_v, attn_v, proj_v, hidden_v, act_v;
  float* normed = scratch(normed_v, rows * d);
  float* qkv = scratch(qkv_v, rows * qkv_width);
  float* attn = scratch(attn_v, rows * H * D);
  float* proj = scratch(proj_v, rows * d);
  float* hidden = scratch(hidden_v, rows * 2 * ff);
  float* act = scratch(act_v, rows * ff);

  for (size_t l = 0; l < layers.size(); ++l) {
    const DecodeLayer& L = layers[l];
    // Attention: x + out(attention(rms_norm(x))).
    for (int64_t r = 0; r < rows; ++r)
      if (L.attn_norm)
        rms_norm(x + r * d, L.attn_norm, s.norm_eps, d, normed + r * d);
      else
        std::copy(x + r * d, x + (r + 1) * d, normed + r * d);
    linear(normed, rows, d, L.qkv, L.qkv_bias, qkv_width, qkv);
    int64_t first = 0;              // the segment's first row
    std::vector<DecodeLayer> owns;  // per segment: the weights, with its slice of the cache (LayerAttention refers)
    owns.reserve(segments.size());
    std::vector<LayerAttention> attention;
    int64_t work = 0;
    for (const DecodeSegment& seg : segments) {
      DecodeLayer& own = owns.emplace_back(L);
      own.keys = seg.keys[l];
      own.values = seg.values[l];
      own.capacity = seg.capacity;
      const int64_t cache_len = mutant_on(Mutant::batch_rows_use_shortest_cache_length) ? shortest : seg.cache_len;
      for (int64_t r = 0; r < seg.rows; ++r) {
        float* row = qkv + (first + r) * qkv_width;
        const float* c = L.rope_cos + seg.positions[r] * half;
        const float* sn = L.rope_sin + seg.positions[r] * half;
        for (int64_t h = 0; h < H + Hkv; ++h) rope(row + h * D, c, sn, D);  // the q heads, then the k heads
        const int64_t slot = cache_len + r;
        for (int64_t g = 0; g < Hkv; ++g) {
          std::copy(row + (H + g) * D, row + (H + g + 1) * D, own.keys + (g * own.capacity + slot) * D);
          std::copy(row + (H + Hkv + g) * D, row + (H + Hkv + g + 1) * D, own.values + (g * own.capacity + slot) * D);
        }
      }
      attention.push_back(LayerAttention{own, qkv + first * qkv_width, qkv_width, seg.rows, cache_len + seg.rows, H, G,
                                         D, scale, seg.mask, attn + first * H * D});
      work += seg.rows * (cache_len + seg.rows) * H * D;
      first += seg.rows;
    }
    run_attention(attention, H, work);
    linear(attn, rows, H * D, L.out, nullptr, d, proj);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += proj[i];

    // MLP: x + down(silu(gate(n)) * up(n)), n = rms_norm(x) (Shazeer 2020).
    for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, L.mlp_norm, s.norm_eps, d, normed + r * d);
    linear(normed, rows, d, L.gate_up, nullptr, 2 * ff, hidden);
    for (int64_t r = 0; r < rows; ++r) swiglu(hidden + r * 2 * ff, hidden + r * 2 * ff + ff, ff, act + r * ff);
    linear(act, rows, ff, L.down, nullptr, d, proj);
    for (int64_t i = 0; i < rows * d; ++i) x[i] += proj[i];
  }
  if (final_norm)
    for (int64_t r = 0; r < rows; ++r) rms_norm(x + r * d, final_norm, s.norm_eps, d, x + r * d);
}

}  // namespace specula
