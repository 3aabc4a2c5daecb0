// The baseline beside `specula bench sampler --device cuda` (kernels/cuda_bench.h): the fused sampler's work for
// one of its settings done by LibTorch's tensor operations on whole [B, V] tensors, as a sampler written in
// PyTorch does it (vLLM's and Hugging Face's warpers): torch::where for the repetition penalty, arithmetic on a
// count tensor for frequency and presence, a division for temperature, exp against the maximum for min-p, topk
// for top-k, sort + softmax + cumsum + scatter for top-p, softmax, multinomial. Torch-free header: the
// `specula` executable reaches these through the LibTorch module's entries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cuda_bench.h"

namespace specula::bench {

// Mean microseconds per batch of the LibTorch pipeline for `setting` on [batch, vocab] random rows (with the
// benchmark's histories when the setting has penalties) on `device` ("cuda" or "cpu"): 3 untimed batches, then
// `iterations` back to back and one synchronisation (launch overheads overlap, L2 stays warm: both favour the
// baseline over the kernel, which is timed alone after an L2 flush). Throws Error when the device is unusable.
double time_torch_sampler(const SamplerBenchSetting& setting, int32_t vocab, int32_t batch, const std::string& device,
                          int iterations);

// The LibTorch pipeline's processed distribution [B, V] of host rows on the CPU: logits [B, V], output counts
// [B, V] and prompt membership [B, V] (0/1; used with penalties). What the tests compare with the sampler's.
std::vector<float> torch_sampler_probs(const SamplerBenchSetting& setting, const std::vector<float>& logits,
                                       const std::vector<int32_t>& counts, const std::vector<uint8_t>& in_prompt,
                                       int32_t vocab);

}  // namespace specula::bench
