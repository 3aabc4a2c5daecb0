#include "verify/device/device_sampler.h"

#include <algorithm>

#include "kernels/shared/error.h"
#include "verify/device/sampler_batch.h"

namespace specula {
namespace {

enum Slot : int { kLogits, kRows, kAllowed, kBanned, kPrompt, kCounts, kBias, kProbs, kTokens, kStatus };

}  // namespace

RowSampler::RowSampler(Device device, const SamplingParams& params, const TokenHistory& history,
                       const std::vector<float>& logits, const EmulationOptions& emulation)
    : stream_(make_kernel_stream(device, emulation)) {
  const int32_t V = static_cast<int32_t>(logits.size());
  // One row drawn from many times, with no device array of ids to count a pending path from.
  if (!history.pending_ids.empty()) fail("row sampler: the history has ids still in device memory");
  const SamplerBatch one(V, {SamplerBatchRow{&params, &history, RandomKey{}}});
  row_ = one.rows[0];
  KernelStream& s = *stream_;
  inputs_.logits = s.upload(kLogits, logits);
  inputs_.allowed_bitmap = s.upload(kAllowed, one.allowed);
  inputs_.banned_bitmap = s.upload(kBanned, one.banned);
  inputs_.prompt_bitmap = s.upload(kPrompt, one.prompt);
  inputs_.output_counts = s.upload(kCounts, one.output_counts);
  inputs_.logit_bias = s.upload(kBias, one.logit_bias);
  inputs_.vocab = V;
  inputs_.shared_inputs = true;
  s.synchronize();  // the staging buffers may be reused by the first draw
}

SamplerKernelParams RowSampler::launch(uint64_t seed, uint64_t stream, uint64_t first, int32_t count) {
  KernelStream& s = *stream_;
  const size_t n = static_cast<size_t>(count), V = static_cast<size_t>(inputs_.vocab);
  SamplerRowParams* rows = s.host_array<SamplerRowParams>(kRows, n);
  for (size_t i = 0; i < n; ++i) {
    rows[i] = row_;
    rows[i].seed = seed;
    rows[i].stream = stream;
    rows[i].offset = first + i;
  }
  SamplerKernelParams p = inputs_;
  SamplerRowParams* d_rows = s.device_array<SamplerRowParams>(kRows, n);
  s.to_device(d_rows, rows, n * sizeof(SamplerRowParams));
  p.rows = d_rows;
  p.probs = s.device_array<float>(kProbs, n * V);  // each draw's scratch
  p.tokens = s.device_array<int32_t>(kTokens, n);
  p.status = s.device_array<int32_t>(kStatus, n);
  p.batch = count;
  s.fused_sampler(p);
  return p;
}

std::vector<int32_t> RowSampler::draw(uint64_t seed, uint64_t stream, uint64_t first, int32_t count) {
  if (count < 1) return {};
  KernelStream& s = *stream_;
  const SamplerKernelParams p = launch(seed, stream, first, count);
  int32_t* tokens = s.host_array<int32_t>(kTokens, static_cast<size_t>(count));
  int32_t* status = s.host_array<int32_t>(kStatus, static_cast<size_t>(count));
  s.to_host(tokens, p.tokens, static_cast<size_t>(count) * sizeof(int32_t));
  s.to_host(status, p.status, static_cast<size_t>(count) * sizeof(int32_t));
  s.synchronize();
  check_sampler_status(status, count);
  return std::vector<int32_t>(tokens, tokens + count);
}

std::vector<float> RowSampler::distribution() {
  KernelStream& s = *stream_;
  const SamplerKernelParams p = launch(0, 0, 0, 1);
  const size_t V = static_cast<size_t>(inputs_.vocab);
  float* probs = s.host_array<float>(kProbs, V);
  int32_t* status = s.host_array<int32_t>(kStatus, 1);
  s.to_host(probs, p.probs, V * sizeof(float));
  s.to_host(status, p.status, sizeof(int32_t));
  s.synchronize();
  check_sampler_status(status, 1);
  return std::vector<float>(probs, probs + V);
}

}  // namespace specula
