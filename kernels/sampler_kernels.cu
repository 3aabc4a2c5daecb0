// CUDA backend of the fused sampler: one block per row runs fused_sampler::sample_row with the CUB block
// primitives of cuda_block.cuh. Block size and vector width are template parameters; launch_fused_sampler turns the
// runtime choice (choose_fused_sampler_config) into one of four instantiations.
#include <cuda_runtime.h>

#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/fused_sampler_row.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

template <int BLOCK, int VEC>
using CudaBlock = cuda_block::CudaBlock<BLOCK, VEC, cuda_block::Histogram>;

// minBlocksPerSM = 1: one block per row is the design, so ptxas may use up to 65536 / BLOCK registers.
// Without it, ptxas trades a few bytes of spills for 64 registers, which the spill gate rejects.
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1) fused_sampler_kernel(SamplerKernelParams p) {
  __shared__ typename CudaBlock<BLOCK, VEC>::Shared shared;
  CudaBlock<BLOCK, VEC> block{shared, p.vocab};
  fused_sampler::sample_row(block, p, static_cast<int32_t>(blockIdx.x));
}

template <int BLOCK, int VEC>
void launch(const SamplerKernelParams& p, cudaStream_t stream) {
  fused_sampler_kernel<BLOCK, VEC><<<p.batch, BLOCK, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), "fused sampler launch");
}

}  // namespace

void launch_fused_sampler(const SamplerKernelParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  const SamplerLaunchConfig c = choose_fused_sampler_config(p);
  // The dispatch: runtime (block, vec) -> compile-time template arguments.
  if (c.block == 512 && c.vec == 4)
    launch<512, 4>(p, stream);
  else if (c.block == 512)
    launch<512, 1>(p, stream);
  else if (c.vec == 4)
    launch<256, 4>(p, stream);
  else
    launch<256, 1>(p, stream);
}

}  // namespace specula
