// The Block of fused_sampler_row.h for a thread-block cluster (sm_90+): one row split over the cluster's
// blocks, each keeping its slice of the processed row in dynamic shared memory (SlicedRow), so the logits are
// read from global memory once and every later pass (filters, normaliser, probabilities, draw) reads shared
// memory. A collective runs inside each block with cuda_block::CudaBlock's CUB primitives, then crosses the
// cluster through distributed shared memory: each block's thread 0 writes its partial to a slot in its own
// shared memory, cluster barrier, every thread folds the slots of blocks 0 .. n-1 in that order (so every block
// holds the same bits, and a float64 sum does not depend on which block finished first), cluster barrier before
// the slots are written again. Each block counts its slice into its own radix histogram; the cluster's
// histogram is their sum (integer counts and fixed-point masses: any order gives the same buckets), which every
// block builds for itself. emulated_cluster_block.h is the same structure on the CPU (`--device cuda-host`).
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/fused_sampler_row.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define SPECULA_CLUSTER_DEVICE 1
#endif

namespace specula {
namespace cuda_block {

union ClusterSlot {
  double f64;
  int32_t i32;
  fused_sampler::RowSummary summary;
  fused_sampler::WeightsTotal weights;
};

// Extra shared memory of a cluster's block: its own histogram, the cluster's merged one, its partial, and the
// candidate list of its slice.
struct ClusterExtra {
  unsigned long long hist[fused_sampler::kRadixBins + 1];
  unsigned long long merged[fused_sampler::kRadixBins + 1];
  ClusterSlot slot;
  CandidateList candidates;
};

// Extra shared memory of a verification kernel's block in a cluster: its partial, and the per-row scratch every
// block keeps a copy of (the tree kernel's per-node state).
template <int F64, int I32>
struct ClusterScratch {
  ClusterSlot slot;
  double f64[F64];
  int32_t i32[I32];
};

struct SumF64Op {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Extra: ClusterExtra (the fused sampler) or ClusterScratch (verification); a member that uses a field of the
// other is instantiated only where a kernel calls it.
template <int BLOCK, int VEC, class Extra = ClusterExtra>
struct CudaClusterBlock {
  static constexpr int kThreads = BLOCK;
  static constexpr int kVec = VEC;
  static constexpr bool kSlicedRow = true;
  using Local = CudaBlock<BLOCK, VEC, Extra>;

  Local local;         // this block's collectives
  float* slice_;       // dynamic shared memory: tokens [begin, end) of the processed row (the sampler)
  int32_t begin, end;  // this block's slice
  unsigned cta, ctas;  // this block's rank in the cluster, the cluster's size
  // Verification: dynamic shared memory for the block's slices of a p row and a q row (verify_row.h, "Rows read
  // once"), staged_span floats each; null without it.
  float* staged_ = nullptr;
  int32_t staged_span = 0;

  __host__ __device__ int rank() const { return local.rank(); }
  __host__ __device__ bool leader() const { return cta == 0 && local.rank() == 0; }
  __host__ __device__ bool block_leader() const { return local.rank() == 0; }
  __host__ __device__ void sync() { local.sync(); }
  __host__ __device__ void cluster_sync() {
#if defined(SPECULA_CLUSTER_DEVICE)
    cooperative_groups::this_cluster().sync();
#endif
  }

  __host__ __device__ float* slice() { return slice_; }
  __host__ __device__ int32_t slice_begin() const { return begin; }
  __host__ __device__ int32_t slice_end() const { return end; }
  __host__ __device__ float* staged(int which) { return staged_ ? staged_ + which * staged_span : nullptr; }

  template <class F>
  __host__ __device__ void for_each_vec(F&& f) {
#if defined(__CUDA_ARCH__)
    for (int32_t base = begin + static_cast<int32_t>(threadIdx.x) * VEC; base < end; base += BLOCK * VEC) f(base);
#else
    (void)f;
#endif
  }

  // Every block covers [0, n): its shared scratch holds the row's whole per-node state (tree verification).
  template <class F>
  __host__ __device__ void for_each_index(int32_t n, F&& f) {
    local.for_each_index(n, f);
  }
  __host__ __device__ double* f64() { return local.f64(); }
  __host__ __device__ int32_t* i32() { return local.i32(); }

  // The block's value (every thread holds it) -> its slot -> the slots of blocks 0 .. count-1 folded in block
  // order (the whole cluster's by default; `none` when count is 0).
  template <typename V, class Op>
  __host__ __device__ V cluster_fold(V block_value, V ClusterSlot::*member, Op op, int count = -1, V none = V{}) {
#if defined(SPECULA_CLUSTER_DEVICE)
    const unsigned n = count < 0 ? ctas : static_cast<unsigned>(count);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    V* mine = &(local.sh.extra.slot.*member);
    if (threadIdx.x == 0) *mine = block_value;
    cluster.sync();  // every block's partial has landed
    V result = n > 0 ? *cluster.map_shared_rank(mine, 0) : none;
    for (unsigned c = 1; c < n; ++c) result = op(result, *cluster.map_shared_rank(mine, c));
    cluster.sync();  // every block has read the slots before the next collective writes them
    return result;
#else
    (void)member;
    (void)op;
    (void)count;
    (void)none;
    return block_value;
#endif
  }

  __host__ __device__ double sum_f64(double v) { return cluster_fold(local.sum_f64(v), &ClusterSlot::f64, SumF64Op{}); }
  __host__ __device__ int32_t min_i32(int32_t v) { return cluster_fold(local.min_i32(v), &ClusterSlot::i32, MinOp{}); }
  __host__ __device__ int32_t max_i32(int32_t v) { return cluster_fold(local.max_i32(v), &ClusterSlot::i32, MaxOp{}); }
  __host__ __device__ fused_sampler::RowSummary summarise(fused_sampler::RowSummary v) {
    return cluster_fold(local.summarise(v), &ClusterSlot::summary, fused_sampler::Combine{});
  }
  __host__ __device__ fused_sampler::WeightsTotal sum_weights(fused_sampler::WeightsTotal v) {
    return cluster_fold(local.sum_weights(v), &ClusterSlot::weights, fused_sampler::Combine{});
  }

  __host__ __device__ double exclusive_sum_f64(double v, double* block_total) {
    return local.exclusive_sum_f64(v, block_total);
  }
  // The totals of the blocks before this one, added in block order.
  __host__ __device__ double cluster_exclusive_sum_f64(double block_total) {
    return cluster_fold(block_total, &ClusterSlot::f64, SumF64Op{}, static_cast<int>(cta), 0.0);
  }

  __host__ __device__ void hist_clear() { local.hist_clear(); }
  __host__ __device__ void hist_add(int bin, uint64_t w) { local.hist_add(bin, w); }
  // Every block sums the cluster's histograms into its `merged`, then runs the suffix sums and search on it.
  __host__ __device__ uint64_t hist_suffix_sums() {
#if defined(SPECULA_CLUSTER_DEVICE)
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's hist_add has landed
    unsigned long long* merged = local.sh.extra.merged;
    for (int bin = static_cast<int>(threadIdx.x); bin <= fused_sampler::kRadixBins; bin += BLOCK) {
      unsigned long long sum = 0;
      for (unsigned c = 0; c < ctas; ++c) sum += *cluster.map_shared_rank(&local.sh.extra.hist[bin], c);
      merged[bin] = sum;
    }
    cluster.sync();  // every block has read every histogram before any clears its own
    return local.suffix_sums(merged);
#else
    return 0;
#endif
  }
  __host__ __device__ fused_sampler::RadixPick hist_find(uint64_t above, uint64_t target) {
    return local.find_bucket(local.sh.extra.merged, above, target);
  }

  // The candidate list of this block's slice: its own shared memory, no cluster collective.
  static constexpr int kCandidates = Local::kCandidates;
  __host__ __device__ void candidates_clear() { local.candidates_clear(); }
  __host__ __device__ void candidate_add(float x) { local.candidate_add(x); }
  __host__ __device__ int32_t candidates_count() { return local.candidates_count(); }
  __host__ __device__ float candidate(int32_t i) const { return local.candidate(i); }
};

// The floats of dynamic shared memory a block of `kernel` may take on the current device, at most `most`: the device's
// opt-in limit per block less the kernel's static shared memory (227 KiB on sm_90, 99 KiB on sm_120). The kernel's
// limit is raised to that once per device and kernel, not per launch (where one host thread's smaller setting could
// fail another's launch in between); keyed by the kernel's address, since instantiations may share a type.
inline int32_t dynamic_shared_floats(const void* kernel, int32_t most) {
  static std::mutex mutex;
  static std::map<std::pair<int, const void*>, int32_t> granted;  // (device, kernel) -> floats, before `most`
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cluster kernel: current device");
  std::lock_guard<std::mutex> lock(mutex);
  auto found = granted.find({device, kernel});
  if (found == granted.end()) {
    int optin = 0;
    cuda_check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
               "cluster kernel: shared memory per block");
    cudaFuncAttributes attributes{};
    cuda_check(cudaFuncGetAttributes(&attributes, kernel), "cluster kernel: attributes");
    const int64_t room = (static_cast<int64_t>(optin) - static_cast<int64_t>(attributes.sharedSizeBytes)) / 4;
    const int32_t floats = static_cast<int32_t>(std::max<int64_t>(0, room));
    if (floats > 0)
      cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(floats * sizeof(float))),
                 "cluster kernel: dynamic shared memory");
    found = granted.emplace(std::make_pair(device, kernel), floats).first;
  }
  return std::min(found->second, most);
}

// Launches kernel(args...) as `clusters` clusters of `ctas` blocks of `threads` threads each, block
// c * ctas + r being block r of cluster c; throws Error naming `what` when the launch fails.
template <class... Params, class... Args>
void launch_in_clusters(void (*kernel)(Params...), unsigned clusters, int ctas, int threads, size_t dynamic_smem,
                        cudaStream_t stream, const char* what, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(ctas);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(clusters * static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = dynamic_smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  cuda_check(cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...), what);
}

}  // namespace cuda_block
}  // namespace specula
