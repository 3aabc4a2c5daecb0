// CUDA backend of the fused sampler: one block per row runs fused_sampler::sample_row with CUB block
// primitives. Block size and vector width are template parameters; launch_fused_sampler turns the
// runtime choice (choose_fused_sampler_config) into one of four instantiations.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda_check.h"
#include "kernels/cuda_device.h"
#include "kernels/fused_sampler_row.h"
#include "kernels/sampler_kernels.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using fused_sampler::ArgMax;
using fused_sampler::kRadixBins;
using fused_sampler::RadixPick;

struct ArgMaxOp {
  __device__ ArgMax operator()(const ArgMax& a, const ArgMax& b) const { return fused_sampler::better(a, b); }
};
struct MinOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ int32_t operator()(int32_t a, int32_t b) const { return a > b ? a : b; }
};

// The Block of fused_sampler_row.h for one CUDA block. Methods are __host__ __device__ only so that the
// shared row template type-checks for both sides; they are called from device code alone.
template <int BLOCK, int VEC>
struct CudaBlock {
  static constexpr int kThreads = BLOCK;
  static constexpr int kVec = VEC;
  static constexpr int kBinsPerThread = kRadixBins / BLOCK;
  static_assert(kRadixBins % BLOCK == 0, "histogram bins must split evenly over the threads");
  static_assert(32 % VEC == 0, "a vector must not straddle two bitmap words");

  using ReduceF64 = cub::BlockReduce<double, BLOCK>;
  using ReduceI32 = cub::BlockReduce<int32_t, BLOCK>;
  using ReduceArg = cub::BlockReduce<ArgMax, BLOCK>;
  using ScanF64 = cub::BlockScan<double, BLOCK>;
  using ScanU64 = cub::BlockScan<unsigned long long, BLOCK>;

  struct Shared {
    union {
      typename ReduceF64::TempStorage f64;
      typename ReduceI32::TempStorage i32;
      typename ReduceArg::TempStorage arg;
      typename ScanF64::TempStorage scan_f64;
      typename ScanU64::TempStorage scan_u64;
    } temp;
    unsigned long long hist[kRadixBins + 1];  // hist[kRadixBins] stays 0: the sum above the top bucket
    union {
      double f64;
      int32_t i32;
      ArgMax arg;
      RadixPick pick;
    } out;
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
  __host__ __device__ int32_t sum_i32(int32_t v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.i32, ReduceI32(sh.temp.i32).Sum(v));
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
  __host__ __device__ ArgMax argmax(ArgMax v) {
#if defined(__CUDA_ARCH__)
    return broadcast(sh.out.arg, ReduceArg(sh.temp.arg).Reduce(v, ArgMaxOp{}));
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

  __host__ __device__ void hist_clear() {
#if defined(__CUDA_ARCH__)
    for (int i = threadIdx.x; i <= kRadixBins; i += BLOCK) sh.hist[i] = 0;
    __syncthreads();
#endif
  }
  __host__ __device__ void hist_add(int bin, uint64_t w) {
#if defined(__CUDA_ARCH__)
    atomicAdd(&sh.hist[bin], static_cast<unsigned long long>(w));
#else
    (void)bin;
    (void)w;
#endif
  }
  // hist[d] := weight of buckets >= d (thread t scans buckets from the top, kBinsPerThread each).
  __host__ __device__ uint64_t hist_suffix_sums() {
#if defined(__CUDA_ARCH__)
    __syncthreads();  // every hist_add has landed
    unsigned long long items[kBinsPerThread];
    for (int j = 0; j < kBinsPerThread; ++j) items[j] = sh.hist[kRadixBins - 1 - (threadIdx.x * kBinsPerThread + j)];
    ScanU64(sh.temp.scan_u64).InclusiveSum(items, items);
    for (int j = 0; j < kBinsPerThread; ++j) sh.hist[kRadixBins - 1 - (threadIdx.x * kBinsPerThread + j)] = items[j];
    __syncthreads();
    const uint64_t total = sh.hist[0];
    // Every thread has read the total before any may go on to the next hist_clear: without this barrier a
    // row that returns early (top-k with k >= candidates) and clears the histogram for its next filter
    // races the slower threads' read (found by compute-sanitizer racecheck).
    __syncthreads();
    return total;
#else
    return 0;
#endif
  }
  // The unique bucket d with above + hist[d+1] < target <= above + hist[d] (radix_threshold guarantees one).
  __host__ __device__ RadixPick hist_find(uint64_t above, uint64_t target) {
#if defined(__CUDA_ARCH__)
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int d = kRadixBins - 1 - static_cast<int>(threadIdx.x * kBinsPerThread + j);
      if (bucket_holds_target(above, sh.hist[d + 1], sh.hist[d], target))
        sh.out.pick = RadixPick{static_cast<uint32_t>(d), above + sh.hist[d + 1]};
    }
    __syncthreads();
    const RadixPick pick = sh.out.pick;
    __syncthreads();
    return pick;
#else
    (void)target;
    return RadixPick{0, above};
#endif
  }
};

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
