// CUDA backend of the verification kernels: one block per batch row runs verify_row::{chain,tree,block}_row
// with CUB block primitives. Block size and vector width are template parameters; the launchers turn the
// runtime choice (choose_verify_config) into one of four instantiations per kernel.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"
#include "kernels/verify_row.h"

namespace specula {
namespace {

struct MinOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a > b ? a : b; }
};

// The Block of verify_row.h for one CUDA block. F64 / I32: elements of shared scratch (the tree kernel's
// per-node state; 1 for the chain and block kernels, which need none). Methods are __host__ __device__
// only so that the shared row templates type-check for both sides; they are called from device code alone.
template <int BLOCK, int VEC, int F64, int I32>
struct VerifyCudaBlock {
  static constexpr int kThreads = BLOCK;
  static constexpr int kVec = VEC;

  using ReduceF64 = cub::BlockReduce<double, BLOCK>;
  using ReduceI32 = cub::BlockReduce<int32_t, BLOCK>;
  using ScanF64 = cub::BlockScan<double, BLOCK>;

  struct Shared {
    union {
      typename ReduceF64::TempStorage f64;
      typename ReduceI32::TempStorage i32;
      typename ScanF64::TempStorage scan_f64;
    } temp;
    union {
      double f64;
      int32_t i32;
    } out;
    double f64[F64];
    int32_t i32[I32];
  };

  Shared& sh;
  int32_t vocab;

  __host__ __device__ int rank() const {
#if defined(__CUDA_ARCH__)
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ bool leader() const { return rank() == 0; }

  template <class F>
  __host__ __device__ void for_each_vec(F&& f) {
#if defined(__CUDA_ARCH__)
    for (int32_t base = static_cast<int32_t>(threadIdx.x) * VEC; base < vocab; base += BLOCK * VEC) f(base);
#else
    (void)f;
#endif
  }
  template <class F>
  __host__ __device__ void for_each_index(int32_t n, F&& f) {
#if defined(__CUDA_ARCH__)
    for (int32_t i = static_cast<int32_t>(threadIdx.x); i < n; i += BLOCK) f(i);
#else
    (void)n;
    (void)f;
#endif
  }

  // Reduction result in thread 0 -> shared -> every thread; the second barrier frees temp and out.
  template <typename T>
  __device__ T broadcast(T& slot, T value) {
    if (threadIdx.x == 0) slot = value;
    __syncthreads();
    value = slot;
    __syncthreads();
    return value;
  }

  __host__ __device__ double sum_f64(double v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.f64, ReduceF64(sh.temp.f64).Sum(v));
#else
    return v;
#endif
  }
  __host__ __device__ int32_t min_i32(int32_t v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.i32, ReduceI32(sh.temp.i32).Reduce(v, MinOp{}));
#else
    return v;
#endif
  }
  __host__ __device__ int32_t max_i32(int32_t v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.i32, ReduceI32(sh.temp.i32).Reduce(v, MaxOp{}));
#else
    return v;
#endif
  }

  // Prefix sums over a tile in blocked order (thread t holds positions t*VEC .. t*VEC+VEC-1).
  __host__ __device__ double inclusive_scan(const double (&in)[VEC], double (&out)[VEC]) {
#if defined(__CUDA_ARCH__)
    double items[VEC];
    for (int j = 0; j < VEC; ++j) items[j] = in[j];
    double aggregate;
    ScanF64(sh.temp.scan_f64).InclusiveSum(items, out, aggregate);  // aggregate: valid in every thread
    __syncthreads();
    return aggregate;
#else
    (void)in;
    (void)out;
    return 0.0;
#endif
  }

  __host__ __device__ void sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  __host__ __device__ double* f64() { return sh.f64; }
  __host__ __device__ int32_t* i32() { return sh.i32; }
};

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
