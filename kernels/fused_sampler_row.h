// The fused sampler's per-row algorithm, written once for two backends: a CUDA block (CudaBlock in
// sampler_kernels.cu, one block per row, CUB primitives) and one CPU "thread" (HostBlock in
// sampler_kernels.cpp). A Block supplies the collective operations; everything that decides anything is
// here or in sampler_math.h, so the CPU run of this file tests the kernel's decisions without a GPU.
//
// Block interface (every call is collective: all threads of the block make it, in the same order):
//   kThreads, kVec                      threads per row, elements per vector access
//   rank(), leader()                    this thread's index; true for exactly one thread
//   for_each_vec(f)                     f(base) for this thread's vectors [base, base + kVec) of the row
//   vec_range()                         the same vectors as a VecRange (for_each_loaded_vec)
//   sum_f64, min_i32, max_i32           reductions whose result every thread receives
//   summarise(RowSummary)               pass 1's reductions in one (combine), the result in every thread
//   sum_weights(WeightsTotal)           a draw's float64 total and last positive index in one (combine)
//   inclusive_scan(in, out)             prefix sums of a tile of kThreads * kVec values; returns the total
//   hist_clear, hist_add(bin, w), hist_suffix_sums() -> total, hist_find(above, target) -> RadixPick
//   kCandidates, candidates_clear, candidate_add(x) (any thread, any order), candidates_count() -> the adds since
//   the clear (may exceed kCandidates: then the list holds an arbitrary kCandidates of them), candidate(i)
//                                       the block's candidate list (compact_candidates)
// A cluster's Block (kSlicedRow) adds slice(), slice_begin(), slice_end(), exclusive_sum_f64 (its block's
// ranks) and cluster_exclusive_sum_f64 (its cluster's blocks), and needs no inclusive_scan (inverse_cdf takes
// inverse_cdf_sliced's three levels instead of tiles).
//
// Passes over the row (scratch = the probs output, so nothing else is allocated):
//   1. read inputs, apply masks, bias, penalties, temperature; write the processed logits to scratch;
//      reduce max/argmax, counts, first bad index
//   2. per filter: min_p  -> a threshold by bisection over the float order (no pass)
//                  top_k  -> 3 radix-select passes over scratch (11 + 11 + 10 bits), weights 1
//                  top_p  -> 3 radix-select passes, weights = fixed-point exp(x - max) in float32, and 3 more
//                            with float64 exp only when the guard band cannot certify the float result
//      a radix filter after a cut first copies the candidates into the block's candidate list (one pass), and
//      its passes read the list instead of the row when they fit (top-k then top-p: ~k values, not V)
//   3. normaliser z over the kept tokens
//   4. write probabilities, reduce their float64 total and the last positive index
//   5. inverse-CDF draw, tile by tile in index order, stopping at the tile that holds the token (a row sliced
//      over a cluster: three levels, inverse_cdf_sliced)
//
// One row per block, or one row per thread-block cluster (SlicedRow): then every collective spans the cluster,
// and the processed row stays in the blocks' shared memory after pass 1, so the logits are read from memory once.
#pragma once

#include <cstdint>

#include "kernels/sampler_kernels.h"
#include "kernels/shared/host_device.h"
#include "kernels/shared/mutation_points.h"
#include "kernels/shared/philox.h"
#include "kernels/shared/sampler_math.h"

namespace specula {
namespace fused_sampler {

constexpr int kRadixBins = 2048;  // 11-bit digits
// A CUDA block's candidate list (compact_candidates): 4 KiB of shared memory, room for top-k's ~k candidates.
constexpr int kCandidateCapacity = 1024;
// The host's Blocks (the CPU run of this file, the emulated blocks) keep fewer, so that the test rows' cuts (top-k of
// tens, small vocabularies) take both ways: the list, and the row when they do not fit. The thresholds are the
// same either way.
constexpr int kHostCandidateCapacity = 40;
constexpr int32_t kNoIndex = 0x7fffffff;

struct ArgMax {  // no initialisers: it lives in a __shared__ union
  float value;
  int32_t index;
};

// Larger value wins; equal values go to the lower index, as apply_greedy's first maximum.
SPECULA_HD ArgMax better(const ArgMax& a, const ArgMax& b) {
  if (a.value > b.value) return a;
  if (b.value > a.value) return b;
  return a.index <= b.index ? a : b;
}

// What pass 1 learns about a row, reduced over the row in one collective (one crossing of a cluster instead of
// five): the first NaN / +inf logit, the tokens finite after masks and bias, the first penalty or temperature
// overflow, the tokens finite after everything, and the first maximum. Each field's fold is associative and
// commutative (min, sum, `better`), so any order of partials gives the same bits.
struct RowSummary {  // no initialisers: it lives in a __shared__ union
  int32_t first_bad;
  int32_t masked_finite;
  int32_t first_overflow;
  int32_t finite;
  ArgMax best;
};

SPECULA_HD RowSummary combine(const RowSummary& a, const RowSummary& b) {
  return RowSummary{a.first_bad < b.first_bad ? a.first_bad : b.first_bad, a.masked_finite + b.masked_finite,
                    a.first_overflow < b.first_overflow ? a.first_overflow : b.first_overflow, a.finite + b.finite,
                    better(a.best, b.best)};
}

struct RadixPick {
  uint32_t digit;
  uint64_t above;    // weight of all candidates above the picked bucket
  uint64_t through;  // the same plus the picked bucket's own weight
};

// Vector accesses of 4 x 32 bits on the GPU (the dispatch guarantees 16-byte alignment), scalar otherwise.
// kOnce: an input read exactly once, streamed past L2 (evict-first) so the scratch rows stay resident; else a
// plain (coherent) load, for scratch written earlier by this same kernel.
template <int VEC, bool kOnce, typename T>
SPECULA_HD void load_vec_as(const T* p, T (&v)[VEC]) {
#if defined(__CUDA_ARCH__)
  if constexpr (VEC == 4 && sizeof(T) == 4) {
    uint4 u;
    if constexpr (kOnce)
      u = __ldcs(reinterpret_cast<const uint4*>(p));
    else
      u = *reinterpret_cast<const uint4*>(p);
    v[0] = reinterpret_cast<const T&>(u.x);
    v[1] = reinterpret_cast<const T&>(u.y);
    v[2] = reinterpret_cast<const T&>(u.z);
    v[3] = reinterpret_cast<const T&>(u.w);
  } else if constexpr (kOnce) {
    for (int j = 0; j < VEC; ++j) v[j] = __ldcs(p + j);
  } else
#endif
  {
    for (int j = 0; j < VEC; ++j) v[j] = p[j];
  }
}

template <int VEC, typename T>
SPECULA_HD void load_vec(const T* p, T (&v)[VEC]) {
  load_vec_as<VEC, false>(p, v);
}

template <int VEC, typename T>
SPECULA_HD void load_vec_once(const T* p, T (&v)[VEC]) {
  load_vec_as<VEC, true>(p, v);
}

// A thread's vectors of a row: bases first, first + stride, ... below end, what for_each_vec visits in that order.
struct VecRange {
  int32_t first, end, stride;
};

// The vectors a thread's pass 1 loads before it uses the first. A loop that loads one vector and processes it keeps
// one 16-byte request per thread in flight (the next load waits for the loop's turn), and a row is read at HBM speed
// only with about bandwidth × latency bytes in flight per SM (Little's law: 4.8 TB/s × ~0.7 µs over 132 SMs is
// ~25 KiB, where 512 threads of one vector each hold 8 KiB).
constexpr int kLoadsInFlight = 4;

// f(base, v) for this thread's vectors in for_each_vec's order, v the kVec values of `row` at base, loaded U at a
// time before the first of them is used (the thread's last few, short of U, one at a time). The same calls in the
// same order as for_each_vec with the load inside, so every reduction over them gives the same bits.
template <int U, class Block, class F>
SPECULA_HD void for_each_loaded_vec(Block& b, const float* row, F&& f) {
  constexpr int VEC = Block::kVec;
  const VecRange r = b.vec_range();
  int32_t base = r.first;
  for (; base + (U - 1) * r.stride < r.end; base += U * r.stride) {  // U whole vectors: every load unconditional
    float v[U][VEC];
    SPECULA_UNROLL
    for (int u = 0; u < U; ++u) load_vec_once<VEC>(row + base + u * r.stride, v[u]);
    SPECULA_UNROLL
    for (int u = 0; u < U; ++u) f(base + u * r.stride, v[u]);
  }
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::pass1_tail_vectors_dropped)) return;
#endif
  for (; base < r.end; base += r.stride) {
    float v[VEC];
    load_vec_once<VEC>(row + base, v);
    f(base, v);
  }
}

template <int VEC>
SPECULA_HD void store_vec(float* p, const float (&v)[VEC]) {
#if defined(__CUDA_ARCH__)
  if constexpr (VEC == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else
#endif
  {
    for (int j = 0; j < VEC; ++j) p[j] = v[j];
  }
}

// ---- Where the processed row lives ---------------------------------------------------------------------
// A Block with kSlicedRow = true splits the row over the blocks of a thread-block cluster (cluster_block.cuh,
// emulated_cluster_block.h): each keeps its slice [slice_begin(), slice_end()) of the processed logits in its
// shared memory (slice()), the passes after the first read them from there, and only the probabilities go to
// `probs`. For any other Block the row's scratch is `probs` itself.
template <class B, class = void>
struct SlicedRow {
  static constexpr bool value = false;
};
template <class B>
struct SlicedRow<B, decltype(void(B::kSlicedRow))> {
  static constexpr bool value = B::kSlicedRow;
};

// Block `cta`'s slice [begin, end) of a row of `vocab` tokens split into slices of `span` (cluster_slice_span):
// empty for a block past the row's end.
struct SliceBounds {
  int32_t begin, end;
};
SPECULA_HD SliceBounds slice_bounds(int64_t cta, int32_t span, int32_t vocab) {
  const int64_t first = cta * span;
  const int32_t begin = static_cast<int32_t>(first < vocab ? first : vocab);
  return SliceBounds{begin, begin + span < vocab ? begin + span : vocab};
}

template <class Block>
SPECULA_HD void row_load(Block& b, const float* probs, int32_t base, float (&x)[Block::kVec]) {
  if constexpr (SlicedRow<Block>::value)
    load_vec<Block::kVec>(b.slice() + (base - b.slice_begin()), x);
  else
    load_vec<Block::kVec>(probs + base, x);
}
template <class Block>
SPECULA_HD void row_store(Block& b, float* probs, int32_t base, const float (&x)[Block::kVec]) {
  if constexpr (SlicedRow<Block>::value)
    store_vec<Block::kVec>(b.slice() + (base - b.slice_begin()), x);
  else
    store_vec<Block::kVec>(probs + base, x);
}
// The final probabilities: the output row, and the slice when the draw reads it from there.
template <class Block>
SPECULA_HD void result_store(Block& b, float* probs, int32_t base, const float (&x)[Block::kVec]) {
  if constexpr (SlicedRow<Block>::value) row_store(b, probs, base, x);
  store_vec<Block::kVec>(probs + base, x);
}

// ---- Inverse-CDF draws from unnormalised weights (the fused sampler's draw and every verifier's) ---------
// A Weight is a callable weight(base, w) that fills w[0 .. kVec) with the float64 weights of tokens
// [base, base + kVec) (the dispatch guarantees base + kVec <= V).

struct WeightsTotal {  // no initialisers: it lives in a __shared__ union
  double total;
  int32_t last_positive;  // the last token with a positive weight (sample_from_weights' fallback), -1 if none
};

// Partial totals folded: the float64 sum (the Block's order, as sum_f64's) and the last positive index.
SPECULA_HD WeightsTotal combine(const WeightsTotal& a, const WeightsTotal& b) {
  return WeightsTotal{a.total + b.total, a.last_positive > b.last_positive ? a.last_positive : b.last_positive};
}

// `combine` as the fold operator every Block's fused reductions take (CUB's, the emulation's, a cluster's).
struct Combine {
  template <class T>
  SPECULA_HD T operator()(const T& a, const T& b) const {
    return combine(a, b);
  }
};

template <class Block, class Weight>
SPECULA_HD WeightsTotal weights_total(Block& b, Weight&& weight) {
  constexpr int VEC = Block::kVec;
  double total = 0.0;
  int32_t last = -1;
  b.for_each_vec([&](int32_t base) {
    double w[VEC];
    weight(base, w);
    for (int j = 0; j < VEC; ++j) {
      total += w[j];
      if (w[j] > 0.0) last = base + j;
    }
  });
  return b.sum_weights(WeightsTotal{total, last});
}

// inverse_cdf for a row split over a cluster (SlicedRow), in three levels instead of serial tiles: the blocks'
// totals prefixed in block order; each thread's contiguous chunk of whole vectors of its block's slice prefixed in
// rank order; the chunk scanned serially. A token's cumulative weight is (blocks before + chunks before) + the
// chunk's running sum; the first token whose cumulative weight exceeds u * total and whose weight is positive is
// the draw (inverse_cdf's rule, summed in another order); t.last_positive when rounding leaves none.
// Shared-memory banks: neighbouring threads' chunks start a multiple of 128 bytes apart (256 B at 128K tokens), so
// reading them in step would put a warp's loads on the same banks. The chunk's total is read in a rotated order
// (thread r starts at its vector r mod the chunk's), which spreads the lanes over the banks; the index-order scan
// runs only in threads whose chunk reaches past the target: the one that holds the draw, and those after it, which
// stop at their first positive weight.
template <class Block, class Weight>
SPECULA_HD int32_t inverse_cdf_sliced(Block& b, Weight&& weight, const WeightsTotal& t, double u) {
  constexpr int VEC = Block::kVec;
  const double target = u * t.total;
  const int32_t vectors = (b.slice_end() - b.slice_begin() + VEC - 1) / VEC;
  const int32_t chunk = (vectors + Block::kThreads - 1) / Block::kThreads * VEC;
  const int32_t offset = b.rank() * chunk;
  const int32_t first = b.slice_begin() + offset < b.slice_end() ? b.slice_begin() + offset : b.slice_end();
  const int32_t last = first + chunk < b.slice_end() ? first + chunk : b.slice_end();
  const int32_t count = (last - first) / VEC;  // whole vectors (the dispatch's alignment)
  const int32_t start = count > 0 ? b.rank() % count : 0;
  double own = 0.0;
  for (int32_t i = 0; i < count; ++i) {
    const int32_t v = i + start < count ? i + start : i + start - count;
    double w[VEC];
    weight(first + v * VEC, w);
    for (int j = 0; j < VEC; ++j) own += w[j];
  }
  double block_total = 0.0;
  const double before_thread = b.exclusive_sum_f64(own, &block_total);
  double running = b.cluster_exclusive_sum_f64(block_total) + before_thread;
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::sliced_draw_ignores_blocks_before)) running = before_thread;
#endif
  int32_t pick = kNoIndex;
  if (running + own > target)
    for (int32_t base = first; base < last && pick == kNoIndex; base += VEC) {
      double w[VEC];
      weight(base, w);
      for (int j = 0; j < VEC; ++j) {
        running += w[j];
        if (pick == kNoIndex && inverse_cdf_picks(w[j], running, target)) pick = base + j;
      }
    }
  pick = b.min_i32(pick);
  return pick != kNoIndex ? pick : t.last_positive;
}

// The token whose cumulative weight first exceeds u * total (sample_from_weights), scanning tiles of
// kThreads * kVec tokens in index order and stopping at the tile that holds it (total must be positive). A token
// is picked only where its own weight is positive (inverse_cdf_picks): a parallel scan may round one ulp
// differently from the neighbouring thread's sum.
template <class Block, class Weight>
SPECULA_HD int32_t inverse_cdf_tiles(Block& b, int32_t vocab, Weight&& weight, const WeightsTotal& t, double u) {
  constexpr int VEC = Block::kVec;
  const double target = u * t.total;
  constexpr int32_t kTile = Block::kThreads * VEC;
  double running = 0.0;
  for (int32_t tile = 0; tile < vocab; tile += kTile) {
    const int32_t base = tile + b.rank() * VEC;
    double w[VEC], cumulative[VEC];
    if (base < vocab) {
      weight(base, w);
    } else {
      for (int j = 0; j < VEC; ++j) w[j] = 0.0;
    }
    const double tile_total = b.inclusive_scan(w, cumulative);
    int32_t pick = kNoIndex;
    for (int j = VEC - 1; j >= 0; --j)
      if (inverse_cdf_picks(w[j], running + cumulative[j], target)) pick = base + j;
    pick = b.min_i32(pick);
    if (pick != kNoIndex) return pick;
    running += tile_total;
  }
  return t.last_positive;  // u * total rounded up to total
}

// The inverse-CDF draw of every kernel: -1 when the total is not positive; tiles for one block per row, the
// sliced levels for a row split over a cluster.
template <class Block, class Weight>
SPECULA_HD int32_t inverse_cdf(Block& b, int32_t vocab, Weight&& weight, const WeightsTotal& t, double u) {
  if (!(t.total > 0.0)) return -1;
  if constexpr (SlicedRow<Block>::value)
    return inverse_cdf_sliced(b, weight, t, u);
  else
    return inverse_cdf_tiles(b, vocab, weight, t, u);
}

template <class Block, class Weight>
SPECULA_HD int32_t sample_weights(Block& b, int32_t vocab, Weight&& weight, double u) {
  const WeightsTotal t = weights_total(b, weight);
  return inverse_cdf(b, vocab, weight, t, u);
}

SPECULA_HD float positive_infinity() { return float_from_bits(0x7f800000u); }
SPECULA_HD float quiet_nan() { return float_from_bits(0x7fc00000u); }

// The result of a radix select: the value v with weight(> v) < target <= weight(>= v) among the candidates.
struct RadixResult {
  bool found;        // false when the candidates weigh less than the target (top-k with k >= candidates)
  float threshold;   // v
  uint64_t total;    // the candidates' weight
  uint64_t above;    // weight(> v)
  uint64_t through;  // weight(>= v)
};

// ---- Candidates compacted after a cut -----------------------------------------------------------------
// After a filter has narrowed the cut, the next radix select would read the whole row three to six times to
// count a few candidates (top-k leaves ~k). compact_candidates reads the row once and copies the values that the
// cut keeps into the block's candidate list in shared memory, in whatever order the adds land; the radix passes
// then read the list. A histogram is a sum of integer weights, so a pass over the list counts exactly what a
// pass over the row counts: the thresholds are the same bits, whatever the order. Returns the list's size, or -1
// when this block's candidates do not fit (the passes read the row, as without it). Each block of a cluster
// decides for its own slice: its share of the merged histogram is the same either way.
template <class Block>
SPECULA_HD int32_t compact_candidates(Block& b, const float* scratch, float cut) {
  constexpr int VEC = Block::kVec;
  b.candidates_clear();
  b.for_each_vec([&](int32_t base) {
    float x[VEC];
    row_load(b, scratch, base, x);
    for (int j = 0; j < VEC; ++j)
      if (kept_by_cut(x[j], cut)) b.candidate_add(x[j]);
  });
  const int32_t n = b.candidates_count();
  return n <= Block::kCandidates ? n : -1;
}

// f(x) for this thread's share of the candidates' values: the candidate list's first `compacted` when it holds
// them (compacted >= 0), else the row's (this block's vectors of it).
template <class Block, class F>
SPECULA_HD void for_each_candidate(Block& b, const float* scratch, int32_t compacted, F&& f) {
  constexpr int VEC = Block::kVec;
  if (compacted >= 0) {
    for (int32_t i = b.rank(); i < compacted; i += Block::kThreads) f(b.candidate(i));
    return;
  }
  b.for_each_vec([&](int32_t base) {
    float x[VEC];
    row_load(b, scratch, base, x);
    for (int j = 0; j < VEC; ++j) f(x[j]);
  });
}

// Radix select over float_order_key among the candidates (kept_by_cut): three histogram passes of 11, 11
// and 10 bits. A candidate weighs weight(x) (an integer, so the histograms are exact and deterministic
// whatever order the atomics land in); the target is target_of(total weight). `compacted`: the candidate list's
// size when it holds every candidate (compact_candidates), else -1.
template <class Block, class Weight, class Target>
SPECULA_HD RadixResult radix_select(Block& b, const float* scratch, float cut, int32_t compacted, Weight&& weight,
                                    Target&& target_of) {
  uint32_t prefix = 0, prefix_mask = 0;
  RadixResult r{false, 0.0f, 0, 0, 0};
  uint64_t target = 0;
  for (int round = 0; round < 3; ++round) {
    const int shift = round == 0 ? 21 : (round == 1 ? 10 : 0);
    const uint32_t digit_mask = round == 2 ? 0x3ffu : 0x7ffu;
    b.hist_clear();
    for_each_candidate(b, scratch, compacted, [&](float x) {
      if (!kept_by_cut(x, cut)) return;
      const uint32_t key = float_order_key(x);
      if ((key & prefix_mask) != prefix) return;
      const uint64_t w = weight(x);
      if (w != 0) b.hist_add(static_cast<int>((key >> shift) & digit_mask), w);
    });
    const uint64_t total = b.hist_suffix_sums();
    if (round == 0) {
      r.total = total;
      target = target_of(total);
      if (target > total) return r;
    }
    const RadixPick pick = b.hist_find(r.above, target);
    prefix |= pick.digit << shift;
    prefix_mask |= digit_mask << shift;
    r.above = pick.above;
    r.through = pick.through;
  }
  r.found = true;
  r.threshold = float_from_order_key(prefix);
  return r;
}

// top-k's threshold (weights 1, target k); false when k >= candidates (nothing to remove).
template <class Block>
SPECULA_HD bool top_k_threshold(Block& b, const float* scratch, float cut, int32_t compacted, int32_t top_k,
                                float* threshold) {
  const RadixResult r = radix_select(
      b, scratch, cut, compacted, [](float) { return uint64_t(1); },
      [top_k](uint64_t) { return static_cast<uint64_t>(top_k); });
  *threshold = r.threshold;
  return r.found;
}

// top-p's threshold: the radix select over fixed-point masses (fixed_mass, target top_p_fixed_target). The
// float-first pass decides whenever approx_top_p_certain proves that the exact pass would pick the same
// value; otherwise the exact pass runs. `candidates` bounds the number of candidates (fixed_mass_shift).
template <class Block>
SPECULA_HD bool top_p_threshold(Block& b, const float* scratch, float cut, int32_t compacted, float max_logit,
                                float top_p, int32_t candidates, bool float_first, float* threshold) {
  const int shift = fixed_mass_shift(candidates);
  const auto target_of = [top_p](uint64_t total) { return top_p_fixed_target(total, top_p); };
  if (float_first) {
    const float approx_scale = static_cast<float>(uint64_t(1) << shift);
    const RadixResult approx = radix_select(
        b, scratch, cut, compacted, [=](float x) { return approx_fixed_mass(x, max_logit, approx_scale); }, target_of);
#if defined(__CUDA_ARCH__)
    const bool uncertified = false;
#else
    const bool uncertified = mutant_on(Mutant::top_p_float_pass_uncertified);
#endif
    if (approx.found &&
        (uncertified || approx_top_p_certain(approx.above, approx.through, approx.total, candidates, top_p))) {
      *threshold = approx.threshold;
      return true;
    }
  }
  const double scale = static_cast<double>(uint64_t(1) << shift);
  const RadixResult exact = radix_select(
      b, scratch, cut, compacted, [=](float x) { return fixed_mass(x, max_logit, scale); }, target_of);
  *threshold = exact.threshold;
  return exact.found;
}

// Fills the row with `value` (NaN marks a failed row) or a one-hot at `hot`.
template <class Block>
SPECULA_HD void fill_row(Block& b, float* probs, float value, int32_t hot) {
  constexpr int VEC = Block::kVec;
  b.for_each_vec([&](int32_t base) {
    float v[VEC];
    for (int j = 0; j < VEC; ++j) v[j] = base + j == hot ? 1.0f : value;
    store_vec<VEC>(probs + base, v);
  });
}

// The row's status after pass 1, in the CPU pipeline's order of checks: a NaN or +inf logit, every token masked,
// a penalty or the temperature overflowing, nothing finite left to sample.
SPECULA_HD SamplerRowStatus pass1_status(const float* logits, int32_t first_bad, int32_t masked_finite,
                                         int32_t first_overflow, int32_t finite, bool greedy) {
  if (first_bad != kNoIndex)
    return logits[first_bad] != logits[first_bad] ? SamplerRowStatus::nan_logit : SamplerRowStatus::pos_inf_logit;
  if (masked_finite == 0) return SamplerRowStatus::all_masked;
  if (first_overflow != kNoIndex) return SamplerRowStatus::overflow;
  if (finite == 0 && !greedy) return SamplerRowStatus::nothing_left;
  return SamplerRowStatus::ok;
}

// Pass 2: the filters, in the row's order, each narrowing the threshold it returns (a logit is kept when it is at
// least the threshold; -inf keeps every finite one). `probs` holds pass 1's logits.
template <class Block>
SPECULA_HD float filter_threshold(Block& b, const SamplerRowParams& rp, const float* probs, float max_logit,
                                  int32_t finite, TopPPass top_p_pass) {
  const float ninf = negative_infinity();
  float cut = ninf;
  // Packed into a register: indexing rp.filters with a loop variable would put rp in local memory.
  const uint32_t order = rp.filters[0] | (uint32_t(rp.filters[1]) << 8) | (uint32_t(rp.filters[2]) << 16);
  int32_t compacted = -1;  // the candidate list's size once it holds every candidate
  float tried = ninf;      // the cut of the last compaction (one that did not fit is tried again at a higher cut)
  for (int f = 0; f < rp.num_filters && f < 3; ++f) {
    const KernelFilter filter = static_cast<KernelFilter>((order >> (8 * f)) & 0xffu);
    const bool top_k = filter == KernelFilter::top_k && rp.top_k > 0;
    const bool top_p = filter == KernelFilter::top_p && rp.top_p < 1.0f;
    if ((top_k || top_p) && compacted < 0 && cut > tried) {
      tried = cut;
      compacted = compact_candidates(b, probs, cut);
    }
    float t = ninf;
    if (filter == KernelFilter::min_p && rp.min_p > 0.0f) {
      t = min_p_threshold(max_logit, rp.min_p);
    } else if (top_k) {
      if (!top_k_threshold(b, probs, cut, compacted, rp.top_k, &t)) t = ninf;
    } else if (top_p) {
      if (!top_p_threshold(b, probs, cut, compacted, max_logit, rp.top_p, finite, top_p_pass == TopPPass::float_first,
                           &t))
        t = ninf;
    }
    cut = t > cut ? t : cut;
  }
  return cut;
}

// Passes 3 and 4: the softmax over the kept logits, written over them in `probs` (0 for the rest), with the
// float64 total and last positive index that sample_from_weights draws with.
template <class Block>
SPECULA_HD WeightsTotal softmax_kept(Block& b, float* probs, float cut, float max_logit) {
  constexpr int VEC = Block::kVec;
  // ---- Pass 3: softmax normaliser over the kept tokens ----
  double z = 0.0;
  b.for_each_vec([&](int32_t base) {
    float x[VEC];
    row_load(b, probs, base, x);
    for (int j = 0; j < VEC; ++j)
      if (kept_by_cut(x[j], cut)) z += static_cast<double>(std::exp(x[j] - max_logit));
  });
  z = b.sum_f64(z);
  const double inv_z = 1.0 / z;

  // ---- Pass 4: probabilities; their float64 total and last positive index (sample_from_weights) ----
  double total = 0.0;
  int32_t last_positive = -1;
  b.for_each_vec([&](int32_t base) {
    float x[VEC];
    row_load(b, probs, base, x);
    for (int j = 0; j < VEC; ++j) {
      x[j] =
          kept_by_cut(x[j], cut) ? static_cast<float>(static_cast<double>(std::exp(x[j] - max_logit)) * inv_z) : 0.0f;
      total += static_cast<double>(x[j]);
      if (x[j] > 0.0f) last_positive = base + j;
    }
    result_store(b, probs, base, x);
  });
  return b.sum_weights(WeightsTotal{total, last_positive});
}

// One row of the fused sampler. `p` as in SamplerKernelParams; pointers of the Block's memory space.
template <class Block>
SPECULA_HD void sample_row(Block& b, const SamplerKernelParams& p, int32_t row) {
  constexpr int VEC = Block::kVec;
  const SamplerRowParams rp = p.rows[row];
  const int32_t vocab = p.vocab;
  const size_t in_row =
      p.input_rows ? static_cast<size_t>(p.input_rows[row]) : (p.shared_inputs ? 0 : static_cast<size_t>(row));
  const size_t offset = in_row * static_cast<size_t>(vocab);
  const size_t word_offset = in_row * static_cast<size_t>((vocab + 31) / 32);
  const size_t logits_row = p.logits_rows ? static_cast<size_t>(p.logits_rows[row]) : in_row;
  const size_t probs_row = p.probs_rows ? static_cast<size_t>(p.probs_rows[row]) : static_cast<size_t>(row);
  const float* logits = p.logits + logits_row * static_cast<size_t>(vocab);
  float* probs = p.probs + probs_row * static_cast<size_t>(vocab);
  const uint32_t* allowed = (rp.flags & kRowAllowed) && p.allowed_bitmap ? p.allowed_bitmap + word_offset : nullptr;
  const uint32_t* banned = (rp.flags & kRowBanned) && p.banned_bitmap ? p.banned_bitmap + word_offset : nullptr;
  const uint32_t* prompt = (rp.flags & kRowPrompt) && p.prompt_bitmap ? p.prompt_bitmap + word_offset : nullptr;
  const int32_t* counts = (rp.flags & kRowCounts) && p.output_counts ? p.output_counts + offset : nullptr;
  const float* bias = (rp.flags & kRowBias) && p.logit_bias ? p.logit_bias + offset : nullptr;

  const bool greedy = rp.temperature == 0.0f;
  const float inv_temperature = greedy ? 1.0f : 1.0f / rp.temperature;  // as apply_temperature
  const bool repetition = rp.repetition_penalty != 1.0f;
  const bool frequency_presence = rp.frequency_penalty != 0.0f || rp.presence_penalty != 0.0f;
  const float ninf = negative_infinity(), pinf = positive_infinity();

  // ---- Pass 1: masks, bias, penalties, temperature (the CPU's float operations, in its order) ----
  int32_t first_bad = kNoIndex, first_overflow = kNoIndex, masked_finite = 0, finite = 0;
  ArgMax best{ninf, kNoIndex};
  for_each_loaded_vec<kLoadsInFlight>(b, logits, [&](int32_t base, const float(&raw)[VEC]) {
    float add[VEC], x[VEC];
    int32_t count[VEC];
    if (bias) load_vec_once<VEC>(bias + base, add);
    if (counts) load_vec_once<VEC>(counts + base, count);
    const int32_t word = base >> 5;  // kVec divides 32: a vector never straddles two bitmap words
    const uint32_t allowed_word = allowed ? allowed[word] : ~0u;
    const uint32_t banned_word = banned ? banned[word] : 0u;
    const uint32_t prompt_word = prompt ? prompt[word] : 0u;
    for (int j = 0; j < VEC; ++j) {
      const int32_t i = base + j;
      const uint32_t bit = 1u << (i & 31);
      float v = raw[j];
      if (v != v || v == pinf) first_bad = first_bad < i ? first_bad : i;
      if (!(allowed_word & bit) || (banned_word & bit)) v = ninf;
      if (bias) v += add[j];
      if (!(v != v || v == pinf || v == ninf)) ++masked_finite;  // count_finite after masks and bias
      const int32_t c = counts ? count[j] : 0;
      if (repetition && ((prompt_word & bit) || c > 0)) v = apply_repetition_penalty(v, rp.repetition_penalty);
      if (frequency_presence && c > 0) v = apply_frequency_presence(v, c, rp.frequency_penalty, rp.presence_penalty);
      if (!greedy) v *= inv_temperature;
      if (v != v || v == pinf) {
        first_overflow = first_overflow < i ? first_overflow : i;
      } else if (v != ninf) {
        ++finite;
        best = better(best, ArgMax{v, i});
      }
      x[j] = v;
    }
    row_store(b, probs, base, x);
  });
  const RowSummary summary = b.summarise(RowSummary{first_bad, masked_finite, first_overflow, finite, best});
  first_bad = summary.first_bad;
  masked_finite = summary.masked_finite;
  first_overflow = summary.first_overflow;
  finite = summary.finite;
  best = summary.best;

  const SamplerRowStatus status = pass1_status(logits, first_bad, masked_finite, first_overflow, finite, greedy);
  if (status != SamplerRowStatus::ok || greedy) {
    // Greedy: the first maximal logit gets probability 1 (apply_greedy, then softmax), and is the draw.
    // When penalties pushed every logit to -inf, apply_greedy's starting guess, token 0, wins.
    const bool ok = status == SamplerRowStatus::ok;
    const int32_t hot = best.index == kNoIndex ? 0 : best.index;
    fill_row(b, probs, ok ? 0.0f : quiet_nan(), ok ? hot : -1);
    if (b.leader()) {
      p.tokens[row] = ok ? hot : -1;
      p.status[row] = static_cast<int32_t>(status);
    }
    return;
  }

  const float max_logit = best.value;  // no filter ever removes the maximum
  const float cut = filter_threshold(b, rp, probs, max_logit, finite, p.top_p_pass);
  const WeightsTotal kept = softmax_kept(b, probs, cut, max_logit);
  // ---- Pass 5: inverse CDF with the row's Philox uniform: tiles in index order, or a sliced row's levels ----
  const auto processed = [&](int32_t base, double(&w)[VEC]) {
    float x[VEC];
    row_load(b, probs, base, x);  // a cluster's slice, or the output row
    for (int j = 0; j < VEC; ++j) w[j] = static_cast<double>(x[j]);
  };
  const int32_t token = inverse_cdf(b, vocab, processed, kept, philox_uniform(rp.seed, rp.stream, rp.offset));
  if (b.leader()) {
    p.tokens[row] = token;
    p.status[row] = static_cast<int32_t>(SamplerRowStatus::ok);
  }
}

}  // namespace fused_sampler
}  // namespace specula
