// The Block of fused_sampler_row.h for a thread-block cluster emulated on the CPU: one row split over `ctas`
// emulated blocks of T threads (one FiberTeam of ctas * T fibers, a group per block), each block keeping its
// slice of the row in its own shared memory (SlicedRow). A collective first runs inside each block with
// EmulatedBlock's structure, then crosses the cluster as the CUDA cluster Block does (cluster_block.cuh): each
// block's thread 0 writes its partial to a slot in its block's shared memory, a cluster barrier, every thread
// folds the slots of blocks 0 .. ctas-1 in that order (so every block gets the same bits). The slots alternate
// between two sets, so the next collective's barrier, not one of its own, keeps a fold's slots until every block has
// read them. The radix histograms merge the same way, each block's histogram and merged copy swapping roles by round:
// integer counts and fixed-point masses, so the order cannot change a bucket. (The global-memory exchange below
// rotates its own slots and histograms in its workspace.)
//
// FiberTeam runs each block alone up to the next cluster barrier, in the schedule's block order: a block that
// read another's slot or histogram without the cluster barrier would read the previous collective's value.
//
// With a global-memory exchange (RowExchange::global_memory, the GPUs without clusters), the collectives cross the
// blocks through group_exchange.h instead, the code the CUDA Block runs: its rotating slots and histograms in a
// workspace, one barrier per collective. The group's barrier is the team barrier, plus the GPU barrier's counter,
// checked against its target.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/emulated_block.h"
#include "kernels/fiber_team.h"
#include "kernels/fused_sampler_row.h"
#include "kernels/group_exchange.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"

namespace specula {

// group_exchange.h's operations for emulated blocks: the workspace is host memory, and fibers never interleave
// inside a phase, so a plain add is the atomic one.
template <int T>
struct EmulatedGroupOps {
  static constexpr int kThreads = T;
  FiberTeam* team = nullptr;
  int rank = 0;  // the thread's rank in its block
  int ctas = 1;
  bool* last_flag = nullptr;  // the block's shared memory: last_out's verdict

  int thread() const { return rank; }
  void block_sync() { team->barrier(); }
  // The CUDA barrier's counting: thread 0 arrives once the block's writes are done, and may pass once `target`
  // blocks' arrivals are counted. The team barrier waits for every block; then the counter must hold exactly this
  // barrier's arrivals, give or take the next barrier's of the blocks that ran on (each at most one): a target
  // below that would release a GPU block early, one above would never release it.
  void group_barrier(uint64_t* arrivals, uint64_t target) {
    block_sync();
    if (rank == 0) *arrivals += 1;
    team->team_barrier();
    if (*arrivals < target || *arrivals >= target + static_cast<uint64_t>(ctas))
      fail("emulated group barrier: ", *arrivals, " arrivals counted where barrier ", target / ctas, " of ", ctas,
           " blocks waits for ", target);
  }
  // Thread 0 counts the block out once the block's threads are past their last access, and leaves the verdict in
  // the block's shared flag for its other threads.
  bool last_out(uint64_t* exits, int group_ctas) {
    block_sync();
    if (rank == 0) *last_flag = (*exits)++ == static_cast<uint64_t>(group_ctas - 1);
    block_sync();
    return *last_flag;
  }
  uint64_t load(const uint64_t* p) const { return *p; }
  void store(uint64_t* p, uint64_t v) { *p = v; }
  void add(uint64_t* p, uint64_t v) { *p += v; }
};

union EmulatedClusterSlot {
  double f64;
  int32_t i32;
  fused_sampler::RowSummary summary;
  fused_sampler::WeightsTotal weights;
};

// One block's shared memory in a cluster.
template <int T>
struct EmulatedClusterShared {
  EmulatedShared<T> block;      // the block's own collectives, and the histogram it counts into in even rounds
  EmulatedClusterSlot slot[2];  // this block's partials of cluster collectives, by fold parity
  // The cluster's histogram, merged by this block in even rounds, counted into in odd ones (cluster_block.cuh).
  uint64_t merged[fused_sampler::kRadixBins + 1];
  std::vector<float> slice;   // this block's slice of the processed row
  std::vector<float> staged;  // verification: its slices of a p row, then a q row (verify_row.h); empty without
  bool last_out = false;      // the global-memory exchange: whether this block left its group last
};

template <int T, int VEC>
struct EmulatedClusterBlock {
  static constexpr int kThreads = T;
  static constexpr int kVec = VEC;
  static constexpr bool kSlicedRow = true;

  EmulatedClusterShared<T>* const* blocks;  // [ctas], by block rank in the cluster (what DSMEM maps)
  int ctas;
  int cta;                      // this block's rank in the cluster
  EmulatedBlock<T, VEC> local;  // this block's collectives (its vocab is unused)
  int32_t begin, end;           // this block's slice of the row
  // The global-memory exchange, where `exchange.workspace` is set (RowExchange::global_memory).
  group_exchange::Exchange<EmulatedGroupOps<T>> exchange = {};
  // Through the cluster's shared memory: the folds and radix rounds so far, which pick the slot set and the histogram.
  uint32_t folds = 0, rounds = 0;

  bool global() const { return exchange.workspace != nullptr; }

  int rank() const { return local.thread; }
  bool leader() const { return cta == 0 && local.thread == 0; }
  bool block_leader() const { return local.thread == 0; }
  void sync() { local.sync(); }
  void cluster_sync() {
    if (global())
      exchange.barrier();
    else
      local.team.team_barrier();
  }

  float* slice() { return blocks[cta]->slice.data(); }
  int32_t slice_begin() const { return begin; }
  int32_t slice_end() const { return end; }
  // Verification's staged rows (verify_row.h, "Rows read once"): the first half holds p's slice, the second q's.
  float* staged(int which) {
    std::vector<float>& memory = blocks[cta]->staged;
    return memory.empty() ? nullptr : memory.data() + static_cast<size_t>(which) * (memory.size() / 2);
  }

  template <class F>
  void for_each_vec(F&& f) {
    for (int32_t base = begin + local.thread * VEC; base < end; base += T * VEC) f(base);
  }
  fused_sampler::VecRange vec_range() const { return {begin + local.thread * VEC, end, T * VEC}; }

  // Every block covers [0, n): its shared scratch holds the row's whole per-node state (tree verification).
  template <class F>
  void for_each_index(int32_t n, F&& f) {
    local.for_each_index(n, f);
  }
  double* f64() { return local.f64(); }
  int32_t* i32() { return local.i32(); }

  // The block's value (every thread holds it) -> its slot -> the slots of blocks 0 .. count-1 folded in block
  // order (every block's by default; `none` when count is 0).
  template <typename V, class Op>
  V cluster_fold(V block_value, V EmulatedClusterSlot::*member, Op op, int count = -1, V none = V{}) {
    if (global()) return exchange.fold(block_value, op, count, none);
    if (count < 0) count = ctas;
    // Fold f writes set f % 2, written again by fold f + 2 after fold f + 1's barrier (the mutant: one set).
    const uint32_t set = mutant_on(Mutant::cluster_slots_not_alternated) ? 0u : folds % 2;
    ++folds;
    if (local.thread == 0) blocks[cta]->slot[set].*member = block_value;
    cluster_sync();  // every block's partial has landed
    V result = count > 0 ? blocks[0]->slot[set].*member : none;
    for (int c = 1; c < count; ++c) result = op(result, blocks[c]->slot[set].*member);
    return result;
  }

  double sum_f64(double v) {
    return cluster_fold(local.sum_f64(v), &EmulatedClusterSlot::f64, [](double a, double b) { return a + b; });
  }
  int32_t min_i32(int32_t v) {
    return cluster_fold(local.min_i32(v), &EmulatedClusterSlot::i32,
                        [](int32_t a, int32_t b) { return a < b ? a : b; });
  }
  int32_t max_i32(int32_t v) {
    return cluster_fold(local.max_i32(v), &EmulatedClusterSlot::i32,
                        [](int32_t a, int32_t b) { return a > b ? a : b; });
  }
  fused_sampler::RowSummary summarise(fused_sampler::RowSummary v) {
    return cluster_fold(local.summarise(v), &EmulatedClusterSlot::summary, fused_sampler::Combine{});
  }

  fused_sampler::WeightsTotal sum_weights(fused_sampler::WeightsTotal v) {
    return cluster_fold(local.sum_weights(v), &EmulatedClusterSlot::weights, fused_sampler::Combine{});
  }

  double exclusive_sum_f64(double v, double* block_total) { return local.exclusive_sum_f64(v, block_total); }
  // The totals of the blocks before this one, added in block order.
  double cluster_exclusive_sum_f64(double block_total) {
    return cluster_fold(
        block_total, &EmulatedClusterSlot::f64, [](double a, double b) { return a + b; }, cta, 0.0);
  }

  // Each block counts its slice into its own histogram; the suffix sums and the search run on the merged one. Through
  // the cluster's shared memory the two buffers swap roles each round, so that a round's histograms stay until the
  // next round's barrier (the mutant keeps the roles: a block that runs ahead clears and counts the next round into the
  // histogram a slower block has still to merge); the global-memory exchange rotates its own buffers in the workspace.
  bool swapped(uint32_t round) const {
    return !global() && !mutant_on(Mutant::cluster_histograms_not_alternated) && round % 2 == 1;
  }
  uint64_t* hist_of(int block, uint32_t round) const {
    return swapped(round) ? blocks[block]->merged : blocks[block]->block.hist;
  }
  uint64_t* merged_of(uint32_t round) const { return swapped(round) ? blocks[cta]->block.hist : blocks[cta]->merged; }
  void hist_clear() {
    uint64_t* hist = hist_of(cta, rounds);
    for (int i = local.thread; i <= fused_sampler::kRadixBins; i += T) hist[i] = 0;
    sync();
  }
  void hist_add(int bin, uint64_t w) { hist_of(cta, rounds)[bin] += w; }  // fibers never interleave inside a phase
  uint64_t hist_suffix_sums() {
    const uint32_t round = rounds++;
    uint64_t* merged = merged_of(round);
    if (global()) {
      exchange.merge_histograms(hist_of(cta, round), merged);
      return local.suffix_sums(merged);
    }
    if (!mutant_on(Mutant::cluster_histogram_unsynchronised)) cluster_sync();  // every block's hist_add has landed
    for (int bin = local.thread; bin <= fused_sampler::kRadixBins; bin += T) {
      uint64_t sum = 0;
      for (int c = 0; c < ctas; ++c) sum += hist_of(c, round)[bin];
      merged[bin] = sum;
    }
    sync();  // the merge is whole before the suffix sums read it (their threads take other bins)
    return local.suffix_sums(merged);
  }
  // The buffer the last round merged into.
  fused_sampler::RadixPick hist_find(uint64_t above, uint64_t target) {
    return local.find_bucket(merged_of(rounds - 1), above, target);
  }

  // The candidate list of this block's slice (its own shared memory, as cluster_block.cuh).
  static constexpr int kCandidates = EmulatedBlock<T, VEC>::kCandidates;
  void candidates_clear() { local.candidates_clear(); }
  void candidate_add(float x) { local.candidate_add(x); }
  int32_t candidates_count() { return local.candidates_count(); }
  float candidate(int32_t i) const { return local.candidate(i); }
};

}  // namespace specula
