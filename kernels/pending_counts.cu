// CUDA backend of the pending-counts kernel: one thread an entry.
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/pending_counts.h"

namespace specula {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) pending_counts_kernel(PendingCountsParams p) {
  const int32_t e = static_cast<int32_t>(blockIdx.x) * kThreads + static_cast<int32_t>(threadIdx.x);
  if (e >= p.n) return;
  const int64_t at = pending_count_offset(p, e, p.ids[p.entries[2 * e + 1]]);
  if (at >= 0) atomicAdd(p.counts + at, 1);
}

}  // namespace

void launch_pending_counts(const PendingCountsParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  const unsigned blocks = static_cast<unsigned>((p.n + kThreads - 1) / kThreads);
  pending_counts_kernel<<<blocks, kThreads, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), "pending counts launch");
}

}  // namespace specula
