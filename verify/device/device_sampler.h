// The fused sampler on a CUDA device from host arrays: copies a SamplerBatch and its logits to the device,
// launches the kernel, and copies the processed distributions, tokens and statuses back. What
// `specula sample --device cuda` runs; the same (seed, stream, offset) draws as the CPU path, so its output
// is the CPU's output. Throws "no CUDA device: ..." where there is none.
#pragma once

#include <cstdint>

#include "verify/device/sampler_batch.h"

namespace specula {

// logits [B, V] host; probs [B, V] and tokens [B] host outputs. Throws Error on any CUDA failure and on a
// failed row (check_sampler_status).
void run_fused_sampler_on_device(const SamplerBatch& batch, const float* logits, float* probs, int32_t* tokens);

}  // namespace specula
