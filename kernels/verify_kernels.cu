// CUDA backend of the verification kernels: one block per batch row runs verify_row::{chain,tree,block}_row
// with the CUB block primitives of cuda_block.cuh. Block size and vector width are template parameters; the launchers
// turn the runtime choice (choose_verify_config) into one of four instantiations per kernel.
#include <cuda_runtime.h>

#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"
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

// The dispatch: runtime (block, vec) -> compile-time template arguments.
template <template <int, int> class Launch, class Params>
void dispatch(const VerifyLaunchConfig& c, const Params& p, cudaStream_t stream) {
  if (c.block == 512 && c.vec == 4)
    Launch<512, 4>::run(p, stream);
  else if (c.block == 512)
    Launch<512, 1>::run(p, stream);
  else if (c.vec == 4)
    Launch<256, 4>::run(p, stream);
  else
    Launch<256, 1>::run(p, stream);
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

void launch_chain_verify(const ChainVerifyParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  dispatch<ChainLaunch>(choose_verify_config(p.p, p.q, p.vocab), p, stream);
}

void launch_block_verify(const BlockVerifyParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  dispatch<BlockLaunch>(choose_verify_config(p.p, p.q, p.vocab), p, stream);
}

void launch_tree_verify(const TreeVerifyParams& p, CUstream_st* stream) {
  p.check();
  require_cuda_device();
  dispatch<TreeLaunch>(choose_verify_config(p.p, p.q, p.vocab), p, stream);
}

}  // namespace specula
