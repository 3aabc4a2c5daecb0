// The Block of fused_sampler_row.h and verify_row.h for a CUDA block emulated on the CPU: T simulated
// threads (fibers of a FiberTeam), each with its own rank, sharing one EmulatedShared as a block shares
// __shared__ memory. Every collective keeps the CUDA Block's barrier structure (sampler_kernels.cu,
// verify_kernels.cu): partials are written, a barrier, thread 0 reduces (as CUB's BlockReduce leaves the
// result in thread 0), then the broadcast with its two barriers. A missing barrier in the row code therefore
// shows up here as it would on a GPU: as data that depends on the schedule.
//
// Sums: a reduction adds the threads' partials in rank order, a scan prefixes them in rank order; each
// thread's partial covers its strided share of the row. That is the GPU's decomposition, not its exact
// summation tree (CUB's warp shuffles), so float64 sums may differ from both the CPU verifiers' index
// order and the GPU's by a few ulp (kernels/README.md, "Parity").
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/fiber_team.h"
#include "kernels/fused_sampler_row.h"
#include "kernels/shared/mutation_points.h"
#include "kernels/verify_row.h"

namespace specula {

template <int T>
struct EmulatedShared {
  // One union, as CUB's TempStorage of every collective is one union in the CUDA Block: a collective that read
  // these while the next one writes them (a missing barrier between two collectives) reads clobbered partials.
  union {
    double f64[T];
    int32_t i32[T];
    uint64_t u64[T];
    fused_sampler::RowSummary summary[T];
    fused_sampler::WeightsTotal weights[T];
  };
  union {
    double f64;
    int32_t i32;
    fused_sampler::RadixPick pick;
    fused_sampler::RowSummary summary;
    fused_sampler::WeightsTotal weights;
  } out;
  uint64_t hist[fused_sampler::kRadixBins + 1];
  float candidates[fused_sampler::kHostCandidateCapacity];
  int32_t candidate_count;
  double scratch_f64[verify_row::kTreeF64Scratch];
  int32_t scratch_i32[verify_row::kTreeI32Scratch];
};

template <int T, int VEC>
struct EmulatedBlock {
  static constexpr int kThreads = T;
  static constexpr int kVec = VEC;
  static constexpr int kBinsPerThread = fused_sampler::kRadixBins / T;
  static_assert(fused_sampler::kRadixBins % T == 0, "histogram bins must split evenly over the threads");
  static_assert(32 % VEC == 0, "a vector must not straddle two bitmap words");

  EmulatedShared<T>& sh;
  FiberTeam& team;
  int thread;
  int32_t vocab;

  int rank() const { return thread; }
  bool leader() const { return thread == 0; }
  bool block_leader() const { return thread == 0; }
  void sync() { team.barrier(); }

  template <class F>
  void for_each_vec(F&& f) {
    for (int32_t base = thread * VEC; base < vocab; base += T * VEC) f(base);
  }
  fused_sampler::VecRange vec_range() const { return {thread * VEC, vocab, T * VEC}; }
  template <class F>
  void for_each_index(int32_t n, F&& f) {
    for (int32_t i = thread; i < n; i += T) f(i);
  }

  // Thread 0's value to every thread; the second barrier frees `out` for the next collective.
  template <typename V>
  V broadcast(V& slot, V value) {
    if (thread == 0) slot = value;
    sync();
    value = slot;
    sync();
    return value;
  }
  // Partials -> barrier -> thread 0 folds them in rank order -> broadcast.
  template <typename V, class Slots, class Op>
  V reduce(Slots& slots, V& out, V v, Op op) {
    slots[thread] = v;
    sync();
    V result = v;
    if (thread == 0) {
      result = slots[0];
      for (int t = 1; t < T; ++t) result = op(result, slots[t]);
    }
    return broadcast(out, result);
  }

  double sum_f64(double v) {
    return reduce(sh.f64, sh.out.f64, v, [](double a, double b) { return a + b; });
  }
  int32_t min_i32(int32_t v) {
    return reduce(sh.i32, sh.out.i32, v, [](int32_t a, int32_t b) { return a < b ? a : b; });
  }
  int32_t max_i32(int32_t v) {
    return reduce(sh.i32, sh.out.i32, v, [](int32_t a, int32_t b) { return a > b ? a : b; });
  }
  fused_sampler::RowSummary summarise(fused_sampler::RowSummary v) {
    return reduce(sh.summary, sh.out.summary, v, fused_sampler::Combine{});
  }

  fused_sampler::WeightsTotal sum_weights(fused_sampler::WeightsTotal v) {
    return reduce(sh.weights, sh.out.weights, v, fused_sampler::Combine{});
  }

  // Prefix sums over a tile in blocked order (thread t holds positions t*VEC .. t*VEC+VEC-1), then the
  // barrier the CUDA Block places after its BlockScan.
  double inclusive_scan(const double (&in)[VEC], double (&out)[VEC]) {
    double local = 0.0;
    for (int j = 0; j < VEC; ++j) out[j] = local += in[j];
    sh.f64[thread] = local;
    sync();
    double before = 0.0, total = 0.0;
    for (int t = 0; t < T; ++t) {
      if (t < thread) before += sh.f64[t];
      total += sh.f64[t];
    }
    for (int j = 0; j < VEC; ++j) out[j] += before;
    sync();
    return total;
  }

  // Exclusive prefix of v in rank order, and (in *total) the block's total: a thread's place in the block.
  double exclusive_sum_f64(double v, double* total) {
    sh.f64[thread] = v;
    sync();
    double before = 0.0, all = 0.0;
    for (int t = 0; t < T; ++t) {
      if (t < thread) before += sh.f64[t];
      all += sh.f64[t];
    }
    sync();
    *total = all;
    return before;
  }

  // The radix histogram, with the CUDA Block's indexing and barriers.
  void hist_clear() {
    for (int i = thread; i <= fused_sampler::kRadixBins; i += T) sh.hist[i] = 0;
    sync();
  }
  void hist_add(int bin, uint64_t w) { sh.hist[bin] += w; }  // fibers never interleave inside a phase
  uint64_t hist_suffix_sums() {
    sync();  // every hist_add has landed
    return suffix_sums(sh.hist);
  }
  fused_sampler::RadixPick hist_find(uint64_t above, uint64_t target) { return find_bucket(sh.hist, above, target); }

  // hist[d] := weight of buckets >= d, for this block's histogram or a cluster's merged one.
  uint64_t suffix_sums(uint64_t* hist) {
    constexpr int kTop = fused_sampler::kRadixBins - 1;
    uint64_t items[kBinsPerThread];
    uint64_t local = 0;
    for (int j = 0; j < kBinsPerThread; ++j) items[j] = local += hist[kTop - (thread * kBinsPerThread + j)];
    sh.u64[thread] = local;
    sync();  // BlockScan's exchange
    uint64_t before = 0;
    for (int t = 0; t < thread; ++t) before += sh.u64[t];
    sync();
    for (int j = 0; j < kBinsPerThread; ++j) hist[kTop - (thread * kBinsPerThread + j)] = items[j] + before;
    sync();
    const uint64_t total = hist[0];
    sync();  // as the CUDA Block: every thread has read the total before the next hist_clear
    return total;
  }
  fused_sampler::RadixPick find_bucket(const uint64_t* hist, uint64_t above, uint64_t target) {
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int d = fused_sampler::kRadixBins - 1 - (thread * kBinsPerThread + j);
      if (bucket_holds_target(above, hist[d + 1], hist[d], target))
        sh.out.pick = fused_sampler::RadixPick{static_cast<uint32_t>(d), above + hist[d + 1], above + hist[d]};
    }
    if (!mutant_on(Mutant::emulated_pick_unsynchronised)) sync();
    const fused_sampler::RadixPick pick = sh.out.pick;
    sync();
    return pick;
  }

  // The candidate list, with the CUDA Block's barriers; an add takes the next slot (fibers never interleave inside
  // a phase, so the slots' order is the schedule's).
  static constexpr int kCandidates = fused_sampler::kHostCandidateCapacity;
  void candidates_clear() {
    if (thread == 0) sh.candidate_count = 0;
    sync();
  }
  void candidate_add(float x) {
    const int32_t slot = sh.candidate_count++;
    if (slot < kCandidates) sh.candidates[slot] = x;
  }
  int32_t candidates_count() {
    if (!mutant_on(Mutant::emulated_candidates_unsynchronised)) sync();  // every add has landed
    const int32_t n = sh.candidate_count;
    sync();
    return n;
  }
  float candidate(int32_t i) const { return sh.candidates[i]; }

  double* f64() { return sh.scratch_f64; }
  int32_t* i32() { return sh.scratch_i32; }
};

}  // namespace specula
