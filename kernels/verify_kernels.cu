// CUDA backend of the verification kernels: verify_row::{chain,tree,block}_row over one block per batch row (the
// CUB block primitives of cuda_block.cuh), over a thread-block cluster per row on sm_90+ (cluster_block.cuh:
// each block reads its slice of V, collectives cross the cluster in block order), or over a group of blocks
// exchanging through global memory (RowExchange::global_memory; those kernels are in verify_group_kernels.cu, a
// translation unit of their own so that the two compile in parallel). Block size, vector width and the variant are
// template parameters; the launchers turn the runtime choice (choose_verify_config, the params' row_exchange) into
// one of eight instantiations per kernel.
#include <cuda_runtime.h>

#include "kernels/cluster_block.cuh"
#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"
#include "kernels/verify_launch.cuh"
#include "kernels/verify_row.h"

namespace specula {
namespace {

// F64 / I32: elements of shared scratch (the tree kernel's per-node state; 1 for the chain and block kernels,
// which need none).
template <int BLOCK, int VEC, int F64, int I32>
using VerifyCudaBlock = cuda_block::CudaBlock<BLOCK, VEC, cuda_block::Scratch<F64, I32>>;

using verify_row::ExactRules;
constexpr int kTreeF64 = verify_row::kTreeF64Scratch;
constexpr int kTreeI32 = verify_row::kTreeI32Scratch;

// minBlocksPerSM = 1: one block per row is the design, so ptxas may use up to 65536 / BLOCK registers.
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1) chain_verify_kernel(ChainVerifyParams p) {
  using Block = VerifyCudaBlock<BLOCK, VEC, 1, 1>;
  __shared__ typename Block::Shared shared;
  Block block{shared, p.vocab};
  verify_row::chain_row<ExactRules>(block, p, static_cast<int32_t>(blockIdx.x));
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1) block_verify_kernel(BlockVerifyParams p) {
  using Block = VerifyCudaBlock<BLOCK, VEC, 1, 1>;
  __shared__ typename Block::Shared shared;
  Block block{shared, p.vocab};
  verify_row::block_row<ExactRules>(block, p, static_cast<int32_t>(blockIdx.x));
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1) tree_verify_kernel(TreeVerifyParams p) {
  using Block = VerifyCudaBlock<BLOCK, VEC, kTreeF64, kTreeI32>;
  __shared__ typename Block::Shared shared;
  Block block{shared, p.vocab};
  verify_row::tree_row<ExactRules>(block, p, static_cast<int32_t>(blockIdx.x));
}

template <int BLOCK, int VEC, int F64, int I32>
using VerifyClusterBlock = cuda_block::CudaClusterBlock<BLOCK, VEC, cuda_block::ClusterScratch<F64, I32>>;

// One cluster of gridDim.x / batch blocks per row, each reading tokens [cta * span, (cta + 1) * span) of V. With
// `staged` > 0, the dynamic shared memory holds the block's slices of a p row and a q row (staged / 2 floats each;
// verify_row.h, "Rows read once"). One block per SM: two slices of 16032 floats (V = 128256 over 8 blocks, 125 KiB)
// leave no room for a second, so ptxas may use up to 255 registers (under 128 the block kernel spills).
template <int BLOCK, int VEC, int F64, int I32, class RowFn>
__device__ void run_cluster_row(int32_t vocab, int32_t span, int32_t staged, RowFn&& row_fn) {
#if defined(SPECULA_CLUSTER_DEVICE)
  using Block = VerifyClusterBlock<BLOCK, VEC, F64, I32>;
  __shared__ typename Block::Local::Shared shared;
  extern __shared__ float4 staged_rows[];  // float4: 16-byte aligned for the 4-wide accesses
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const unsigned cta = cluster.block_rank(), ctas = cluster.num_blocks();
  const fused_sampler::SliceBounds s = fused_sampler::slice_bounds(cta, span, vocab);
  Block block{
      {shared, vocab}, nullptr, s.begin, s.end, cta, ctas, staged > 0 ? reinterpret_cast<float*>(staged_rows) : nullptr,
      staged / 2};
  row_fn(block, static_cast<int32_t>(blockIdx.x / ctas));
  cluster.sync();  // no block exits while another may still read its shared memory
#else
  (void)vocab;
  (void)span;
  (void)staged;
  (void)row_fn;
  __trap();  // the launchers start it only on sm_90+
#endif
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    chain_verify_cluster_kernel(ChainVerifyParams p, int32_t span, int32_t staged) {
  run_cluster_row<BLOCK, VEC, 1, 1>(
      p.vocab, span, staged, [&](auto& block, int32_t row) { verify_row::chain_row<ExactRules>(block, p, row); });
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    block_verify_cluster_kernel(BlockVerifyParams p, int32_t span, int32_t staged) {
  run_cluster_row<BLOCK, VEC, 1, 1>(
      p.vocab, span, staged, [&](auto& block, int32_t row) { verify_row::block_row<ExactRules>(block, p, row); });
}

template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    tree_verify_cluster_kernel(TreeVerifyParams p, int32_t span, int32_t staged) {
  run_cluster_row<BLOCK, VEC, kTreeF64, kTreeI32>(
      p.vocab, span, staged, [&](auto& block, int32_t row) { verify_row::tree_row<ExactRules>(block, p, row); });
}

// A cluster launch: p.batch clusters of `ctas` blocks of BLOCK threads, with the staged rows' shared memory.
template <int BLOCK, class Params>
bool launch_clusters(void (*kernel)(Params, int32_t, int32_t), const Params& p, int ctas, int32_t span, int vec,
                     cudaStream_t stream, const char* what) {
  const int32_t staged = staged_floats(kernel, p, ctas, vec);
  cuda_block::launch_in_clusters(kernel, static_cast<unsigned>(p.batch), ctas, BLOCK, staged * sizeof(float), stream,
                                 what, p, span, staged);
  return true;
}

// A split row's launch: the global-memory exchange's kernels (verify_group_kernels.cu), else the cluster's.
template <int VEC, bool kGlobal>
struct SplitLaunch {
  template <class Params, class ClusterKernel>
  static bool run_one(const Params& p, ClusterKernel kernel, int ctas, int32_t span, cudaStream_t stream,
                      GroupWorkspace* workspace, const char* what) {
    if constexpr (kGlobal)
      return launch_group_verify(p, ctas, span, VEC, stream, workspace);
    else
      return launch_clusters<256>(kernel, p, ctas, span, VEC, stream, what);
  }
  static bool run(const ChainVerifyParams& p, int ctas, int32_t span, cudaStream_t stream, GroupWorkspace* workspace) {
    return run_one(p, chain_verify_cluster_kernel<256, VEC>, ctas, span, stream, workspace,
                   "chain verify (cluster) launch");
  }
  static bool run(const BlockVerifyParams& p, int ctas, int32_t span, cudaStream_t stream, GroupWorkspace* workspace) {
    return run_one(p, block_verify_cluster_kernel<256, VEC>, ctas, span, stream, workspace,
                   "block verify (cluster) launch");
  }
  static bool run(const TreeVerifyParams& p, int ctas, int32_t span, cudaStream_t stream, GroupWorkspace* workspace) {
    return run_one(p, tree_verify_cluster_kernel<256, VEC>, ctas, span, stream, workspace,
                   "tree verify (cluster) launch");
  }
};

// The dispatch: runtime (blocks per row, exchange, block, vec) -> compile-time template arguments. A split row goes
// through global memory when asked, else through a cluster where the GPU has them; one block per row otherwise, and
// where the device cannot hold a group.
template <template <int, int> class Launch, class Params>
RowSplit dispatch(const VerifyLaunchConfig& c, const Params& p, cudaStream_t stream, GroupWorkspace* workspace) {
  if (c.ctas > 1) {
    const int32_t span = cluster_slice_span(p.vocab, c.ctas, c.vec);
    if (p.row_exchange == RowExchange::global_memory) {
      if (c.vec == 4 ? SplitLaunch<4, true>::run(p, c.ctas, span, stream, workspace)
                     : SplitLaunch<1, true>::run(p, c.ctas, span, stream, workspace))
        return RowSplit{c.ctas, RowExchange::global_memory};
    } else if (cuda_device_has_clusters()) {
      if (c.vec == 4 ? SplitLaunch<4, false>::run(p, c.ctas, span, stream, nullptr)
                     : SplitLaunch<1, false>::run(p, c.ctas, span, stream, nullptr))
        return RowSplit{c.ctas, RowExchange::automatic};
    }
  }
  const int block = p.vocab >= 16384 ? 512 : 256;
  if (block == 512 && c.vec == 4)
    Launch<512, 4>::run(p, stream);
  else if (block == 512)
    Launch<512, 1>::run(p, stream);
  else if (c.vec == 4)
    Launch<256, 4>::run(p, stream);
  else
    Launch<256, 1>::run(p, stream);
  return RowSplit{};
}

template <int BLOCK, int VEC>
struct ChainLaunch {
  static void run(const ChainVerifyParams& p, cudaStream_t stream) {
    chain_verify_kernel<BLOCK, VEC><<<p.batch, BLOCK, 0, stream>>>(p);
    cuda_check(cudaGetLastError(), "chain verify launch");
  }
};
template <int BLOCK, int VEC>
struct BlockLaunch {
  static void run(const BlockVerifyParams& p, cudaStream_t stream) {
    block_verify_kernel<BLOCK, VEC><<<p.batch, BLOCK, 0, stream>>>(p);
    cuda_check(cudaGetLastError(), "block verify launch");
  }
};
template <int BLOCK, int VEC>
struct TreeLaunch {
  static void run(const TreeVerifyParams& p, cudaStream_t stream) {
    tree_verify_kernel<BLOCK, VEC><<<p.batch, BLOCK, 0, stream>>>(p);
    cuda_check(cudaGetLastError(), "tree verify launch");
  }
};

}  // namespace

RowSplit launch_chain_verify(const ChainVerifyParams& p, CUstream_st* stream, GroupWorkspace* workspace) {
  p.check();
  require_cuda_device();
  return dispatch<ChainLaunch>(choose_verify_config(p.p, p.q, p.vocab, p.cluster_blocks), p, stream, workspace);
}

RowSplit launch_block_verify(const BlockVerifyParams& p, CUstream_st* stream, GroupWorkspace* workspace) {
  p.check();
  require_cuda_device();
  return dispatch<BlockLaunch>(choose_verify_config(p.p, p.q, p.vocab, p.cluster_blocks), p, stream, workspace);
}

RowSplit launch_tree_verify(const TreeVerifyParams& p, CUstream_st* stream, GroupWorkspace* workspace) {
  p.check();
  require_cuda_device();
  return dispatch<TreeLaunch>(choose_verify_config(p.p, p.q, p.vocab, p.cluster_blocks), p, stream, workspace);
}

}  // namespace specula
