#include "harness/models/transformer/skinny_linear.h"

#include <cstring>

#include "verify/error.h"

// The 64-byte vector type below is only ever passed between always-inlined functions of one target, so the
// ABI note GCC gives for such values (-Wpsabi) concerns no real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace specula {
namespace {

constexpr int kLanes = 16;  // partial sums per dot product, whatever the vector width

// W floats as one value: GCC lowers its arithmetic lane by lane to the function's target vectors. A 16-lane
// partial sum is 16 / W such vectors (lane l in vector l / W), so every variant adds the same terms per lane.
// (A template alias would drop the attribute, hence one typedef per width.)
template <int W>
struct VecOf;
template <>
struct VecOf<4> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct VecOf<8> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct VecOf<16> {
  typedef float type __attribute__((vector_size(64)));
};
template <int W>
using Vec = typename VecOf<W>::type;

template <int W>
inline __attribute__((always_inline)) Vec<W> load(const float* p) {
  Vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Adds the 16 lanes in a fixed tree (lane l + 8 into l, then l + 4, l + 2, l + 1) so the result never depends
// on the width; in registers (a round trip through memory stalls on store forwarding).
template <int W>
inline __attribute__((always_inline)) float reduce_lanes(const Vec<W>* parts) {
  Vec<4> q;  // lanes 0..3 after the 8- and 4-steps
  if constexpr (W == 16) {
    const Vec<8> h = __builtin_shufflevector(parts[0], parts[0], 0, 1, 2, 3, 4, 5, 6, 7) +
                     __builtin_shufflevector(parts[0], parts[0], 8, 9, 10, 11, 12, 13, 14, 15);
    q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  } else if constexpr (W == 8) {
    const Vec<8> h = parts[0] + parts[1];
    q = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
  } else {
    static_assert(W == 4, "widths 4, 8 and 16");
    q = (parts[0] + parts[2]) + (parts[1] + parts[3]);
  }
  return (q[0] + q[2]) + (q[1] + q[3]);
}

// Outputs [o, o + WR) of input rows [r, r + XR): WR x XR dot products at once, so each weight vector loaded
// serves XR rows and each input vector WR weight rows. Every output element is the same 16-lane dot product
// whatever the tile, so the tiling never changes a result.
template <int W, int WR, int XR>
inline __attribute__((always_inline)) void tile(const float* __restrict x, int64_t r, int64_t in,
                                                const float* __restrict w, const float* __restrict bias, int64_t out,
                                                float* __restrict y, int64_t o) {
  constexpr int P = kLanes / W;  // vectors per partial sum
  const int64_t body = in - in % kLanes;
  // The last in % 16 entries are zero-padded to one more 16-lane step, so they go through the same lane-wise
  // arithmetic as the rest (a scalar tail would be contracted or vectorised differently per target).
  float x_tail[XR][kLanes] = {}, w_tail[WR][kLanes] = {};
  for (int b = 0; b < XR; ++b)
    for (int64_t i = body; i < in; ++i) x_tail[b][i - body] = x[(r + b) * in + i];
  for (int a = 0; a < WR; ++a)
    for (int64_t i = body; i < in; ++i) w_tail[a][i - body] = w[(o + a) * in + i];
  // Lanes are independent sums, so the P vectors of a partial sum run one after the other over the row: a
  // tile then needs WR x XR registers, not P times that.
  Vec<W> acc[WR][XR][P];
  for (int p = 0; p < P; ++p) {
    Vec<W> sum[WR][XR] = {};
    for (int64_t i = p * W; i < body; i += kLanes) {
      Vec<W> xv[XR];
      for (int b = 0; b < XR; ++b) xv[b] = load<W>(x + (r + b) * in + i);
      for (int a = 0; a < WR; ++a) {
        const Vec<W> wv = load<W>(w + (o + a) * in + i);
        for (int b = 0; b < XR; ++b) sum[a][b] += xv[b] * wv;
      }
    }
    if (body < in) {
      Vec<W> xv[XR];
      for (int b = 0; b < XR; ++b) xv[b] = load<W>(x_tail[b] + p * W);
      for (int a = 0; a < WR; ++a) {
        const Vec<W> wv = load<W>(w_tail[a] + p * W);
        for (int b = 0; b < XR; ++b) sum[a][b] += xv[b] * wv;
      }
    }
    for (int a = 0; a < WR; ++a)
      for (int b = 0; b < XR; ++b) acc[a][b][p] = sum[a][b];
  }
  for (int a = 0; a < WR; ++a)
    for (int b = 0; b < XR; ++b)
      y[(r + b) * out + o + a] = reduce_lanes<W>(acc[a][b]) + (bias ? bias[o + a] : 0.0f);
}

// Every input row against the weight rows [o, o + WR): XR rows at a time, then the rest in one narrower tile.
template <int W, int WR, int XR>
inline __attribute__((always_inline)) void weight_rows(const float* x, int64_t rows, int64_t in, const float* w,
                                                       const float* bias, int64_t out, float* y, int64_t o) {
  int64_t r = 0;
  for (; r + XR <= rows; r += XR) tile<W, WR, XR>(x, r, in, w, bias, out, y, o);
  if constexpr (XR > 1) {
    if (rows - r == XR - 1) return tile<W, WR, XR - 1>(x, r, in, w, bias, out, y, o);
    weight_rows<W, WR, XR - 1>(x + r * in, rows - r, in, w, bias, out, y + r * out, o);
  }
}

template <int W, int WR, int XR>
inline __attribute__((always_inline)) void columns(const float* x, int64_t rows, int64_t in, const float* w,
                                                   const float* bias, int64_t out, float* y, int64_t out_begin,
                                                   int64_t out_end) {
  int64_t o = out_begin;
  for (; o + WR <= out_end; o += WR) weight_rows<W, WR, XR>(x, rows, in, w, bias, out, y, o);
  for (; o < out_end; ++o) weight_rows<W, 1, XR>(x, rows, in, w, bias, out, y, o);
}

// Tiles sized to the register file: AVX-512 has 32 vector registers (4 x 4 sums), AVX2 and SSE 16 (4 x 3 and
// 3 x 3 sums, leaving room for the loaded vectors).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("arch=x86-64-v4"))) void skinny_linear_avx512(const float* x, int64_t rows, int64_t in,
                                                                    const float* w, const float* bias, int64_t out,
                                                                    float* y, int64_t out_begin, int64_t out_end) {
  columns<16, 4, 4>(x, rows, in, w, bias, out, y, out_begin, out_end);
}
__attribute__((target("arch=x86-64-v3"))) void skinny_linear_avx2(const float* x, int64_t rows, int64_t in,
                                                                  const float* w, const float* bias, int64_t out,
                                                                  float* y, int64_t out_begin, int64_t out_end) {
  columns<8, 4, 3>(x, rows, in, w, bias, out, y, out_begin, out_end);
}
#endif

void skinny_linear_baseline(const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out,
                            float* y, int64_t out_begin, int64_t out_end) {
  columns<4, 3, 3>(x, rows, in, w, bias, out, y, out_begin, out_end);
}

using Kernel = void (*)(const float*, int64_t, int64_t, const float*, const float*, int64_t, float*, int64_t, int64_t);

Kernel kernel_for(SkinnyIsa isa) {
  switch (isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    case SkinnyIsa::avx512:
      return skinny_linear_avx512;
    case SkinnyIsa::avx2:
      return skinny_linear_avx2;
#endif
    default:
      return skinny_linear_baseline;
  }
}

SkinnyIsa best_isa() {
  for (SkinnyIsa isa : {SkinnyIsa::avx512, SkinnyIsa::avx2})
    if (skinny_linear_supported(isa)) return isa;
  return SkinnyIsa::baseline;
}

}  // namespace

bool skinny_linear_supported(SkinnyIsa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  switch (isa) {
    case SkinnyIsa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
    case SkinnyIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SkinnyIsa::baseline:
      return true;
  }
  return false;
#else
  return isa == SkinnyIsa::baseline;
#endif
}

void skinny_linear_with(SkinnyIsa isa, const float* x, int64_t rows, int64_t in, const float* w, const float* bias,
                        int64_t out, float* y, int64_t out_begin, int64_t out_end) {
  if (!skinny_linear_supported(isa)) fail("skinny_linear: this CPU lacks the instruction set asked for");
  kernel_for(isa)(x, rows, in, w, bias, out, y, out_begin, out_end);
}

void skinny_linear(const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out, float* y,
                   int64_t out_begin, int64_t out_end) {
  static const Kernel kernel = kernel_for(best_isa());
  kernel(x, rows, in, w, bias, out, y, out_begin, out_end);
}

}  // namespace specula
