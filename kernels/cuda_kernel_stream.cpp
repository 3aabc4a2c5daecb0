// The CUDA backend of KernelStream: one stream (its own non-blocking one, or one borrowed from the caller),
// cudaMalloc'd device buffers, page-locked staging buffers and the global-memory exchange's workspace kept for the
// stream's life, every call checked.
// Compiled only with -DSPECULA_CUDA=ON.
#include <cuda_runtime_api.h>

#include <memory>
#include <optional>

#include "kernels/cuda_check.h"
#include "kernels/kernel_stream.h"

namespace specula {
namespace {

class CudaStream final : public KernelStream {
 public:
  // `borrowed`: the caller's stream (a cudaStream_t, null for the legacy default stream), used and not destroyed.
  explicit CudaStream(std::optional<void*> borrowed) : owned_(!borrowed) {
    require_cuda_device();
    if (borrowed)
      stream_ = static_cast<cudaStream_t>(*borrowed);
    else
      cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~CudaStream() override {
    cudaStreamSynchronize(stream_);  // a destructor reports nothing: errors surfaced at the last synchronize
    release_buffers();
    group_workspace_.release();
    if (owned_) cudaStreamDestroy(stream_);
  }
  Device device() const override { return Device::cuda; }
  void fused_sampler(const SamplerKernelParams& p) override { launch_fused_sampler(p, stream_, &group_workspace_); }
  void chain_verify(const ChainVerifyParams& p) override { launch_chain_verify(p, stream_, &group_workspace_); }
  void block_verify(const BlockVerifyParams& p) override { launch_block_verify(p, stream_, &group_workspace_); }
  void tree_verify(const TreeVerifyParams& p) override { launch_tree_verify(p, stream_, &group_workspace_); }
  void ranked_children(const RankedChildrenParams& p) override { launch_ranked_children(p, stream_); }
  void sibling_draws(const SiblingDrawParams& p) override { launch_sibling_draws(p, stream_); }
  void pending_counts(const PendingCountsParams& p) override { launch_pending_counts(p, stream_); }
  void law_values(const LawValuesParams& p) override { launch_law_values(p, stream_); }
  int64_t free_device_memory() const override {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return static_cast<int64_t>(free);
  }

 protected:
  void wait_for_stream() override { cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  void copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (bytes)
      cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync (upload)");
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (bytes)
      cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (download)");
  }
  void copy_device_to_device(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                             size_t height) override {
    cuda_check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, height, cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpy2DAsync (within the device)");
  }
  void* allocate_device(size_t bytes) override {
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, bytes), "cudaMalloc");
    return p;
  }
  void free_device(void* p) override { cudaFree(p); }
  void* allocate_host(size_t bytes) override {
    void* p = nullptr;
    cuda_check(cudaMallocHost(&p, bytes), "cudaMallocHost");
    return p;
  }
  void free_host(void* p) override { cudaFreeHost(p); }

 private:
  cudaStream_t stream_ = nullptr;
  bool owned_ = true;
  GroupWorkspace group_workspace_;  // the global-memory exchange's, kept across this stream's launches
};

}  // namespace

std::unique_ptr<KernelStream> make_cuda_kernel_stream(std::optional<void*> borrowed) {
  return std::make_unique<CudaStream>(borrowed);
}

}  // namespace specula
