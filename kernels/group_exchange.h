// How the blocks of one row exchange their partials through global memory where a GPU has no thread-block
// clusters (sm_80): a group of `ctas` blocks, all resident at once (a cooperative launch), that share a workspace in
// global memory and a barrier counter in it. One source for the CUDA Block (cluster_block.cuh, the global-memory
// exchange) and its CPU emulation (emulated_cluster_block.h); `Ops` is what differs between the two:
//
//   ops.block_sync()                      the block's barrier (__syncthreads)
//   ops.group_barrier(arrivals, target)   the group's barrier: the block's thread 0 adds 1 to *arrivals and waits
//                                         until it reaches `target`; every earlier write of the block is visible
//                                         to every block that passes it
//   ops.load(p) / store(p, v) / add(p, v) a 64-bit word of the workspace (add: atomic)
//   ops.last_out(exits, ctas)             in every thread of the block, once its threads are done with the
//                                         workspace: counts the block out (*exits += 1) and says whether it was
//                                         the group's last; every other block's accesses are then visible to it
//   ops.thread(), kThreads                the thread's rank in its block, the block's size
//
// The barrier is the only cost a cluster's hardware barrier does not have, so the exchange rotates its buffers to
// need one per collective (a cluster needs two: one before reading the slots, one before writing them again):
//   - a fold's slots alternate between two sets: fold f writes set f % 2 before its barrier and reads it after;
//     fold f + 2 writes that set again only after another barrier (fold f + 1's or a histogram's), which every
//     block reached after its reads of fold f;
//   - the radix histograms rotate over three buffers: round r adds into buffer r % 3 before its barrier, reads it
//     after, and clears its share of buffer (r + 2) % 3 = (r - 1) % 3, which every block read before this barrier;
//     that buffer is added into again in round r + 2, after the next barrier, which the clearing blocks reached
//     after clearing. With two buffers, the one cleared after this barrier is the one a faster block already adds
//     the next round into.
// Counters of folds, rounds and barriers are per thread, and agree across the group because every thread of every
// block of a row runs the same sequence of collectives (the row code's contract with any Block). The arrivals
// counter only grows: barrier n releases at n * ctas arrivals, so it is never reset inside a launch.
//
// At launch every word of the workspace is zero, and a launch leaves it so (finish()): the last block of the group to
// leave, which every other block left after its last read, clears the counters, the slots and the one histogram
// buffer the last round filled (each round cleared the one before). So a workspace kept across launches
// (kernels/group_workspace.h) is zeroed once, when allocated, and a launch neither allocates nor clears one. (A launch
// needs only its counters and histograms zero, but the next launch may split rows over another number of blocks, and
// so lay its groups out differently: a slot left behind could lie in its histograms.)
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/fused_sampler_row.h"
#include "kernels/shared/host_device.h"
#include "kernels/shared/mutation_points.h"

namespace specula {
namespace group_exchange {

constexpr int kSlotWords = 4;  // a fold's value: the largest is fused_sampler::RowSummary
constexpr int kSlotSets = 2;
constexpr int kHistogramBuffers = 3;
constexpr int kHistogramWords = fused_sampler::kRadixBins + 1;

// One group's workspace, in 64-bit words: the arrivals and exits counters (padded to their own 128-byte line), the
// slots [kSlotSets][ctas][kSlotWords], the histograms [kHistogramBuffers][kHistogramWords].
constexpr int64_t kHeaderWords = 16;
constexpr int64_t kExitsWord = 1;
SPECULA_HD int64_t slot_words(int ctas) { return static_cast<int64_t>(kSlotSets) * ctas * kSlotWords; }
// Rounded up to whole 128-byte lines, so that every group's arrivals counter has a line of its own.
SPECULA_HD int64_t group_words(int ctas) {
  const int64_t words = kHeaderWords + slot_words(ctas) + static_cast<int64_t>(kHistogramBuffers) * kHistogramWords;
  return (words + kHeaderWords - 1) / kHeaderWords * kHeaderWords;
}

template <class Ops>
struct Exchange {
  Ops ops;
  uint64_t* workspace;  // this group's group_words(ctas) words, zero at launch
  int cta, ctas;
  uint32_t folds = 0, rounds = 0, barriers = 0;

  SPECULA_HD uint64_t* arrivals() { return workspace; }
  SPECULA_HD uint64_t* exits() { return workspace + kExitsWord; }
  SPECULA_HD uint64_t* slots(uint32_t set) {
    return workspace + kHeaderWords + static_cast<int64_t>(set) * ctas * kSlotWords;
  }
  SPECULA_HD uint64_t* histogram(uint32_t buffer) {
    return workspace + kHeaderWords + slot_words(ctas) + static_cast<int64_t>(buffer) * kHistogramWords;
  }

  SPECULA_HD void barrier() { ops.group_barrier(arrivals(), static_cast<uint64_t>(++barriers) * ctas); }

  // The block's value (every thread holds it) -> its slot -> the slots of blocks 0 .. count-1 folded in block order
  // (every block's when count < 0; `none` when count is 0), the same bits in every block.
  template <typename V, class Op>
  SPECULA_HD V fold(V block_value, Op op, int count, V none) {
    static_assert(sizeof(V) <= kSlotWords * sizeof(uint64_t), "a fold's value must fit its slot");
    if (count < 0) count = ctas;
#if defined(__CUDA_ARCH__)
    const uint32_t set = folds % kSlotSets;
#else
    const uint32_t set = mutant_on(Mutant::group_slots_not_alternated) ? 0u : folds % kSlotSets;
#endif
    ++folds;
    uint64_t* set_slots = slots(set);
    if (ops.thread() == 0) store_value(set_slots + static_cast<int64_t>(cta) * kSlotWords, block_value);
    barrier();  // every block's partial has landed
    V result = count > 0 ? load_value<V>(set_slots) : none;
    for (int c = 1; c < count; ++c)
      result = op(result, load_value<V>(set_slots + static_cast<int64_t>(c) * kSlotWords));
    return result;
  }

  // `mine`: this block's histogram (shared memory, every add made); `merged` (shared memory) receives the group's
  // sum, every write visible to the block on return.
  template <class Word>
  SPECULA_HD void merge_histograms(const Word* mine, Word* merged) {
    const uint32_t buffers = histogram_buffers();
    uint64_t* current = histogram(rounds % buffers);
    uint64_t* spent = histogram((rounds + buffers - 1) % buffers);
    ++rounds;
    ops.block_sync();  // every add to this block's histogram has landed
    for (int bin = ops.thread(); bin < kHistogramWords; bin += Ops::kThreads)
      if (mine[bin] != 0) ops.add(current + bin, static_cast<uint64_t>(mine[bin]));
    barrier();  // every block's adds have landed
    for (int bin = ops.thread(); bin < kHistogramWords; bin += Ops::kThreads) merged[bin] = ops.load(current + bin);
    // This block's share of the buffer the previous round read: every block read it before this barrier.
    const int share = (kHistogramWords + ctas - 1) / ctas;
    const int first = cta * share, last = first + share < kHistogramWords ? first + share : kHistogramWords;
    for (int bin = first + ops.thread(); bin < last; bin += Ops::kThreads) ops.store(spent + bin, 0);
    ops.block_sync();  // the merged histogram is whole before the suffix sums read it
  }

  // Once per launch, after the block's last collective: leaves the workspace zero, as the launch found it. Every
  // block counts itself out once all its threads are done with the workspace; the last one out (the others have read
  // everything they will) clears the slots and the histogram buffer the last round filled, then the counters.
  SPECULA_HD void finish() {
#if !defined(__CUDA_ARCH__)
    if (mutant_on(Mutant::group_workspace_left_dirty)) return;
#endif
    if (!ops.last_out(exits(), ctas)) return;
    for (int64_t word = ops.thread(); word < slot_words(ctas); word += Ops::kThreads) ops.store(slots(0) + word, 0);
    if (rounds > 0) {
      uint64_t* filled = histogram((rounds - 1) % histogram_buffers());
      for (int bin = ops.thread(); bin < kHistogramWords; bin += Ops::kThreads) ops.store(filled + bin, 0);
    }
    if (ops.thread() == 0) {
      ops.store(arrivals(), 0);
      ops.store(exits(), 0);
    }
  }

 private:
  SPECULA_HD static uint32_t histogram_buffers() {
#if defined(__CUDA_ARCH__)
    return kHistogramBuffers;
#else
    return mutant_on(Mutant::group_histograms_two_buffers) ? 2u : kHistogramBuffers;
#endif
  }

  template <typename V>
  SPECULA_HD void store_value(uint64_t* slot, const V& value) {
    uint64_t words[kSlotWords] = {};
    memcpy(words, &value, sizeof(V));
    for (int w = 0; w < kSlotWords; ++w) ops.store(slot + w, words[w]);
  }
  template <typename V>
  SPECULA_HD V load_value(const uint64_t* slot) {
    uint64_t words[kSlotWords];
    for (int w = 0; w < kSlotWords; ++w) words[w] = ops.load(slot + w);
    V value;
    memcpy(&value, words, sizeof(V));
    return value;
  }
};

}  // namespace group_exchange
}  // namespace specula
