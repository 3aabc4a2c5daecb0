#include "harness/bench/torch_sampler_baseline.h"

#include <limits>
#include <tuple>

#include "harness/bench/torch_bench_device.h"
#include "kernels/shared/error.h"

namespace specula::bench {
namespace {

// The benchmark's penalties (kernels/cuda_bench.h, SamplerBenchSetting).
constexpr float kRepetition = 1.1f, kFrequency = 0.2f, kPresence = 0.1f;

struct Inputs {
  torch::Tensor logits;  // [B, V] float
  torch::Tensor counts;  // [B, V] float: occurrences in the output
  torch::Tensor seen;    // [B, V] bool: in the prompt or the output (repetition penalty)
};

// The fused sampler's stages in its order: penalties, temperature, then min-p, top-k, top-p, softmax.
torch::Tensor process(const SamplerBenchSetting& s, const Inputs& in) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  torch::Tensor x = in.logits;
  if (s.penalties) {
    x = torch::where(in.seen, torch::where(x > 0, x / kRepetition, x * kRepetition), x);
    x = x - in.counts * kFrequency - (in.counts > 0).to(torch::kFloat) * kPresence;
  }
  if (s.temperature > 0.0f) x = x / s.temperature;
  if (s.min_p > 0.0f) x = x.masked_fill(torch::exp(x - std::get<0>(x.max(-1, true))) < s.min_p, neg_inf);
  if (s.top_k > 0) {
    const torch::Tensor kth = std::get<0>(x.topk(s.top_k, -1)).narrow(1, s.top_k - 1, 1);
    x = x.masked_fill(x < kth, neg_inf);
  }
  if (s.top_p < 1.0f) {
    // Keep a token while the mass strictly above it (descending order) is below top_p.
    const auto [sorted, order] = x.sort(-1, /*descending=*/true);
    const torch::Tensor p = sorted.softmax(-1);
    const torch::Tensor drop_sorted = (p.cumsum(-1) - p) >= s.top_p;
    x = x.masked_fill(torch::zeros_like(drop_sorted).scatter(1, order, drop_sorted), neg_inf);
  }
  return x.softmax(-1);
}

}  // namespace

double time_torch_sampler(const SamplerBenchSetting& setting, int32_t vocab, int32_t batch, const std::string& device,
                          int iterations) {
  if (vocab < 1 || batch < 1 || iterations < 1)
    fail("LibTorch sampler baseline: vocab, batch and iterations must be >= 1");
  const torch::Device d = torch_bench_device(device, "LibTorch sampler baseline");
  torch::NoGradGuard no_grad;
  torch::manual_seed(20260101);
  Inputs in;
  in.logits = (torch::randn({batch, vocab}) * 2.0f).to(d);
  // 256 output tokens per row (counts) and 64 prompt tokens, as the kernel's benchmark.
  const torch::Tensor output = torch::randint(vocab, {batch, 256}, torch::kLong);
  const torch::Tensor prompt = torch::randint(vocab, {batch, 64}, torch::kLong);
  torch::Tensor counts = torch::zeros({batch, vocab});
  counts.scatter_add_(1, output, torch::ones({batch, 256}));
  torch::Tensor seen = torch::zeros({batch, vocab}, torch::kBool);
  seen.scatter_(1, prompt, true);
  in.counts = counts.to(d);
  in.seen = (seen | (counts > 0)).to(d);
  const auto once = [&] { return process(setting, in).multinomial(1); };
  return mean_us_per_batch(once, d, iterations);
}

std::vector<float> torch_sampler_probs(const SamplerBenchSetting& setting, const std::vector<float>& logits,
                                       const std::vector<int32_t>& counts, const std::vector<uint8_t>& in_prompt,
                                       int32_t vocab) {
  const int64_t batch = static_cast<int64_t>(logits.size()) / vocab;
  if (vocab < 1 || batch * vocab != static_cast<int64_t>(logits.size()) || counts.size() != logits.size() ||
      in_prompt.size() != logits.size())
    fail("LibTorch sampler baseline: logits, counts and in_prompt must all be [B, ", vocab, "]");
  torch::NoGradGuard no_grad;
  Inputs in;
  in.logits = torch::from_blob(const_cast<float*>(logits.data()), {batch, vocab}, torch::kFloat).clone();
  in.counts = torch::from_blob(const_cast<int32_t*>(counts.data()), {batch, vocab}, torch::kInt).to(torch::kFloat);
  in.seen = torch::from_blob(const_cast<uint8_t*>(in_prompt.data()), {batch, vocab}, torch::kUInt8).to(torch::kBool) |
            (in.counts > 0);
  const torch::Tensor probs = process(setting, in).contiguous();
  return std::vector<float>(probs.data_ptr<float>(), probs.data_ptr<float>() + probs.numel());
}

}  // namespace specula::bench
