#include "harness/bench/torch_bench_device.h"

#include "kernels/shared/error.h"

namespace specula::bench {

torch::Device torch_bench_device(const std::string& device, const char* what) {
  if (device == "cpu") return torch::kCPU;
  if (device != "cuda") fail(what, ": device must be cpu or cuda, got '", device, "'");
  if (!torch::cuda::is_available()) fail("no CUDA device: this LibTorch has no CUDA, or no GPU is visible");
  return torch::kCUDA;
}

void wait_for(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

}  // namespace specula::bench
