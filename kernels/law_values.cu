// CUDA backend of the law-values gather: one thread an entry.
#include <cuda_runtime.h>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/law_values.h"

namespace specula {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) law_values_kernel(LawValuesParams p) {
  const int32_t e = static_cast<int32_t>(blockIdx.x) * kThreads + static_cast<int32_t>(threadIdx.x);
  if (e < p.n) p.values[e] = law_value(p, e);
}

}  // namespace

void launch_law_values(const LawValuesParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  const unsigned blocks = static_cast<unsigned>((p.n + kThreads - 1) / kThreads);
  law_values_kernel<<<blocks, kThreads, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), "law values launch");
}

}  // namespace specula
