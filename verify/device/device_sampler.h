// Many draws from one row's processed distribution on a device (`specula sample --device cuda|cuda-host`):
// the row's logits and its history's arrays are uploaded once and shared by every draw's block
// (SamplerKernelParams::shared_inputs); each draw has its own key, so draw i equals the CPU path's
// sample_categorical with the same key. Buffers persist across calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda_device.h"
#include "kernels/emulated_kernels.h"
#include "kernels/kernel_stream.h"
#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula {

class RowSampler {
 public:
  // Validates the params against the kernel (refused by name: typical_p, tfs_z, ...) and uploads the row.
  RowSampler(Device device, const SamplingParams& params, const TokenHistory& history, const std::vector<float>& logits,
             const EmulationOptions& emulation = {});

  // Draws [first, first + count) with keys (seed, stream, first + i). Throws Error on a failed row.
  std::vector<int32_t> draw(uint64_t seed, uint64_t stream, uint64_t first, int32_t count);
  // The processed distribution [V] (one draw's scratch row).
  std::vector<float> distribution();

 private:
  SamplerKernelParams launch(uint64_t seed, uint64_t stream, uint64_t first, int32_t count);

  std::unique_ptr<KernelStream> stream_;
  SamplerRowParams row_;  // the row's parameters; the key is set per draw
  SamplerKernelParams inputs_;
};

}  // namespace specula
