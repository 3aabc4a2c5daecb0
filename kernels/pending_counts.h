// The penalty counts of rows whose histories end in a draft's tokens that are still in device memory: a fed draft's
// depth d reads the ids its depths before d drew, and verification of a kept proposal reads the ids of each row's path
// (verify/device/batch_verifier.h). The host stages each row's counts of the tokens it knows (the committed output);
// this kernel adds one occurrence of each pending id to its row, in device memory, before the fused sampler reads
// output_counts, so that a penalised pipeline needs no wait for the ids it penalises.
//
// Plain C++: no CUDA headers.
#pragma once

#include <cstdint>

#include "kernels/shared/host_device.h"

struct CUstream_st;

namespace specula {

struct PendingCountsParams {
  int32_t* counts = nullptr;     // [rows, V] occurrences in the output (the fused sampler's output_counts), in place
  const int32_t* ids = nullptr;  // token ids in device memory (a plan's draws, a kept proposal's ids)
  const int32_t* entries = nullptr;  // [n, 2]: entry e adds one occurrence of ids[entries[2e + 1]] to row entries[2e]
  int32_t n = 0;                     // entries, >= 1
  int32_t rows = 0;                  // rows of counts, >= 1
  int32_t vocab = 0;                 // V in [1, 2^30]

  // Throws Error naming the first invalid field (the arrays' contents are the caller's, who checked every entry's row
  // and index on the host before uploading them).
  void check() const;
};

// Where entry e adds its occurrence in counts, or -1 for an id outside [0, V): a failed draw leaves -1, and its step
// is refused by the draw's status before anything reads the row (BatchVerifier checks the plan's statuses); a node of
// a fixed-shape tree that was never drawn (siblings without replacement) leaves -1 too, and the rows under it draw
// nothing.
SPECULA_HD int64_t pending_count_offset(const PendingCountsParams& p, int32_t e, int32_t id) {
  if (id < 0 || id >= p.vocab) return -1;
  return static_cast<int64_t>(p.entries[2 * e]) * p.vocab + id;
}

// Enqueues the additions on `stream` (one thread an entry, atomic adds: the sum is the same in any order); throws Error
// ("no CUDA device: ..." without one, or in a build without CUDA). Asynchronous.
void launch_pending_counts(const PendingCountsParams& p, CUstream_st* stream = nullptr);

// The same on host pointers (--device cuda-host), entry by entry.
void add_pending_counts_host(const PendingCountsParams& p);

}  // namespace specula
