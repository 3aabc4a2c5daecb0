// CUDA backend of the fused sampler: fused_sampler::sample_row over one block per row (the CUB block
// primitives of cuda_block.cuh), over a thread-block cluster per row on sm_90+ (cluster_block.cuh), or over a group
// of blocks exchanging through global memory (RowExchange::global_memory, any GPU with cooperative launches). Block
// size, vector width and the variant are template parameters; launch_fused_sampler turns the runtime choice
// (choose_fused_sampler_config, the params' row_exchange) into one of eight instantiations.
#include <cuda_runtime.h>

#include "kernels/cluster_block.cuh"
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
template <int BLOCK, int VEC>
using ClusterBlock = cuda_block::CudaClusterBlock<BLOCK, VEC>;
template <int BLOCK, int VEC>
using GroupBlock = cuda_block::CudaClusterBlock<BLOCK, VEC, cuda_block::ClusterExtra, true>;

// minBlocksPerSM = 1: one block per row is the design, so ptxas may use up to 65536 / BLOCK registers.
// Without it, ptxas trades a few bytes of spills for 64 registers, which the spill gate rejects.
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1) fused_sampler_kernel(SamplerKernelParams p) {
  __shared__ typename CudaBlock<BLOCK, VEC>::Shared shared;
  CudaBlock<BLOCK, VEC> block{shared, p.vocab};
  fused_sampler::sample_row(block, p, static_cast<int32_t>(blockIdx.x));
}

// One cluster of gridDim.x / batch blocks per row; `span` tokens of the row per block (cluster_slice_span),
// kept in dynamic shared memory. Two blocks per SM: a 128K-token row's 8 slices of ~63 KiB plus ~38 KiB of
// histograms and candidate list each fit twice in an SM's 227 KiB.
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 2) fused_sampler_cluster_kernel(SamplerKernelParams p, int32_t span) {
#if defined(SPECULA_CLUSTER_DEVICE)
  __shared__ typename ClusterBlock<BLOCK, VEC>::Local::Shared shared;
  extern __shared__ float4 slice[];  // float4: 16-byte aligned for the 4-wide accesses
  const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const unsigned cta = cluster.block_rank(), ctas = cluster.num_blocks();
  const int32_t row = static_cast<int32_t>(blockIdx.x / ctas);
  const fused_sampler::SliceBounds s = fused_sampler::slice_bounds(cta, span, p.vocab);
  ClusterBlock<BLOCK, VEC> block{{shared, p.vocab}, reinterpret_cast<float*>(slice), s.begin, s.end, cta, ctas};
  fused_sampler::sample_row(block, p, row);
  cluster.sync();  // no block exits while another may still read its shared memory
#else
  (void)p;
  (void)span;
  __trap();  // the launcher starts it only on sm_90+
#endif
}

// The same over groups of g.ctas blocks exchanging through global memory (a GPU without clusters): group
// blockIdx.x / g.ctas takes rows in turn, each block keeping its slice of the row in shared memory as a cluster's
// does. One block per SM: the exchange's counters and workspace take the few registers that two blocks per SM
// (128 each) do not have, and on an sm_80 SM (164 KiB) a 128K-token row's slice and the histograms fit only once.
template <int BLOCK, int VEC>
__global__ void __launch_bounds__(BLOCK, 1)
    fused_sampler_group_kernel(cuda_block::GroupLaunch g, SamplerKernelParams p, int32_t span) {
  __shared__ typename GroupBlock<BLOCK, VEC>::Local::Shared shared;
  extern __shared__ float4 slice[];  // float4: 16-byte aligned for the 4-wide accesses
  const fused_sampler::SliceBounds s = fused_sampler::slice_bounds(g.cta(), span, p.vocab);
  GroupBlock<BLOCK, VEC> block{{shared, p.vocab},
                               reinterpret_cast<float*>(slice),
                               s.begin,
                               s.end,
                               static_cast<unsigned>(g.cta()),
                               static_cast<unsigned>(g.ctas),
                               nullptr,
                               0,
                               g.exchange<cuda_block::CudaGroupOps<BLOCK>>()};
  for (int32_t row = g.group(); row < p.batch; row += g.groups()) {
    fused_sampler::sample_row(block, p, row);
    block.sync();  // the next row rewrites the block's slice
  }
  block.exchange.finish();  // the workspace as the launch found it
}

template <int BLOCK, int VEC>
void launch(const SamplerKernelParams& p, cudaStream_t stream) {
  fused_sampler_kernel<BLOCK, VEC><<<p.batch, BLOCK, 0, stream>>>(p);
  cuda_check(cudaGetLastError(), "fused sampler launch");
}

// Launches the cluster kernel; false (nothing launched) where a block of this device cannot hold the slice
// (sm_120's 99 KiB), and the row goes to the one-block kernel.
template <int BLOCK, int VEC>
bool launch_cluster(const SamplerKernelParams& p, int ctas, cudaStream_t stream) {
  const int32_t span = cluster_slice_span(p.vocab, ctas, VEC);
  const auto kernel = fused_sampler_cluster_kernel<BLOCK, VEC>;
  if (span > cuda_block::dynamic_shared_floats(reinterpret_cast<const void*>(kernel), kMaxSamplerSliceTokens))
    return false;
  cuda_block::launch_in_clusters(kernel, static_cast<unsigned>(p.batch), ctas, BLOCK,
                                 static_cast<size_t>(span) * sizeof(float), stream, "fused sampler (cluster) launch", p,
                                 span);
  return true;
}

// Launches the global-memory exchange's kernel; false (nothing launched) where a block cannot hold the slice or the
// device cannot hold a whole group at once.
template <int BLOCK, int VEC>
bool launch_groups(const SamplerKernelParams& p, int ctas, cudaStream_t stream, GroupWorkspace* workspace) {
  const int32_t span = cluster_slice_span(p.vocab, ctas, VEC);
  const auto kernel = fused_sampler_group_kernel<BLOCK, VEC>;
  if (span > cuda_block::dynamic_shared_floats(reinterpret_cast<const void*>(kernel), kMaxSamplerSliceTokens))
    return false;
  return cuda_block::launch_in_groups(kernel, p.batch, ctas, BLOCK, static_cast<size_t>(span) * sizeof(float), stream,
                                      workspace, "fused sampler (global-memory exchange) launch", p, span);
}

}  // namespace

RowSplit launch_fused_sampler(const SamplerKernelParams& p, CUstream_st* stream, GroupWorkspace* workspace) {
  p.check();
  require_cuda_device();
  const SamplerLaunchConfig c = choose_fused_sampler_config(p);
  // The dispatch: runtime (blocks per row, exchange, block, vec) -> compile-time template arguments.
  if (c.ctas > 1 && p.row_exchange == RowExchange::global_memory &&
      (c.vec == 4 ? launch_groups<256, 4>(p, c.ctas, stream, workspace)
                  : launch_groups<256, 1>(p, c.ctas, stream, workspace)))
    return RowSplit{c.ctas, RowExchange::global_memory};
  if (c.ctas > 1 && p.row_exchange == RowExchange::automatic && cuda_device_has_clusters() &&
      (c.vec == 4 ? launch_cluster<256, 4>(p, c.ctas, stream) : launch_cluster<256, 1>(p, c.ctas, stream)))
    return RowSplit{c.ctas, RowExchange::automatic};
  const int block = p.vocab >= 16384 ? 512 : 256;
  if (block == 512 && c.vec == 4)
    launch<512, 4>(p, stream);
  else if (block == 512)
    launch<512, 1>(p, stream);
  else if (c.vec == 4)
    launch<256, 4>(p, stream);
  else
    launch<256, 1>(p, stream);
  return RowSplit{};
}

}  // namespace specula
