// The LibTorch baseline of `bench sampler --device cuda` does the fused sampler's work: on the CPU its processed
// distribution equals the sampler pipeline's for every benchmark setting (so the speedup compares like with
// like), and the comparison notices a baseline that skips a stage.
#include <torch/cuda.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "harness/bench/torch_sampler_baseline.h"
#include "kernels/cuda_bench.h"
#include "kernels/shared/error.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

namespace {

struct Rows {
  int32_t vocab = 0;
  std::vector<float> logits;
  std::vector<int32_t> counts;
  std::vector<uint8_t> in_prompt;
  std::vector<TokenHistory> histories;
};

Rows random_rows(int32_t vocab, int32_t batch, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_int_distribution<int32_t> token(0, vocab - 1);
  Rows r;
  r.vocab = vocab;
  r.logits.resize(static_cast<size_t>(batch) * vocab);
  for (float& x : r.logits) x = normal(rng);
  r.counts.assign(r.logits.size(), 0);
  r.in_prompt.assign(r.logits.size(), 0);
  for (int32_t b = 0; b < batch; ++b) {
    TokenHistory h;
    for (int i = 0; i < 40; ++i) h.output.push_back(token(rng));
    for (int i = 0; i < 20; ++i) h.prompt.push_back(token(rng));
    for (Token t : h.output) ++r.counts[static_cast<size_t>(b) * vocab + t];
    for (Token t : h.prompt) r.in_prompt[static_cast<size_t>(b) * vocab + t] = 1;
    r.histories.push_back(h);
  }
  return r;
}

SamplingParams params_of(const SamplerBenchSetting& s) {
  SamplingParams p;
  if (s.temperature > 0.0f) p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  if (s.penalties) {
    p.repetition_penalty = 1.1f;
    p.frequency_penalty = 0.2f;
    p.presence_penalty = 0.1f;
  }
  return p;
}

struct Agreement {
  double max_abs_diff = 0.0;
  int support_mismatches = 0;
};

Agreement compare(const Rows& r, const SamplingParams& params, const std::vector<float>& torch_probs) {
  const SamplerPipeline pipeline(params, r.vocab);
  Agreement a;
  for (size_t b = 0; b < r.histories.size(); ++b) {
    const std::vector<float> row(r.logits.begin() + static_cast<std::ptrdiff_t>(b * r.vocab),
                                 r.logits.begin() + static_cast<std::ptrdiff_t>((b + 1) * r.vocab));
    const std::vector<float> expected = pipeline.process(row, r.histories[b]);
    for (int32_t i = 0; i < r.vocab; ++i) {
      const float got = torch_probs[b * r.vocab + static_cast<size_t>(i)];
      a.max_abs_diff = std::max(a.max_abs_diff, static_cast<double>(std::fabs(got - expected[i])));
      a.support_mismatches += (got > 0.0f) != (expected[i] > 0.0f);
    }
  }
  return a;
}

}  // namespace

TEST_CASE("the LibTorch sampler baseline computes the sampler pipeline's distribution for every setting",
          "[device][sampler]") {
  const Rows r = random_rows(1000, 6, 11);
  for (const SamplerBenchSetting& s : sampler_bench_settings()) {
    const Agreement a = compare(r, params_of(s), bench::torch_sampler_probs(s, r.logits, r.counts, r.in_prompt, 1000));
    INFO(s.name);
    CHECK(a.support_mismatches == 0);
    CHECK(a.max_abs_diff < 1e-5);
  }
}

TEST_CASE("the baseline comparison notices a skipped stage", "[device][sampler]") {
  const Rows r = random_rows(1000, 6, 12);
  const SamplerBenchSetting full = sampler_bench_settings().back();
  REQUIRE(std::string(full.name) == "sampler/full");
  for (int skipped = 0; skipped < 3; ++skipped) {
    SamplerBenchSetting broken = full;
    if (skipped == 0) broken.top_p = 1.0f;
    if (skipped == 1) broken.top_k = 0;
    if (skipped == 2) broken.penalties = false;
    const Agreement a =
        compare(r, params_of(full), bench::torch_sampler_probs(broken, r.logits, r.counts, r.in_prompt, 1000));
    INFO("stage " << skipped);
    CHECK((a.support_mismatches > 0 || a.max_abs_diff > 1e-3));
  }
}

TEST_CASE("the baseline times on the CPU, and names the missing GPU", "[device][sampler]") {
  const SamplerBenchSetting s = sampler_bench_settings().back();
  CHECK(bench::time_torch_sampler(s, 512, 2, "cpu", 2) > 0.0);
  CHECK_THROWS_WITH(bench::time_torch_sampler(s, 512, 2, "tpu", 2), Catch::Contains("cpu or cuda"));
  if (!torch::cuda::is_available())
    CHECK_THROWS_WITH(bench::time_torch_sampler(s, 512, 2, "cuda", 2), Catch::Contains("no CUDA device"));
}
