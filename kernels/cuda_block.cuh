// The Block of fused_sampler_row.h and verify_row.h for one CUDA block, shared by the sampler and the
// verification kernels: CUB BlockReduce / BlockScan collectives whose results every thread receives, the radix
// histogram (sampler) and per-row scratch (tree verification) in `Extra` shared memory. Methods are
// __host__ __device__ only so that the shared row templates type-check for both sides; they are called from
// device code alone. A member that uses `Extra` (the histogram, the scratch) is instantiated only where a
// kernel calls it.
#pragma once

#include <cooperative_groups.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/fused_sampler_row.h"

namespace specula {
namespace cuda_block {

struct MinOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a > b ? a : b; }
};

// A block's candidate list (fused_sampler::compact_candidates): the values, and how many adds were made.
struct CandidateList {
  float values[fused_sampler::kCandidateCapacity];
  int32_t count;
};

// Extra shared memory of the fused sampler: the radix histogram (hist[kRadixBins] stays 0, the sum above the
// top bucket) and the candidate list.
struct Histogram {
  unsigned long long hist[fused_sampler::kRadixBins + 1];
  CandidateList candidates;
};
// Extra shared memory of the verification kernels: F64 / I32 scratch elements (the tree kernel's per-node state).
template <int F64, int I32>
struct Scratch {
  double f64[F64];
  int32_t i32[I32];
};

template <int BLOCK, int VEC, class Extra>
struct CudaBlock {
  static constexpr int kThreads = BLOCK;
  static constexpr int kVec = VEC;
  static constexpr int kBinsPerThread = fused_sampler::kRadixBins / BLOCK;
  static_assert(fused_sampler::kRadixBins % BLOCK == 0, "histogram bins must split evenly over the threads");
  static_assert(32 % VEC == 0, "a vector must not straddle two bitmap words");

  using ReduceF64 = cub::BlockReduce<double, BLOCK>;
  using ReduceI32 = cub::BlockReduce<int32_t, BLOCK>;
  using ReduceSummary = cub::BlockReduce<fused_sampler::RowSummary, BLOCK>;
  using ReduceWeights = cub::BlockReduce<fused_sampler::WeightsTotal, BLOCK>;
  using ScanF64 = cub::BlockScan<double, BLOCK>;
  using ScanU64 = cub::BlockScan<unsigned long long, BLOCK>;

  struct Shared {
    union {
      typename ReduceF64::TempStorage f64;
      typename ReduceI32::TempStorage i32;
      typename ReduceSummary::TempStorage summary;
      typename ReduceWeights::TempStorage weights;
      typename ScanF64::TempStorage scan_f64;
      typename ScanU64::TempStorage scan_u64;
    } temp;
    union {
      double f64;
      int32_t i32;
      fused_sampler::RadixPick pick;
      fused_sampler::RowSummary summary;
      fused_sampler::WeightsTotal weights;
    } out;
    Extra extra;
  };

  Shared& sh;
  int32_t vocab;

  __host__ __device__ int rank() const {
#if defined(__CUDA_ARCH__)
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ bool leader() const { return rank() == 0; }
  __host__ __device__ bool block_leader() const { return rank() == 0; }

  __host__ __device__ fused_sampler::VecRange vec_range() const {
#if defined(__CUDA_ARCH__)
    return {static_cast<int32_t>(threadIdx.x) * VEC, vocab, BLOCK * VEC};
#else
    return {0, 0, 1};
#endif
  }
  template <class F>
  __host__ __device__ void for_each_vec(F&& f) {
#if defined(__CUDA_ARCH__)
    for (int32_t base = static_cast<int32_t>(threadIdx.x) * VEC; base < vocab; base += BLOCK * VEC) f(base);
#else
    (void)f;
#endif
  }
  template <class F>
  __host__ __device__ void for_each_index(int32_t n, F&& f) {
#if defined(__CUDA_ARCH__)
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < n; i += BLOCK) f(i);
#else
    (void)n;
    (void)f;
#endif
  }

  // Reduction result in thread 0 -> shared -> every thread; the second barrier frees temp and out.
  template <typename T>
  __device__ T broadcast(T& slot, T value) {
    if (threadIdx.x == 0) slot = value;
    __syncthreads();
    value = slot;
    __syncthreads();
    return value;
  }

  __host__ __device__ double sum_f64(double v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.f64, ReduceF64(sh.temp.f64).Sum(v));
#else
    return v;
#endif
  }
  __host__ __device__ int32_t min_i32(int32_t v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.i32, ReduceI32(sh.temp.i32).Reduce(v, MinOp{}));
#else
    return v;
#endif
  }
  __host__ __device__ int32_t max_i32(int32_t v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.i32, ReduceI32(sh.temp.i32).Reduce(v, MaxOp{}));
#else
    return v;
#endif
  }
  __host__ __device__ fused_sampler::RowSummary summarise(fused_sampler::RowSummary v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.summary, ReduceSummary(sh.temp.summary).Reduce(v, fused_sampler::Combine{}));
#else
    return v;
#endif
  }

  __host__ __device__ fused_sampler::WeightsTotal sum_weights(fused_sampler::WeightsTotal v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.weights, ReduceWeights(sh.temp.weights).Reduce(v, fused_sampler::Combine{}));
#else
    return v;
#endif
  }

  // Prefix sums over a tile in blocked order (thread t holds positions t*VEC .. t*VEC+VEC-1).
  __host__ __device__ double inclusive_scan(const double (&in)[VEC], double (&out)[VEC]) {
#if defined(__CUDA_ARCH__)
    double items[VEC];
    for (int j = 0; j < VEC; ++j) items[j] = in[j];
    double aggregate;
    ScanF64(sh.temp.scan_f64).InclusiveSum(items, out, aggregate);  // aggregate: valid in every thread
    __syncthreads();
    return aggregate;
#else
    (void)in;
    (void)out;
    return 0.0;
#endif
  }

  // Exclusive prefix of v in rank order; *total receives the block's total.
  __host__ __device__ double exclusive_sum_f64(double v, double* total) {
#if defined(__CUDA_ARCH__)
    double before, aggregate;
    ScanF64(sh.temp.scan_f64).ExclusiveSum(v, before, aggregate);  // aggregate: valid in every thread
    __syncthreads();
    *total = aggregate;
    return before;
#else
    *total = v;
    return 0.0;
#endif
  }

  __host__ __device__ void sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }

  // ---- The radix histogram (Extra = Histogram) ----
  __host__ __device__ void hist_clear() {
#if defined(__CUDA_ARCH__)
    for (int i = threadIdx.x; i <= fused_sampler::kRadixBins; i += BLOCK) sh.extra.hist[i] = 0;
    __syncthreads();
#endif
  }
  __host__ __device__ void hist_add(int bin, uint64_t w) {
#if defined(__CUDA_ARCH__)
    atomicAdd(&sh.extra.hist[bin], static_cast<unsigned long long>(w));
#else
    (void)bin;
    (void)w;
#endif
  }
  __host__ __device__ uint64_t hist_suffix_sums() {
#if defined(__CUDA_ARCH__)
    __syncthreads();  // every hist_add has landed
    return suffix_sums(sh.extra.hist);
#else
    return 0;
#endif
  }
  // The unique bucket d with above + hist[d+1] < target <= above + hist[d] (radix_select guarantees one).
  __host__ __device__ fused_sampler::RadixPick hist_find(uint64_t above, uint64_t target) {
    return find_bucket(sh.extra.hist, above, target);
  }

  // hist[d] := weight of buckets >= d (thread t scans buckets from the top, kBinsPerThread each), for this
  // block's histogram or a cluster's merged one (every write to it visible to the block).
  __host__ __device__ uint64_t suffix_sums(unsigned long long* hist) {
#if defined(__CUDA_ARCH__)
    constexpr int kTop = fused_sampler::kRadixBins - 1;
    unsigned long long items[kBinsPerThread];
    for (int j = 0; j < kBinsPerThread; ++j) items[j] = hist[kTop - (threadIdx.x * kBinsPerThread + j)];
    ScanU64(sh.temp.scan_u64).InclusiveSum(items, items);
    for (int j = 0; j < kBinsPerThread; ++j) hist[kTop - (threadIdx.x * kBinsPerThread + j)] = items[j];
    __syncthreads();
    const uint64_t total = hist[0];
    // Every thread has read the total before any may go on to the next hist_clear: without this barrier a
    // row that returns early (top-k with k >= candidates) and clears the histogram for its next filter
    // races the slower threads' read (found by compute-sanitizer racecheck).
    __syncthreads();
    return total;
#else
    (void)hist;
    return 0;
#endif
  }
  __host__ __device__ fused_sampler::RadixPick find_bucket(const unsigned long long* hist, uint64_t above,
                                                           uint64_t target) {
#if defined(__CUDA_ARCH__)
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int d = fused_sampler::kRadixBins - 1 - static_cast<int>(threadIdx.x * kBinsPerThread + j);
      if (bucket_holds_target(above, hist[d + 1], hist[d], target))
        sh.out.pick = fused_sampler::RadixPick{static_cast<uint32_t>(d), above + hist[d + 1], above + hist[d]};
    }
    __syncthreads();
    const fused_sampler::RadixPick pick = sh.out.pick;
    __syncthreads();
    return pick;
#else
    (void)hist;
    (void)target;
    return fused_sampler::RadixPick{0, above, above};
#endif
  }

  // ---- The candidate list (Extra = Histogram, or a cluster's extra with `candidates`) ----
  static constexpr int kCandidates = fused_sampler::kCandidateCapacity;
  __host__ __device__ void candidates_clear() {
#if defined(__CUDA_ARCH__)
    if (threadIdx.x == 0) sh.extra.candidates.count = 0;
    __syncthreads();
#endif
  }
  // One shared atomic per group of lanes adding together (the coalesced group), not one per value: a cut that keeps
  // many tokens would otherwise serialise the block on one address before the list is found not to fit.
  __host__ __device__ void candidate_add(float x) {
#if defined(__CUDA_ARCH__)
    const cooperative_groups::coalesced_group lanes = cooperative_groups::coalesced_threads();
    int32_t first = 0;
    if (lanes.thread_rank() == 0) first = atomicAdd(&sh.extra.candidates.count, static_cast<int32_t>(lanes.size()));
    const int32_t slot = lanes.shfl(first, 0) + static_cast<int32_t>(lanes.thread_rank());
    if (slot < kCandidates) sh.extra.candidates.values[slot] = x;
#else
    (void)x;
#endif
  }
  __host__ __device__ int32_t candidates_count() {
#if defined(__CUDA_ARCH__)
    __syncthreads();  // every add has landed
    const int32_t n = sh.extra.candidates.count;
    __syncthreads();  // every thread has read the count before a later clear
    return n;
#else
    return 0;
#endif
  }
  __host__ __device__ float candidate(int32_t i) const {
#if defined(__CUDA_ARCH__)
    return sh.extra.candidates.values[i];
#else
    (void)i;
    return 0.0f;
#endif
  }

  // ---- Per-row scratch (Extra = Scratch) ----
  __host__ __device__ double* f64() { return sh.extra.f64; }
  __host__ __device__ int32_t* i32() { return sh.extra.i32; }
};

}  // namespace cuda_block
}  // namespace specula
