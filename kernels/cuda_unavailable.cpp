// The CUDA launchers of a build without CUDA (-DSPECULA_CUDA=OFF): same declarations, and each call is
// the Error "no CUDA device: this build has no CUDA support (...)" instead of a link failure.
#include "kernels/cuda_device.h"
#include "kernels/draft_children.h"
#include "kernels/group_workspace.h"
#include "kernels/kernel_stream.h"
#include "kernels/law_values.h"
#include "kernels/pending_counts.h"
#include "kernels/philox_fill.h"
#include "kernels/sampler_kernels.h"
#include "kernels/verify_kernels.h"

namespace specula {

uint64_t* GroupWorkspace::words(size_t, CUstream_st*) {
  require_cuda_device();
  return nullptr;  // not reached
}
int GroupWorkspace::release() noexcept { return 0; }

RowSplit launch_fused_sampler(const SamplerKernelParams& p, CUstream_st*, GroupWorkspace*) {
  p.check();
  require_cuda_device();
  return {};  // not reached
}

void launch_philox_fill(const PhiloxFillParams& p, CUstream_st*) {
  p.check();
  require_cuda_device();
}

RowSplit launch_chain_verify(const ChainVerifyParams& p, CUstream_st*, GroupWorkspace*) {
  p.check();
  require_cuda_device();
  return {};  // not reached
}

RowSplit launch_tree_verify(const TreeVerifyParams& p, CUstream_st*, GroupWorkspace*) {
  p.check();
  require_cuda_device();
  return {};  // not reached
}

RowSplit launch_block_verify(const BlockVerifyParams& p, CUstream_st*, GroupWorkspace*) {
  p.check();
  require_cuda_device();
  return {};  // not reached
}

void launch_ranked_children(const RankedChildrenParams& p, CUstream_st*) {
  p.check();
  require_cuda_device();
}

void launch_sibling_draws(const SiblingDrawParams& p, CUstream_st*) {
  p.check();
  require_cuda_device();
}

void launch_pending_counts(const PendingCountsParams& p, CUstream_st*) {
  p.check();
  require_cuda_device();
}

void launch_law_values(const LawValuesParams& p, CUstream_st*) {
  p.check();
  require_cuda_device();
}

std::unique_ptr<KernelStream> make_cuda_kernel_stream(std::optional<void*>) {
  require_cuda_device();
  return nullptr;  // not reached: a build without CUDA has no device
}

}  // namespace specula
