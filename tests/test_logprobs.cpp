// Log-probabilities for inspection: top-n of the raw and processed distributions and the sampled token's.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "draft/model_drafter.h"
#include "harness/generation/generator.h"
#include "speculative_fixtures.h"
#include "tests/support/mutant_switch.h"
#include "verify/sampling/logprobs.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

TEST_CASE("logprobs report the raw and processed top-n and the sampled token", "[sampler][logprobs]") {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f};
  SamplingParams s;
  s.top_k = 2;
  const SamplerPipeline pipeline(s, 4);
  const std::vector<float> probs = pipeline.process(logits, {});
  const Logprobs lp = compute_logprobs(logits.data(), probs.data(), 4, 1, 3);
  // Raw: log softmax of (2, 1, 0, -1).
  const double z = std::log(std::exp(2.0) + std::exp(1.0) + std::exp(0.0) + std::exp(-1.0));
  REQUIRE(lp.top_raw.size() == 3);
  CHECK(lp.top_raw[0].token == 0);
  CHECK(lp.top_raw[0].logprob == Approx(2.0 - z));
  CHECK(lp.top_raw[2].token == 2);
  CHECK(lp.top_raw[2].logprob == Approx(0.0 - z));
  // Processed: top-2 leaves tokens 0 and 1 with softmax(2, 1).
  const double z2 = std::log(std::exp(2.0) + std::exp(1.0));
  CHECK(lp.top_processed[0].token == 0);
  CHECK(lp.top_processed[0].logprob == Approx(2.0 - z2));
  CHECK(lp.top_processed[1].logprob == Approx(1.0 - z2));
  CHECK(std::isinf(lp.top_processed[2].logprob));  // removed by top-k
  CHECK(lp.sampled_raw.logprob == Approx(1.0 - z));
  CHECK(lp.sampled_processed.logprob == Approx(1.0 - z2));
}

TEST_CASE("--logprobs' processed top-n lists the kept tokens only, even when asked for more", "[sampler][logprobs]") {
  // top-k 3 keeps three tokens of eight; asking for all eight must not list the five removed ones (p = 0) as
  // if they were candidates. Reference: the row's three largest logits, softmax at T in float64.
  const int32_t V = 8;
  const float T = 0.9f;
  const testing::TablePair pair = testing::random_pair(1, V, 11, 1.5, 0.5);
  SamplingParams params;
  params.temperature = T;
  params.top_k = 3;
  const std::vector<Token> prompt = {1};
  const auto run = [&](bool speculative) {
    GenerationConfig config;
    config.max_new_tokens = 12;
    config.seed = 5;
    config.logprobs = V;
    std::shared_ptr<const DrafterFactory> drafter;
    if (speculative) {
      config.method = VerifyMethod::chain;
      config.num_draft_tokens = 3;
      drafter = std::make_shared<ModelDrafterFactory>(pair.draft, params);
    }
    GenerationMetrics metrics;
    return Generator(pair.target, params, drafter, config).generate(prompt, 0, metrics);
  };
  for (const bool speculative : {false, true}) {
    INFO((speculative ? "chain" : "ar"));
    const SequenceOutput out = run(speculative);
    REQUIRE(out.logprobs.size() == out.tokens.size());
    std::vector<Token> context = prompt;
    for (size_t i = 0; i < out.tokens.size(); ++i) {
      const float* logits = pair.target->row_after(context);
      std::vector<int32_t> order(V);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
      double z = 0.0;
      for (int k = 0; k < 3; ++k) z += std::exp((static_cast<double>(logits[order[k]]) - logits[order[0]]) / T);
      const std::vector<TokenLogprob>& top = out.logprobs[i].top;
      REQUIRE(top.size() == 3u);
      for (int k = 0; k < 3; ++k) {
        CHECK(top[k].token == order[k]);
        CHECK(top[k].logprob == Approx((logits[order[k]] - logits[order[0]]) / T - std::log(z)).margin(1e-5));
      }
      context.push_back(out.tokens[i]);
    }
  }
  const ScopedMutant mutant(Mutant::logprobs_top_lists_removed);
  const SequenceOutput broken = run(false);
  REQUIRE_FALSE(broken.logprobs.empty());
  CHECK(broken.logprobs[0].top.size() == static_cast<size_t>(V));  // the removed tokens listed at log 0 = -inf
}
