// GroupWorkspace on the CUDA runtime's stream-ordered allocator. Compiled only with -DSPECULA_CUDA=ON.
#include "kernels/group_workspace.h"

#include <cuda_runtime_api.h>

#include "kernels/cuda_check.h"

namespace specula {

uint64_t* GroupWorkspace::words(size_t count, CUstream_st* stream) {
  const size_t bytes = count * sizeof(uint64_t);
  if (array_ && bytes <= bytes_ && stream == stream_) return static_cast<uint64_t*>(array_);
  if (array_ && stream != stream_) {
    // Another stream: the old one's launches must be done with the array before this stream's use it.
    cuda_check(cudaStreamSynchronize(stream_), "group workspace: cudaStreamSynchronize");
  }
  release();
  void* fresh = nullptr;
  cuda_check(cudaMallocAsync(&fresh, bytes, stream), "group workspace: cudaMallocAsync");
  const cudaError_t zeroed = cudaMemsetAsync(fresh, 0, bytes, stream);
  if (zeroed != cudaSuccess) {
    cudaFreeAsync(fresh, stream);
    cuda_check(zeroed, "group workspace: cudaMemsetAsync");
  }
  array_ = fresh;
  bytes_ = bytes;
  stream_ = stream;
  ++allocations_;
  return static_cast<uint64_t*>(array_);
}

int GroupWorkspace::release() noexcept {
  // After the launches enqueued on it; a failure has nothing left to free.
  const cudaError_t freed = array_ ? cudaFreeAsync(array_, stream_) : cudaSuccess;
  array_ = nullptr;
  bytes_ = 0;
  return static_cast<int>(freed);
}

}  // namespace specula
