// Log-probabilities for inspection: top-n of the raw and processed distributions and the sampled token's.
#include <catch2/catch.hpp>
#include <cmath>

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
