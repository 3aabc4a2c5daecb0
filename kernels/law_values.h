// Values of processed laws at given entries, read where the laws lie: a chain drawn on the device whose request may
// stop on the draft's doubt (DraftRequest::confidence_threshold) is cut on the host by the probability each draft had
// under the law it was drawn from. One gather for the whole batch and one download of a float an entry, instead of a
// row of V floats each.
//
// Plain C++: no CUDA headers.
#pragma once

#include <cstdint>

#include "kernels/shared/host_device.h"

struct CUstream_st;

namespace specula {

struct LawValuesParams {
  const float* laws = nullptr;       // [rows, V] processed laws (BatchVerifier::draft_laws)
  const int32_t* ids = nullptr;      // token ids in device memory (a proposal's kept ids, or drafts uploaded)
  const int64_t* entries = nullptr;  // [n, 2]: entry e reads token ids[entries[2e + 1]] of row entries[2e]
  float* values = nullptr;           // [n] out
  int32_t n = 0;                     // entries, >= 1
  int64_t rows = 0;                  // rows of laws, >= 1
  int32_t vocab = 0;                 // V in [1, 2^30]

  // Throws Error naming the first invalid field (the entries are the caller's, who checked every row and index on the
  // host before uploading them).
  void check() const;
};

// Entry e's value, or -1 (no probability) for an id outside [0, V): a failed draw leaves -1, which the caller refuses.
SPECULA_HD float law_value(const LawValuesParams& p, int32_t e) {
  const int32_t id = p.ids[p.entries[2 * e + 1]];
  if (id < 0 || id >= p.vocab) return -1.0f;
  return p.laws[p.entries[2 * e] * p.vocab + id];
}

// Enqueues the gather on `stream` (one thread an entry); throws Error ("no CUDA device: ..." without one, or in a build
// without CUDA). Asynchronous.
void launch_law_values(const LawValuesParams& p, CUstream_st* stream = nullptr);

// The same on host pointers (--device cuda-host), entry by entry.
void read_law_values_host(const LawValuesParams& p);

}  // namespace specula
