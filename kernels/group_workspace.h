// The global-memory exchange's workspace (kernels/group_exchange.h) kept across the launches of one stream, so that a
// launch neither allocates nor clears one: it is zeroed once, when allocated, and every launch leaves it as it found
// it (Exchange::finish). A launcher given none makes one for its launch alone, freed after its kernel.
//
// Device memory from the stream-ordered pool. Growing frees the old array on the stream, after the launches that used
// it, and zeroes the new one there before the next launch. Bounded by the device, not the batch: a launch uses at
// most the groups the device holds at once (one block per SM), group_words(ctas) words each.
// Plain C++: no CUDA headers. Without CUDA, words() throws as the launchers do.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace specula {

class GroupWorkspace {
 public:
  GroupWorkspace() = default;
  ~GroupWorkspace() { release(); }
  GroupWorkspace(const GroupWorkspace&) = delete;
  GroupWorkspace& operator=(const GroupWorkspace&) = delete;

  // At least `count` words for a launch on `stream`, every one zero when the launch starts. A new array, zeroed on
  // `stream`, where the kept one is smaller or was used on another stream (which is synchronised first: it must still
  // exist).
  uint64_t* words(size_t count, CUstream_st* stream);
  // The kept array (null before the first words()), for a test to read back.
  const uint64_t* data() const { return static_cast<const uint64_t*>(array_); }
  // Frees the array on the stream it was last used on (call it before that stream is destroyed); returns the CUDA
  // runtime's status of the free (0: freed, or nothing to free).
  int release() noexcept;
  size_t bytes() const { return bytes_; }
  // Arrays allocated so far: a run's first launches allocate, a steady one none.
  uint64_t allocations() const { return allocations_; }

 private:
  void* array_ = nullptr;
  size_t bytes_ = 0;
  CUstream_st* stream_ = nullptr;
  uint64_t allocations_ = 0;
};

}  // namespace specula
