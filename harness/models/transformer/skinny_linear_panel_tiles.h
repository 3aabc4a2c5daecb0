// The few-row linear kernel on panel-packed weights (WeightLayout::panels, skinny_linear.h), written once for
// every instruction set like the row-major tiles it sits beside (same rules: included only from the three
// skinny_linear_<isa>.cpp files, internal linkage, no library calls).
//
// Why a second layout: on row-major weights each output is a dot product along `in`, kept as 16 lane sums and
// reduced at the end; every row of a tile needs its own accumulators per weight row, so the rows of a token tree
// multiply the arithmetic against a weight stream that is the same for all of them. With 16 outputs side by side
// in memory, one vector load serves 16 outputs: the kernel broadcasts x[r][i] and adds x[r][i] * w[o..o+16][i]
// into one accumulator vector set per row. No reductions, two loads and six broadcasts per 12 FMAs on AVX2, and
// each panel is one contiguous stream (measurements: results/README.md).
//
// Summation order: output (r, o) is the sequential fp32 sum over i = 0, 1, ..., in - 1 of x[r][i] * w[o][i],
// fused multiply-adds on the FMA ISAs (the baseline rounds each product), then + bias. It depends on nothing
// but `in`, so, as on row-major weights, a token's outputs do not depend on the rows beside it or on how the
// output columns are split, and AVX2 and AVX-512 give the same bits (each lane is one output's own chain).
//
// On AVX-512, x arrives step-major, x[r][i] at x[i * rows + r] (skinny_linear.cpp transposes it): a tile of 8
// rows on 3 panels then reads its rows' values at step i from one pointer at constant offsets, where one
// pointer per row, the panels' and the loop's exceed the 16 general registers and spill inside the loop. The
// AVX2 and baseline tiles (at most 6 rows on one panel from 3 rows on) read x as given, row-major.
#pragma once

#include <type_traits>

#include "harness/models/transformer/skinny_linear_tiles.h"

namespace specula {
namespace {

// bf16 panels on 8-float vectors (AVX2): one 32-byte load per step, widened by two in-lane unpacks with zeros
// (each bf16 value becomes the top half of an fp32) instead of two zero-extensions across lanes and two
// shifts, which would compete with the FMAs for the same ports where fp16 needs one conversion instruction. The
// unpacks keep 128-bit lanes apart, so vector 0 holds outputs
// 0-3 and 8-11, vector 1 outputs 4-7 and 12-15; the tile puts them back in order once, when it stores. Each
// output's sum is unchanged, so the bits are too.
template <int W, typename Wt>
constexpr bool kSplitLanes = false;
#if defined(__x86_64__) && defined(__AVX2__) && !defined(__AVX512F__)
template <>
constexpr bool kSplitLanes<8, BFloat16> = true;
#endif

// Whether the W-float kernel reads x step-major (above); each skinny_linear_<isa>.cpp exports it for
// skinny_linear.cpp, which transposes x to match.
template <int W>
constexpr bool kStepMajorX = W == 16;

// Rows [0, XR) of x against PP consecutive panels (16 PP outputs): y[r][0..16 PP) = x[r] . w[o] + bias[o],
// x[r][i] at x[i * ldx + r] (step-major) or x[r * ldx + i] (row-major). prefetch: a range of Halves x 8 PP in
// sizeof(Wt) bytes (half or all of the next PP panels) to fetch over the tile's steps, or null.
template <int W, int XR, int PP, int Halves = 1, typename Wt>
inline __attribute__((always_inline)) void panel_tile(const float* __restrict x, int64_t ldx, int64_t in,
                                                      const Wt* __restrict panel, const float* __restrict bias,
                                                      float* __restrict y, int64_t out, const char* prefetch) {
  constexpr int P = kPanelOutputs / W;                             // vectors per 16 outputs
  constexpr int64_t kBytesPerStep = Halves * 8 * sizeof(Wt) * PP;  // per step of `in`: half or all of its bytes
  const int64_t stride = in * kPanelOutputs;                       // elements from one panel to the next
  Vec<W> acc[XR][PP * P] = {};
  for (int64_t i = 0; i < in; ++i) {
    if constexpr (kBytesPerStep % 64 == 0) {  // whole lines per step
      if (prefetch)
        for (int64_t l = 0; l < kBytesPerStep / 64; ++l) __builtin_prefetch(prefetch + i * kBytesPerStep + 64 * l);
    } else if constexpr (64 % kBytesPerStep == 0) {  // a line every few steps
      constexpr int64_t kStepsPerLine = 64 / kBytesPerStep;
      if (prefetch && i % kStepsPerLine == 0) __builtin_prefetch(prefetch + 64 * (i / kStepsPerLine));
    } else {  // 3 panels (48 or 96 bytes a step): every line the step's bytes touch, its last byte's included
      if (prefetch) {
        const char* first = prefetch + i * kBytesPerStep;
        for (int64_t l = 0; l < kBytesPerStep / 64; ++l) __builtin_prefetch(first + 64 * l);
        __builtin_prefetch(first + kBytesPerStep - 1);
      }
    }
    Vec<W> wv[PP * P];
    for (int k = 0; k < PP; ++k) {
      const Wt* step = panel + k * stride + i * kPanelOutputs;
      if constexpr (kSplitLanes<W, Wt>) {
#if defined(__x86_64__) && defined(__AVX2__)
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step));
        wv[k * P] = (Vec<8>)_mm256_unpacklo_epi16(_mm256_setzero_si256(), v);
        wv[k * P + 1] = (Vec<8>)_mm256_unpackhi_epi16(_mm256_setzero_si256(), v);
#endif
      } else if constexpr (std::is_same_v<Wt, BFloat16> && XR >= 2) {
        for (int p = 0; p < P; ++p) wv[k * P + p] = load_bf16_spelled<W>(step + p * W);
      } else {
        for (int p = 0; p < P; ++p) wv[k * P + p] = load<W>(step + p * W);
      }
    }
    for (int r = 0; r < XR; ++r) {
      const float xs = kStepMajorX<W> ? x[i * ldx + r] : x[r * ldx + i];
      for (int q = 0; q < PP * P; ++q) acc[r][q] += wv[q] * xs;
    }
  }
  for (int r = 0; r < XR; ++r)
    for (int k = 0; k < PP; ++k) {
      Vec<W> result[P];
      if constexpr (kSplitLanes<W, Wt>) {
#if defined(__x86_64__) && defined(__AVX2__)
        const __m256 a = (__m256)acc[r][k * P], b = (__m256)acc[r][k * P + 1];
        result[0] = (Vec<8>)_mm256_permute2f128_ps(a, b, 0x20);  // outputs 0-3 (a's low half), 4-7 (b's)
        result[1] = (Vec<8>)_mm256_permute2f128_ps(a, b, 0x31);  // outputs 8-11, 12-15 (the high halves)
#endif
      } else {
        for (int p = 0; p < P; ++p) result[p] = acc[r][k * P + p];
      }
      for (int p = 0; p < P; ++p) {
        const int64_t o = k * kPanelOutputs + p * W;
        if (bias) result[p] += load<W>(bias + o);
        std::memcpy(y + r * out + o, &result[p], sizeof result[p]);
      }
    }
}

// A tile of n <= XR rows (n known only at run time).
template <int W, int XR, int PP, int Halves = 1, typename Wt>
inline __attribute__((always_inline)) void panel_tile_of(int64_t n, const float* x, int64_t ldx, int64_t in,
                                                         const Wt* panel, const float* bias, float* y, int64_t out,
                                                         const char* prefetch) {
  if (n == XR) return panel_tile<W, XR, PP, Halves>(x, ldx, in, panel, bias, y, out, prefetch);
  if constexpr (XR > 1) panel_tile_of<W, XR - 1, PP, Halves>(n, x, ldx, in, panel, bias, y, out, prefetch);
}

// Every input row against PP consecutive panels, in the fewest tiles of at most XR rows, their sizes as even
// as can be (15 rows on AVX2: 5 + 5 + 5, not 6 + 6 + 3): a tile of r rows keeps r x PP x 16 / W multiply-add
// chains in flight, and a small last tile would leave the FMA units waiting on their latency. Tiles 0 and 1
// fetch the two halves of the next PP panels, 8 PP sizeof(Wt) bytes per step (one line every few steps, or a
// line or two per step); with a single tile only the first half is fetched and the hardware prefetcher does
// the rest, unless WholeAlone, when the lone tile fetches the whole next group: worth it only where a step's
// multiply-adds take as long as its weight bytes take to arrive (AVX-512, several rows on few panels); where the
// stream dominates, the extra fetches only take load slots.
template <int W, int XR, int PP, bool WholeAlone, typename Wt>
inline __attribute__((always_inline)) void panel_rows(const float* x, int64_t rows, int64_t in, const Wt* panel,
                                                      const float* bias, float* y, int64_t out, const char* next) {
  const int64_t half = PP * in * kPanelOutputs * static_cast<int64_t>(sizeof(Wt)) / 2;
  const int64_t tiles = (rows + XR - 1) / XR;
  const int64_t ldx = kStepMajorX<W> ? rows : in, row_stride = kStepMajorX<W> ? 1 : in;  // x[r][i] (panel_tile)
  if (WholeAlone && tiles == 1) return panel_tile_of<W, XR, PP, 2>(rows, x, ldx, in, panel, bias, y, out, next);
  int64_t r = 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = rows / tiles + (t < rows % tiles ? 1 : 0);
    panel_tile_of<W, XR, PP>(n, x + r * row_stride, ldx, in, panel, bias, y + r * out, out,
                             next && t < 2 ? next + t * half : nullptr);
    r += n;
  }
}

// Output columns [out_begin, out_end) in groups of PP panels (the last ones one by one), rows up to XR at a
// time, while the next group (PP in * 16 contiguous weights) is fetched into cache a few lines per step. The
// last group fetches nothing: the single panels after it, if any, start unfetched.
template <int W, int XR, int PP, bool WholeAlone = false, typename Wt>
inline __attribute__((always_inline)) void panel_groups(const float* x, int64_t rows, int64_t in, const Wt* w,
                                                        const float* bias, int64_t out, float* y, int64_t out_begin,
                                                        int64_t out_end) {
  constexpr int64_t kGroup = PP * kPanelOutputs;
  int64_t o = out_begin;
  for (; o + kGroup <= out_end; o += kGroup) {
    const char* next = o + 2 * kGroup <= out_end ? reinterpret_cast<const char*>(w + (o + kGroup) * in) : nullptr;
    panel_rows<W, XR, PP, WholeAlone>(x, rows, in, w + o * in, bias ? bias + o : nullptr, y + o, out, next);
  }
  if constexpr (PP > 1)
    if (o < out_end) panel_groups<W, XR, 1, WholeAlone>(x, rows, in, w, bias, out, y, o, out_end);
}

// Output columns [out_begin, out_end), both multiples of 16 (skinny_linear.cpp checks). One row keeps only
// 16 / W multiply-add chains per panel, each waiting on the previous step's FMA: the loop then cannot run
// far enough ahead of the weight stream to catch up after a late line (16-bit weights, half as many bytes
// per step, suffer most). So one or two rows take several panels per tile, about 8 chains in all; each
// output's sum is the same, so are the bits.
template <int W, int XR, typename Wt>
inline __attribute__((always_inline)) void panel_columns(const float* x, int64_t rows, int64_t in, const Wt* w,
                                                         const float* bias, int64_t out, float* y, int64_t out_begin,
                                                         int64_t out_end) {
  constexpr int P = kPanelOutputs / W;  // 1 (AVX-512), 2 (AVX2) or 4 (baseline)
  static_assert(P >= 1 && P <= 4, "panels per tile below assume 1 to 4 vectors per panel");
  if constexpr (P == 1) {
    // One vector per panel (AVX-512). A tile of r rows on one panel keeps only r chains and issues one broadcast
    // per multiply-add, so 3-4 rows take 4 panels per tile (12-16 chains) and 5 or more rows 3 panels per tile
    // of up to XR = 8 rows (15 rows: 8 + 7, 24 and 21 chains, 3 loads and 8 broadcasts per 24 multiply-adds). A
    // lone tile fetches the whole next group while it works, not half, where the arithmetic keeps pace with the
    // bytes: with 16-bit weights (a step brings half the bytes of an fp32 one; one row also on 4 panels, not 8)
    // and with 5-8 rows (a step's 24 multiply-adds take as long as its bytes take to arrive). fp32 with few rows
    // is bound by the stream, and fetching more there only takes load slots.
    constexpr bool k16 = sizeof(Wt) == 2;
    constexpr int kOneRow = k16 ? 4 : 8;
    if (rows == 1) return panel_groups<W, 1, kOneRow, k16>(x, rows, in, w, bias, out, y, out_begin, out_end);
    if (rows == 2) return panel_groups<W, 2, 4, k16>(x, rows, in, w, bias, out, y, out_begin, out_end);
    if (rows <= 4) return panel_groups<W, 4, 4, k16>(x, rows, in, w, bias, out, y, out_begin, out_end);
    return panel_groups<W, XR, 3, true>(x, rows, in, w, bias, out, y, out_begin, out_end);
  } else {
    constexpr int kOneRow = 8 / P, kTwoRows = 4 / P;
    if (rows == 1) return panel_groups<W, 1, kOneRow>(x, rows, in, w, bias, out, y, out_begin, out_end);
    if (rows == 2) return panel_groups<W, 2, kTwoRows>(x, rows, in, w, bias, out, y, out_begin, out_end);
    panel_groups<W, XR, 1>(x, rows, in, w, bias, out, y, out_begin, out_end);
  }
}

// One ISA's kernel for every weight dtype and layout: WR x XR tiles on row-major weights, PXR rows at a time
// on panels.
template <int W, int WR, int XR, int PXR>
inline __attribute__((always_inline)) void skinny_any(const float* x, int64_t rows, int64_t in, WeightView w,
                                                      const float* bias, int64_t out, float* y, int64_t out_begin,
                                                      int64_t out_end) {
  if (w.layout == WeightLayout::row_major)
    return columns_any<W, WR, XR>(x, rows, in, w, bias, out, y, out_begin, out_end);
  with_typed_weights(
      w, [&](const auto* weights) __attribute__((always_inline)) {
        panel_columns<W, PXR>(x, rows, in, weights, bias, out, y, out_begin, out_end);
      });
}

}  // namespace
}  // namespace specula
