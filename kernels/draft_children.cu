// CUDA backend of the draft-children kernels: ranked_children::rank_row over one block per row, and
// sibling_draws::count_draws then draw_row, each over one block per row (the CUB block primitives of cuda_block.cuh).
#include <cuda_runtime.h>

#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/draft_children.h"
#include "kernels/draft_children_row.h"

namespace specula {
namespace {

// Only reductions: no histogram, no scratch.
constexpr int kThreads = 256;
template <int VEC>
using RankBlock = cuda_block::CudaBlock<kThreads, VEC, cuda_block::Scratch<1, 1>>;

template <int VEC>
__global__ void __launch_bounds__(kThreads) ranked_children_kernel(RankedChildrenParams p) {
  __shared__ typename RankBlock<VEC>::Shared shared;
  RankBlock<VEC> block{shared, p.vocab};
  ranked_children::rank_row(block, p, static_cast<int32_t>(blockIdx.x));
}

// The children drawn so far in the scratch: at most kMaxRankedChildren. minBlocksPerSM = 1, as the sampler's and
// verifiers' kernels: without it ptxas trades a few bytes of spills (the inverse-CDF draw's float64 vectors) for 64
// registers, which the spill gate rejects.
template <int VEC>
using DrawBlock = cuda_block::CudaBlock<kThreads, VEC, cuda_block::Scratch<1, kMaxRankedChildren>>;

template <int VEC>
__global__ void __launch_bounds__(kThreads, 1) sibling_draw_kernel(SiblingDrawParams p) {
  __shared__ typename DrawBlock<VEC>::Shared shared;
  DrawBlock<VEC> block{shared, p.vocab};
  sibling_draws::draw_row(block, p, static_cast<int32_t>(blockIdx.x));
}

// The draws each row takes: two reductions, no scratch.
template <int VEC>
__global__ void __launch_bounds__(kThreads) sibling_count_kernel(SiblingDrawParams p) {
  __shared__ typename RankBlock<VEC>::Shared shared;
  RankBlock<VEC> block{shared, p.vocab};
  sibling_draws::count_draws(block, p, static_cast<int32_t>(blockIdx.x));
}

// `wide` or `narrow` (a kernel's 4- and 1-wide instances, as `vec` says) over `blocks` blocks on `stream`.
template <class Params>
void launch_at_width(int vec, void (*wide)(Params), void (*narrow)(Params), unsigned blocks, CUstream_st* stream,
                     const Params& p, const char* what) {
  (vec == 4 ? wide : narrow)<<<blocks, kThreads, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), what);
}

}  // namespace

void launch_sibling_draws(const SiblingDrawParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  const unsigned blocks = static_cast<unsigned>(p.rows_total);
  launch_at_width(sibling_draw_vec(p), sibling_count_kernel<4>, sibling_count_kernel<1>, blocks, stream, p,
                  "sibling draw counts launch");
  launch_at_width(sibling_draw_vec(p), sibling_draw_kernel<4>, sibling_draw_kernel<1>, blocks, stream, p,
                  "sibling draws launch");
}

void launch_ranked_children(const RankedChildrenParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  launch_at_width(ranked_children_vec(p), ranked_children_kernel<4>, ranked_children_kernel<1>,
                  static_cast<unsigned>(p.batch), stream, p, "ranked children launch");
}

}  // namespace specula
