// For the GPU tests: the words of a kept GroupWorkspace that the launches left set (after they are done: cudaMemcpy
// waits for the legacy default stream's work).
// Every launch must leave it zero (kernels/group_exchange.h, finish), as the next launch on it relies on. CUDA builds
// only (includes the CUDA runtime header).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/group_workspace.h"
#include "kernels/shared/error.h"

namespace specula {
namespace testing {

inline int64_t kept_words_left_set(GroupWorkspace& kept) {
  const size_t words = kept.bytes() / sizeof(uint64_t);
  if (words == 0) return 0;
  std::vector<uint64_t> host(words);
  const cudaError_t copied = cudaMemcpy(host.data(), kept.data(), kept.bytes(), cudaMemcpyDeviceToHost);
  if (copied != cudaSuccess) fail("kept workspace read-back: ", cudaGetErrorString(copied));
  return std::count_if(host.begin(), host.end(), [](uint64_t w) { return w != 0; });
}

}  // namespace testing
}  // namespace specula
