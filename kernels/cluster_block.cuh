// The Block of fused_sampler_row.h for a thread-block cluster (sm_90+): one row split over the cluster's
// blocks, each keeping its slice of the processed row in dynamic shared memory (SlicedRow), so the logits are
// read from global memory once and every later pass (filters, normaliser, probabilities, draw) reads shared
// memory. A collective runs inside each block with cuda_block::CudaBlock's CUB primitives, then crosses the
// cluster through distributed shared memory: each block's thread 0 writes its partial to a slot in its own
// shared memory, cluster barrier, every thread folds the slots of blocks 0 .. n-1 in that order (so every block
// holds the same bits, and a float64 sum does not depend on which block finished first). The slots alternate between
// two sets, so the next collective's barrier keeps them until every block has read them: one barrier a collective.
// Each block counts its slice into its own radix histogram; the cluster's histogram is their sum (integer counts and
// fixed-point masses: any order gives the same buckets), which every block builds for itself, its two buffers
// swapping roles each round. emulated_cluster_block.h is the same structure on the CPU (`--device cuda-host`).
//
// kGlobal: the same Block for a GPU without clusters (sm_80). The blocks of a row are a group of a cooperative
// launch (every block resident at once), and the collectives cross the group through global memory with
// group_exchange.h's protocol instead of distributed shared memory, one group barrier per collective.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cuda/atomic>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "kernels/cuda_block.cuh"
#include "kernels/cuda_check.h"
#include "kernels/fused_sampler_row.h"
#include "kernels/group_exchange.h"
#include "kernels/group_workspace.h"

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

// Extra shared memory of a cluster's block: its own histogram and the cluster's merged one (through distributed shared
// memory the two swap roles each radix round), its partials (two sets, rotated by fold), and the candidate list of its
// slice.
struct ClusterExtra {
  unsigned long long hist[fused_sampler::kRadixBins + 1];
  unsigned long long merged[fused_sampler::kRadixBins + 1];
  ClusterSlot slot[2];
  CandidateList candidates;
};

// Extra shared memory of a verification kernel's block in a cluster: its partials (two sets), and the per-row scratch
// every block keeps a copy of (the tree kernel's per-node state).
template <int F64, int I32>
struct ClusterScratch {
  ClusterSlot slot[2];
  double f64[F64];
  int32_t i32[I32];
};

struct SumF64Op {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// group_exchange.h's operations on a GPU. The workspace is read and written past L1 (ld.cg / st.cg): another
// block's writes land in L2, and a line this SM's L1 kept from an earlier collective would be stale. The barrier is
// cooperative_groups' grid barrier for one group: the block's barrier, then its thread 0 makes the block's writes
// visible device-wide (the fence is cumulative over the threads the block barrier ordered before it), counts
// itself in, waits for the group's count, and fences again before the block barrier lets the others read.
template <int BLOCK>
struct CudaGroupOps {
  static constexpr int kThreads = BLOCK;

  __host__ __device__ int thread() const {
#if defined(__CUDA_ARCH__)
    return static_cast<int>(threadIdx.x);
#else
    return 0;
#endif
  }
  __host__ __device__ void block_sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#endif
  }
  __host__ __device__ void group_barrier(uint64_t* arrivals, uint64_t target) {
#if defined(__CUDA_ARCH__)
    __syncthreads();
    if (threadIdx.x == 0) {
      cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> count(
          *reinterpret_cast<unsigned long long*>(arrivals));
      __threadfence();
      count.fetch_add(1ull, cuda::memory_order_relaxed);
      // Bounded: a group whose blocks were not all resident, or disagreed on the collectives, would otherwise hang
      // the device; after at least 2^28 naps of 32 ns (~9 s) the launch fails instead.
      for (unsigned naps = 0; count.load(cuda::memory_order_relaxed) < target; ++naps) {
        if (naps == (1u << 28)) __trap();
        __nanosleep(32);
      }
      __threadfence();
    }
    __syncthreads();
#else
    (void)arrivals;
    (void)target;
#endif
  }
  // The threadFenceReduction pattern: thread 0 fences the block's accesses (ordered before it by the block barrier)
  // and counts the block out; in the block whose count completes the group it fences again, as group_barrier does
  // after its wait, before the block barrier that lets its threads clear what the others read.
  __host__ __device__ bool last_out(uint64_t* exits, int ctas) {
#if defined(__CUDA_ARCH__)
    __syncthreads();
    int last = 0;
    if (threadIdx.x == 0) {
      __threadfence();
      last = atomicAdd(reinterpret_cast<unsigned long long*>(exits), 1ull) == static_cast<unsigned long long>(ctas - 1);
      if (last) __threadfence();  // before the block barrier that orders the block's clearing after it
    }
    return __syncthreads_or(last) != 0;
#else
    (void)exits;
    (void)ctas;
    return false;
#endif
  }
  __host__ __device__ uint64_t load(const uint64_t* p) const {
#if defined(__CUDA_ARCH__)
    return __ldcg(reinterpret_cast<const unsigned long long*>(p));
#else
    return *p;
#endif
  }
  __host__ __device__ void store(uint64_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__)
    __stcg(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
    *p = v;
#endif
  }
  __host__ __device__ void add(uint64_t* p, uint64_t v) {
#if defined(__CUDA_ARCH__)
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
#else
    *p += v;
#endif
  }
};

// Extra: ClusterExtra (the fused sampler) or ClusterScratch (verification); a member that uses a field of the
// other is instantiated only where a kernel calls it. kGlobal: the blocks exchange through global memory.
template <int BLOCK, int VEC, class Extra = ClusterExtra, bool kGlobal = false>
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
  // kGlobal: this block's side of the group's exchange (its workspace in global memory).
  group_exchange::Exchange<CudaGroupOps<BLOCK>> exchange = {};
  // Through distributed shared memory: the folds and radix rounds so far, which pick the slot set and the histogram
  // (the same count in every thread of every block: they run the same collectives).
  uint32_t folds = 0, rounds = 0;

  __host__ __device__ int rank() const { return local.rank(); }
  __host__ __device__ bool leader() const { return cta == 0 && local.rank() == 0; }
  __host__ __device__ bool block_leader() const { return local.rank() == 0; }
  __host__ __device__ void sync() { local.sync(); }
  __host__ __device__ void cluster_sync() {
    if constexpr (kGlobal) {
      exchange.barrier();
    } else {
#if defined(SPECULA_CLUSTER_DEVICE)
      cooperative_groups::this_cluster().sync();
#endif
    }
  }

  __host__ __device__ float* slice() { return slice_; }
  __host__ __device__ int32_t slice_begin() const { return begin; }
  __host__ __device__ int32_t slice_end() const { return end; }
  __host__ __device__ float* staged(int which) { return staged_ ? staged_ + which * staged_span : nullptr; }

  __host__ __device__ fused_sampler::VecRange vec_range() const {
#if defined(__CUDA_ARCH__)
    return {begin + static_cast<int32_t>(threadIdx.x) * VEC, end, BLOCK * VEC};
#else
    return {0, 0, 1};
#endif
  }
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
    if constexpr (kGlobal) {
      (void)member;
      return exchange.fold(block_value, op, count, none);
    } else {
      return dsmem_fold(block_value, member, op, count, none);
    }
  }
  // cluster_fold through distributed shared memory.
  template <typename V, class Op>
  __host__ __device__ V dsmem_fold(V block_value, V ClusterSlot::*member, Op op, int count, V none) {
#if defined(SPECULA_CLUSTER_DEVICE)
    const unsigned n = count < 0 ? ctas : static_cast<unsigned>(count);
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    // Fold f writes set f % 2: fold f + 2 writes it again only after fold f + 1's barrier, which every block reaches
    // after its reads of fold f, so one barrier a fold suffices.
    V* mine = &(local.sh.extra.slot[folds++ % 2].*member);
    if (threadIdx.x == 0) *mine = block_value;
    cluster.sync();  // every block's partial has landed
    V result = n > 0 ? *cluster.map_shared_rank(mine, 0) : none;
    for (unsigned c = 1; c < n; ++c) result = op(result, *cluster.map_shared_rank(mine, c));
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

  // This block's histogram of the current radix round, and where it merges the cluster's. Through distributed shared
  // memory the two buffers swap roles each round: round r counts into one and merges into the other, which every
  // block read as a histogram in round r - 1 before round r's barrier, and the merge is written after it; round r + 1
  // clears the merged one to count into (this block alone read it). So every block's reads of a round's histograms end
  // before the next round's barrier, and one barrier a round suffices. The global-memory exchange rotates its own
  // buffers in the workspace, and there a block's histogram is read by that block alone.
  __host__ __device__ bool swapped(uint32_t round) const { return !kGlobal && round % 2 == 1; }
  __host__ __device__ unsigned long long* hist_of(uint32_t round) {
    return swapped(round) ? local.sh.extra.merged : local.sh.extra.hist;
  }
  __host__ __device__ unsigned long long* merged_of(uint32_t round) {
    return swapped(round) ? local.sh.extra.hist : local.sh.extra.merged;
  }
  __host__ __device__ unsigned long long* own_hist() { return hist_of(rounds); }
  __host__ __device__ unsigned long long* merged_hist() { return merged_of(rounds); }
  __host__ __device__ void hist_clear() {
#if defined(__CUDA_ARCH__)
    unsigned long long* hist = own_hist();
    for (int i = threadIdx.x; i <= fused_sampler::kRadixBins; i += BLOCK) hist[i] = 0;
    __syncthreads();
#endif
  }
  __host__ __device__ void hist_add(int bin, uint64_t w) {
#if defined(__CUDA_ARCH__)
    atomicAdd(&own_hist()[bin], static_cast<unsigned long long>(w));
#else
    (void)bin;
    (void)w;
#endif
  }
  // Every block sums the cluster's histograms into its merge buffer (merged_hist), then runs the suffix sums and
  // search on it.
  __host__ __device__ uint64_t hist_suffix_sums() {
    if constexpr (kGlobal) {
      exchange.merge_histograms(own_hist(), merged_hist());
      return local.suffix_sums(merged_hist());
    } else {
      return dsmem_hist_suffix_sums();
    }
  }
  __host__ __device__ uint64_t dsmem_hist_suffix_sums() {
#if defined(SPECULA_CLUSTER_DEVICE)
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    unsigned long long* const hist = own_hist();
    unsigned long long* const merged = merged_hist();
    ++rounds;
    cluster.sync();  // every block's hist_add has landed
    for (int bin = static_cast<int>(threadIdx.x); bin <= fused_sampler::kRadixBins; bin += BLOCK) {
      unsigned long long sum = 0;
      for (unsigned c = 0; c < ctas; ++c) sum += *cluster.map_shared_rank(&hist[bin], c);
      merged[bin] = sum;
    }
    __syncthreads();  // the merge is whole before the suffix sums read it (their threads take other bins)
    return local.suffix_sums(merged);
#else
    return 0;
#endif
  }
  __host__ __device__ fused_sampler::RadixPick hist_find(uint64_t above, uint64_t target) {
    // The buffer the last round merged into (`rounds` has moved past it).
    return local.find_bucket(merged_of(rounds - 1), above, target);
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

// What a kernel of blocks exchanging through global memory (CudaClusterBlock with kGlobal) learns of its launch:
// block b is block b % ctas of group b / ctas, and the group's workspace is group_words(ctas) words from
// workspace + group * group_words(ctas).
struct GroupLaunch {
  uint64_t* workspace;
  int32_t ctas;

  // The calling block's rank in its group, its group, and the launch's groups (group g takes rows g, g + groups, ...).
  __device__ int32_t cta() const { return static_cast<int32_t>(blockIdx.x) % ctas; }
  __device__ int32_t group() const { return static_cast<int32_t>(blockIdx.x) / ctas; }
  __device__ int32_t groups() const { return static_cast<int32_t>(gridDim.x) / ctas; }
  // The calling block's side of its group's exchange: its group's workspace.
  template <class Ops>
  __device__ group_exchange::Exchange<Ops> exchange() const {
    return {Ops{}, workspace + static_cast<int64_t>(group()) * group_exchange::group_words(ctas), cta(), ctas};
  }
};

// How many blocks of `kernel` (at `threads` threads and `dynamic_smem` bytes) the current device holds at once, 0 where
// it has no cooperative launch or memory pools: queried once per device, kernel and shape (the occupancy query and
// attribute reads cost microseconds, a group launch's host time), then kept.
inline int64_t resident_group_blocks(const void* kernel, int threads, size_t dynamic_smem, const char* what) {
  static std::mutex mutex;
  static std::map<std::tuple<int, const void*, int, size_t>, int64_t> known;
  int device = 0;
  cuda_check(cudaGetDevice(&device), what);
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device, kernel, threads, dynamic_smem);
  if (const auto found = known.find(key); found != known.end()) return found->second;
  int cooperative = 0, pools = 0, sms = 0, per_sm = 0;
  cuda_check(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device), what);
  cuda_check(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device), what);
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), what);
  cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_smem), what);
  const int64_t blocks = cooperative && pools ? static_cast<int64_t>(per_sm) * sms : 0;
  known.emplace(key, blocks);
  return blocks;
}

// Launches kernel(GroupLaunch, args...) cooperatively, so that every block is resident at once (a block waits at
// its group's barrier for the others): as many groups of `ctas` blocks of `threads` threads as the device holds,
// at most `rows`; group g takes rows g, g + groups, .... The kernel calls its exchange's finish() once it is done. The
// workspace: `kept`'s (zero at rest, kernels/group_workspace.h), or, without one, a GroupWorkspace for this launch
// alone, allocated and zeroed on `stream` before the kernel and freed there after it. Returns false, launching
// nothing, where the device has no cooperative launch or memory pools, or cannot hold one whole group; throws Error
// naming `what` when a call fails.
template <class... Params, class... Args>
bool launch_in_groups(void (*kernel)(GroupLaunch, Params...), int32_t rows, int ctas, int threads, size_t dynamic_smem,
                      cudaStream_t stream, GroupWorkspace* kept, const char* what, Args&&... args) {
  const int64_t resident_groups =
      resident_group_blocks(reinterpret_cast<const void*>(kernel), threads, dynamic_smem, what) / ctas;
  if (resident_groups < 1) return false;
  const int32_t groups = static_cast<int32_t>(std::min<int64_t>(rows, resident_groups));
  const size_t words = static_cast<size_t>(groups) * static_cast<size_t>(group_exchange::group_words(ctas));
  GroupWorkspace once;  // without a kept one: this launch's own, allocated and zeroed on `stream`
  uint64_t* const workspace = (kept ? kept : &once)->words(words, stream);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeCooperative;
  attribute[0].val.cooperative = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(groups) * static_cast<unsigned>(ctas));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = dynamic_smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  const cudaError_t launched =
      cudaLaunchKernelEx(&config, kernel, GroupLaunch{workspace, ctas}, static_cast<Args&&>(args)...);
  // This launch's own freed after the kernel, or at once if it never started (a kept one, untouched then, stays zero).
  const cudaError_t freed = static_cast<cudaError_t>(once.release());
  if (launched == cudaErrorCooperativeLaunchTooLarge) {
    // Fewer SMs than the occupancy query saw (MPS, a green context): the caller runs one block per row instead.
    (void)cudaGetLastError();  // not sticky: cleared, so that the next launch's check does not report it
    cuda_check(freed, what);
    return false;
  }
  cuda_check(launched, what);
  cuda_check(freed, what);
  return true;
}

}  // namespace cuda_block
}  // namespace specula
