// The few-row linear kernel's tiles, written once for every instruction set: each of skinny_linear_avx512.cpp,
// skinny_linear_avx2.cpp and skinny_linear_baseline.cpp includes this header and is compiled for its own ISA
// (CMake sets -march per file), so the same source becomes three kernels. Everything here has internal
// linkage: the three instantiations must not be merged by the linker (they are different machine code under
// the same names), and nothing here calls an inline library function (a non-inlined copy of one, compiled for
// AVX-512 in one file, could be the copy the linker keeps for the baseline file). Include it only from those
// three files.
//
// Each output element is one 16-lane dot product whose summation order depends only on `in`: a token gets
// bit-identical outputs whether it is computed alone or among other rows, so a 1-token decoding step and a
// (K + 1)-token verification step agree exactly on the logits they share. 16-bit weights are widened to fp32
// in registers (exactly: every fp16 and bf16 value is an fp32 value) and the arithmetic is fp32, so a 16-bit
// matrix gives the same bits as the fp32 kernel on its widened copy, at half the bytes read.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__AVX512F__) || defined(__F16C__))
#include <immintrin.h>
#endif

#include "harness/models/transformer/skinny_linear.h"

// The vector types below are only passed between always-inlined functions of one file, so the ABI note GCC
// gives for such values (-Wpsabi) concerns no real call.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12's _mm512_cvtph_ps starts from an undefined vector it then overwrites whole, which -Wmaybe-uninitialized
// reports inside avx512fintrin.h once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace specula {
namespace {

constexpr int kLanes = 16;  // partial sums per dot product, whatever the vector width

// W floats as one value: GCC lowers its arithmetic lane by lane to the file's target vectors. A 16-lane
// partial sum is 16 / W such vectors (lane l in vector l / W), so every variant adds the same terms per lane.
// (A template alias would drop the attribute, hence one typedef per width.)
template <int W>
struct VecOf;
template <>
struct VecOf<4> {
  typedef float type __attribute__((vector_size(16)));
  typedef uint16_t half __attribute__((vector_size(8)));
  typedef uint32_t bits __attribute__((vector_size(16)));
};
template <>
struct VecOf<8> {
  typedef float type __attribute__((vector_size(32)));
  typedef uint16_t half __attribute__((vector_size(16)));
  typedef uint32_t bits __attribute__((vector_size(32)));
};
template <>
struct VecOf<16> {
  typedef float type __attribute__((vector_size(64)));
  typedef uint16_t half __attribute__((vector_size(32)));
  typedef uint32_t bits __attribute__((vector_size(64)));
};
template <int W>
using Vec = typename VecOf<W>::type;

// The storage types of a weight matrix: fp32, IEEE binary16 and bfloat16 (the top half of an fp32).
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

// IEEE binary16 -> fp32, exactly (normal, subnormal, zero, inf and NaN); for the ISAs without F16C.
inline float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f)
    bits = sign | 0x7f800000u | (mantissa << 13);
  else if (exponent != 0)
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  else if (mantissa == 0)
    bits = sign;
  else  // subnormal: mantissa * 2^-24, exact (no library call: every function here must stay file-local)
    return (sign ? -1.0f : 1.0f) * static_cast<float>(mantissa) * 0x1p-24f;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

template <int W>
inline __attribute__((always_inline)) Vec<W> load(const float* p) {
  Vec<W> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// bf16 -> fp32 is a 16-bit shift: plain vector code that every ISA vectorises (zero-extend, shift).
template <int W>
inline __attribute__((always_inline)) Vec<W> load(const BFloat16* p) {
  typename VecOf<W>::half h;
  std::memcpy(&h, p, sizeof h);
  const typename VecOf<W>::bits wide = __builtin_convertvector(h, typename VecOf<W>::bits) << 16;
  Vec<W> v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}

// bf16 -> fp32 on 16-float vectors in two instructions (zero-extend, shift), for the panel tiles of two or more
// rows. GCC, tuned for 256-bit vectors, lowers the plain load above as two 8-lane zero-extensions joined by an
// extract and an insert, six instructions per vector, and in a tile of several rows those shuffles compete
// with its multiply-adds. A one-row tile is bound by the weight stream, not by instructions, and keeps the plain
// load. Either way each weight widens to the same fp32 value.
template <int W>
inline __attribute__((always_inline)) Vec<W> load_bf16_spelled(const BFloat16* p) {
#if defined(__x86_64__) && defined(__AVX512F__)
  if constexpr (W == 16)
    return (Vec<16>)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))),
                                      16);
#endif
  return load<W>(p);
}

// fp16 -> fp32 with the hardware conversion where the file's ISA has it (one instruction per vector).
template <int W>
inline __attribute__((always_inline)) Vec<W> load(const Half* p) {
#if defined(__x86_64__) && defined(__AVX512F__)
  if constexpr (W == 16) return (Vec<16>)_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
#endif
#if defined(__x86_64__) && defined(__F16C__)
  if constexpr (W == 8) return (Vec<8>)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#endif
  Vec<W> v;
  for (int i = 0; i < W; ++i) v[i] = half_to_float(p[i].bits);
  return v;
}

inline float widen(float v) { return v; }
inline float widen(Half v) { return half_to_float(v.bits); }
inline float widen(BFloat16 v) {
  const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
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

// Fetches the next weight-row group into cache while this one is computed: each of its cache lines once, in
// order, `per_step` lines per step of the dot products (the fewest that finish within the group's steps), from
// the group's first step on. The kernel first prefetched the same place in every next row at every step of
// both passes: each line two to four times over, instructions that take load slots. Once per line, early in the
// group, keeps the stream ahead of the multiply-adds without those extra loads (spreading the same lines over
// all of the group's steps starts them too late for several rows). Lines are counted from the group's first
// byte rounded down to a line, so every address formed lies inside the matrix.
struct Prefetcher {
  uintptr_t first_line = 0;
  int64_t lines = 0, per_step = 0, fetched = 0;
  inline __attribute__((always_inline)) void step() {
    for (int64_t k = 0; k < per_step && fetched < lines; ++k, ++fetched)
      __builtin_prefetch(reinterpret_cast<const char*>(first_line + 64 * static_cast<uintptr_t>(fetched)));
  }
};

// Outputs [o, o + WR) of input rows [r, r + XR): WR x XR dot products at once, so each weight vector loaded
// (and widened) serves XR rows and each input vector WR weight rows. Every output element is the same 16-lane
// dot product whatever the tile, so the tiling never changes a result.
template <int W, int WR, int XR, typename Wt>
inline __attribute__((always_inline)) void tile(const float* __restrict x, int64_t r, int64_t in,
                                                const Wt* __restrict w, const float* __restrict bias, int64_t out,
                                                float* __restrict y, int64_t o, Prefetcher& prefetch) {
  constexpr int P = kLanes / W;  // vectors per partial sum
  const int64_t body = in - in % kLanes;
  // The last in % 16 entries are zero-padded to one more 16-lane step, so they go through the same lane-wise
  // arithmetic as the rest (a scalar tail would be contracted or vectorised differently per target).
  float x_tail[XR][kLanes] = {}, w_tail[WR][kLanes] = {};
  for (int b = 0; b < XR; ++b)
    for (int64_t i = body; i < in; ++i) x_tail[b][i - body] = x[(r + b) * in + i];
  for (int a = 0; a < WR; ++a)
    for (int64_t i = body; i < in; ++i) w_tail[a][i - body] = widen(w[(o + a) * in + i]);
  // Lanes are independent sums, so the P vectors of a partial sum run one after the other over the row: a
  // tile then needs WR x XR registers, not P times that.
  Vec<W> acc[WR][XR][P];
  for (int p = 0; p < P; ++p) {
    Vec<W> sum[WR][XR] = {};
    for (int64_t i = p * W; i < body; i += kLanes) {
      prefetch.step();
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
    for (int b = 0; b < XR; ++b) y[(r + b) * out + o + a] = reduce_lanes<W>(acc[a][b]) + (bias ? bias[o + a] : 0.0f);
}

// Every input row against the weight rows [o, o + WR): XR rows at a time, then the rest in one narrower tile.
template <int W, int WR, int XR, typename Wt>
inline __attribute__((always_inline)) void weight_rows(const float* x, int64_t rows, int64_t in, const Wt* w,
                                                       const float* bias, int64_t out, float* y, int64_t o,
                                                       Prefetcher& prefetch) {
  int64_t r = 0;
  for (; r + XR <= rows; r += XR) tile<W, WR, XR>(x, r, in, w, bias, out, y, o, prefetch);
  if constexpr (XR > 1) {
    if (rows - r == XR - 1) return tile<W, WR, XR - 1>(x, r, in, w, bias, out, y, o, prefetch);
    weight_rows<W, WR, XR - 1>(x + r * in, rows - r, in, w, bias, out, y + r * out, o, prefetch);
  }
}

template <int W, int WR, int XR, typename Wt>
inline __attribute__((always_inline)) void columns(const float* x, int64_t rows, int64_t in, const Wt* w,
                                                   const float* bias, int64_t out, float* y, int64_t out_begin,
                                                   int64_t out_end) {
  // The next group's rows are contiguous (row-major matrix): its lines, over this group's steps (the tiles of
  // every input row, each with P passes over the row's 16-lane blocks).
  const int64_t tiles = (rows + XR - 1) / XR, passes = kLanes / W, blocks = in / kLanes;
  const int64_t steps = tiles * passes * blocks > 0 ? tiles * passes * blocks : 1;
  int64_t o = out_begin;
  for (; o + WR <= out_end; o += WR) {
    Prefetcher prefetch;
    if (o + 2 * WR <= out_end) {  // the last group has no next one here
      const uintptr_t begin = reinterpret_cast<uintptr_t>(w + (o + WR) * in);
      const uintptr_t end = reinterpret_cast<uintptr_t>(w + (o + 2 * WR) * in);
      prefetch.first_line = begin & ~uintptr_t{63};
      prefetch.lines = static_cast<int64_t>((end - prefetch.first_line + 63) / 64);
      prefetch.per_step = (prefetch.lines + steps - 1) / steps;
    }
    weight_rows<W, WR, XR>(x, rows, in, w, bias, out, y, o, prefetch);
  }
  Prefetcher none;
  for (; o < out_end; ++o) weight_rows<W, 1, XR>(x, rows, in, w, bias, out, y, o, none);
}

// One ISA's kernel for every weight dtype. A single row (a decoding step) is bound by the weight stream, not
// by arithmetic: it takes 8 weight rows at a time, so that more reads are in flight and the stream comes
// closer to a plain read's bandwidth. Same dot products, so the same bits.
template <int W, int WR, int XR, typename Wt>
inline __attribute__((always_inline)) void columns_for_rows(const float* x, int64_t rows, int64_t in, const Wt* w,
                                                            const float* bias, int64_t out, float* y, int64_t out_begin,
                                                            int64_t out_end) {
  if (rows == 1) return columns<W, 8, 1>(x, rows, in, w, bias, out, y, out_begin, out_end);
  columns<W, WR, XR>(x, rows, in, w, bias, out, y, out_begin, out_end);
}

// f(weights) with w's data as a pointer to its dtype's element type (float, Half or BFloat16): the one place a
// WeightDtype becomes a type, for every kernel and layout.
template <typename F>
inline __attribute__((always_inline)) void with_typed_weights(const WeightView& w, F&& f) {
  switch (w.dtype) {
    case WeightDtype::float32:
      return f(static_cast<const float*>(w.data));
    case WeightDtype::float16:
      return f(static_cast<const Half*>(w.data));
    case WeightDtype::bfloat16:
      return f(static_cast<const BFloat16*>(w.data));
  }
}

template <int W, int WR, int XR>
inline __attribute__((always_inline)) void columns_any(const float* x, int64_t rows, int64_t in, WeightView w,
                                                       const float* bias, int64_t out, float* y, int64_t out_begin,
                                                       int64_t out_end) {
  with_typed_weights(
      w, [&](const auto* weights) __attribute__((always_inline)) {
        columns_for_rows<W, WR, XR>(x, rows, in, weights, bias, out, y, out_begin, out_end);
      });
}

}  // namespace
}  // namespace specula
