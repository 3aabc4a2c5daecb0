// What the verification kernels' translation units share (verify_kernels.cu: one block per row and clusters;
// verify_group_kernels.cu: the global-memory exchange): the staged rows' shared memory, and the group launchers.
// CUDA only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cluster_block.cuh"
#include "kernels/verify_kernels.h"

namespace specula {

// The floats of the staged rows a block of `kernel` keeps (verify_staged_floats), or 0 where the device's blocks
// cannot hold the two slices (sm_120): the passes then read global memory.
template <class Kernel, class Params>
inline int32_t staged_floats(Kernel kernel, const Params& p, int ctas, int vec) {
  const int32_t wanted = verify_staged_floats(p.vocab, ctas, vec, p.stage_rows);
  return wanted > 0 && wanted <= cuda_block::dynamic_shared_floats(reinterpret_cast<const void*>(kernel), wanted)
             ? wanted
             : 0;
}

// A row split over `ctas` blocks exchanging through global memory (verify_group_kernels.cu), `span` tokens a block;
// false (nothing launched) where the device cannot hold one group of them at once.
bool launch_group_verify(const ChainVerifyParams& p, int ctas, int32_t span, int vec, cudaStream_t stream,
                         GroupWorkspace* workspace);
bool launch_group_verify(const BlockVerifyParams& p, int ctas, int32_t span, int vec, cudaStream_t stream,
                         GroupWorkspace* workspace);
bool launch_group_verify(const TreeVerifyParams& p, int ctas, int32_t span, int vec, cudaStream_t stream,
                         GroupWorkspace* workspace);

}  // namespace specula
