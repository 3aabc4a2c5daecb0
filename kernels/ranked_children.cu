// CUDA backend of the ranked-children kernel: ranked_children::rank_row over one block per row (the CUB block
// primitives of cuda_block.cuh).
#include <cuda_runtime.h>

#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/ranked_children.h"
#include "kernels/ranked_children_row.h"

namespace specula {
namespace {

// Only the two reductions over int32: no histogram, no scratch.
constexpr int kThreads = 256;
template <int VEC>
using RankBlock = cuda_block::CudaBlock<kThreads, VEC, cuda_block::Scratch<1, 1>>;

template <int VEC>
__global__ void __launch_bounds__(kThreads) ranked_children_kernel(RankedChildrenParams p) {
  __shared__ typename RankBlock<VEC>::Shared shared;
  RankBlock<VEC> block{shared, p.vocab};
  ranked_children::rank_row(block, p, static_cast<int32_t>(blockIdx.x));
}

}  // namespace

void launch_ranked_children(const RankedChildrenParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  const unsigned blocks = static_cast<unsigned>(p.batch);
  if (ranked_children_vec(p) == 4)
    ranked_children_kernel<4><<<blocks, kThreads, 0, stream>>>(p);
  else
    ranked_children_kernel<1><<<blocks, kThreads, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), "ranked children launch");
}

}  // namespace specula
