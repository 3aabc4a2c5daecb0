// One thread per uniform: the same philox_uniform the CPU calls, so the outputs must match bit for bit.
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/philox_fill.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"

namespace specula {
namespace {

constexpr int kThreads = 256;

// Grid-stride: a grid of at most kMaxBlocks blocks covers any count (2^40 / 256 blocks would not fit the
// launch's unsigned grid size, let alone gridDim.x's 2^31 - 1).
constexpr int64_t kMaxBlocks = int64_t(1) << 16;

__global__ void __launch_bounds__(kThreads) philox_fill_kernel(PhiloxFillParams p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.count; i += stride)
    p.out[i] = philox_uniform(p.seed, p.stream, p.first_offset + static_cast<uint64_t>(i));
}

}  // namespace

void launch_philox_fill(const PhiloxFillParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  const int64_t needed = (p.count + kThreads - 1) / kThreads;
  const unsigned blocks = static_cast<unsigned>(needed < kMaxBlocks ? needed : kMaxBlocks);
  philox_fill_kernel<<<blocks, kThreads, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), "philox fill launch");
}

}  // namespace specula
