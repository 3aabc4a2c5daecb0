// The verification kernels over groups of blocks exchanging through global memory (RowExchange::global_memory, for
// GPUs without thread-block clusters): the rows of verify_row.h with CudaClusterBlock's kGlobal variant, launched by
// cuda_block::launch_in_groups. Apart from verify_kernels.cu so that the two compile in parallel.
#include <cuda_runtime.h>

#include "kernels/cluster_block.cuh"
#include "kernels/verify_kernels.h"
#include "kernels/verify_launch.cuh"
#include "kernels/verify_row.h"

namespace specula {
namespace {

using verify_row::ExactRules;
constexpr int kTreeF64 = verify_row::kTreeF64Scratch;
constexpr int kTreeI32 = verify_row::kTreeI32Scratch;

// Groups of g.ctas blocks, each block reading tokens [cta * span, (cta + 1) * span) of V as a cluster's blocks do
// (verify_kernels.cu), with its staged rows in dynamic shared memory: group blockIdx.x / g.ctas takes rows in turn;
// its blocks share no shared memory, so each goes on to its next row after its own block's barrier.
template <int BLOCK, int VEC, int F64, int I32, class RowFn>
__device__ void run_group_rows(const cuda_block::GroupLaunch& g, int32_t batch, int32_t vocab, int32_t span,
                               int32_t staged, RowFn&& row_fn) {
  using Block = cuda_block::CudaClusterBlock<BLOCK, VEC, cuda_block::ClusterScratch<F64, I32>, true>;
  __shared__ typename Block::Local::Shared shared;
  extern __shared__ float4 staged_rows[];  // float4: 16-byte aligned for the 4-wide accesses
  const fused_sampler::SliceBounds s = fused_sampler::slice_bounds(g.cta(), span, vocab);
  Block block{{shared, vocab},
              nullptr,
              s.begin,
              s.end,
              static_cast<unsigned>(g.cta()),
              static_cast<unsigned>(g.ctas),
              staged > 0 ? reinterpret_cast<float*>(staged_rows) : nullptr,
              staged / 2,
              g.exchange<cuda_block::CudaGroupOps<BLOCK>>()};
  for (int32_t row = g.group(); row < batch; row += g.groups()) {
    row_fn(block, row);
    block.sync();  // the next row rewrites the block's shared memory
  }
  block.exchange.finish();  // the workspace as the launch found it
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    chain_verify_group_kernel(cuda_block::GroupLaunch g, ChainVerifyParams p, int32_t span, int32_t staged) {
  run_group_rows<BLOCK, VEC, 1, 1>(g, p.batch, p.vocab, span, staged,
                                   [&](auto& block, int32_t row) { verify_row::chain_row<ExactRules>(block, p, row); });
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    block_verify_group_kernel(cuda_block::GroupLaunch g, BlockVerifyParams p, int32_t span, int32_t staged) {
  run_group_rows<BLOCK, VEC, 1, 1>(g, p.batch, p.vocab, span, staged,
                                   [&](auto& block, int32_t row) { verify_row::block_row<ExactRules>(block, p, row); });
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    tree_verify_group_kernel(cuda_block::GroupLaunch g, TreeVerifyParams p, int32_t span, int32_t staged) {
  run_group_rows<BLOCK, VEC, kTreeF64, kTreeI32>(g, p.batch, p.vocab, span, staged, [&](auto& block, int32_t row) {
    verify_row::tree_row<ExactRules>(block, p, row);
  });
}

// A global-memory exchange's launch: as many groups of `ctas` blocks as the device holds at once; false (nothing
// launched) where it cannot hold one.
template <int BLOCK, class Params>
bool launch_groups(void (*kernel)(cuda_block::GroupLaunch, Params, int32_t, int32_t), const Params& p, int ctas,
                   int32_t span, int vec, cudaStream_t stream, GroupWorkspace* workspace, const char* what) {
  const int32_t staged = staged_floats(kernel, p, ctas, vec);
  return cuda_block::launch_in_groups(kernel, p.batch, ctas, BLOCK, staged * sizeof(float), stream, workspace, what, p,
                                      span, staged);
}

template <int VEC>
bool launch_vec(const ChainVerifyParams& p, int ctas, int32_t span, cudaStream_t stream, GroupWorkspace* workspace) {
  return launch_groups<256>(chain_verify_group_kernel<256, VEC>, p, ctas, span, VEC, stream, workspace,
                            "chain verify (global-memory exchange) launch");
}
template <int VEC>
bool launch_vec(const BlockVerifyParams& p, int ctas, int32_t span, cudaStream_t stream, GroupWorkspace* workspace) {
  return launch_groups<256>(block_verify_group_kernel<256, VEC>, p, ctas, span, VEC, stream, workspace,
                            "block verify (global-memory exchange) launch");
}
template <int VEC>
bool launch_vec(const TreeVerifyParams& p, int ctas, int32_t span, cudaStream_t stream, GroupWorkspace* workspace) {
  return launch_groups<256>(tree_verify_group_kernel<256, VEC>, p, ctas, span, VEC, stream, workspace,
                            "tree verify (global-memory exchange) launch");
}

}  // namespace

bool launch_group_verify(const ChainVerifyParams& p, int ctas, int32_t span, int vec, cudaStream_t stream,
                         GroupWorkspace* workspace) {
  return vec == 4 ? launch_vec<4>(p, ctas, span, stream, workspace) : launch_vec<1>(p, ctas, span, stream, workspace);
}
bool launch_group_verify(const BlockVerifyParams& p, int ctas, int32_t span, int vec, cudaStream_t stream,
                         GroupWorkspace* workspace) {
  return vec == 4 ? launch_vec<4>(p, ctas, span, stream, workspace) : launch_vec<1>(p, ctas, span, stream, workspace);
}
bool launch_group_verify(const TreeVerifyParams& p, int ctas, int32_t span, int vec, cudaStream_t stream,
                         GroupWorkspace* workspace) {
  return vec == 4 ? launch_vec<4>(p, ctas, span, stream, workspace) : launch_vec<1>(p, ctas, span, stream, workspace);
}

}  // namespace specula
