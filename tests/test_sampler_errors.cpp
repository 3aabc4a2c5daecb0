// Bad input to the sampler pipeline: every case throws specula::Error with a message that names the
// parameter (and the offending value or token), so a user can fix it without reading code.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/shared/error.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;
using Catch::Contains;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::nanf("");

// Both the type and the message: a std::out_of_range from a stray .at() would name nothing useful.
#define REQUIRE_ERROR(expr, matcher)    \
  do {                                  \
    REQUIRE_THROWS_AS(expr, Error);     \
    REQUIRE_THROWS_WITH(expr, matcher); \
  } while (false)

SamplerPipeline make(const SamplingParams& s, int32_t vocab = 4) { return SamplerPipeline(s, vocab); }

template <typename Setter>
SamplingParams with(Setter set) {
  SamplingParams s;
  set(s);
  return s;
}

const std::vector<float> kLogits = {0.5f, 1.0f, -0.25f, 2.0f};

}  // namespace

TEST_CASE("NaN and +inf logits are rejected with the token named; -inf is a removed token", "[sampler][errors]") {
  const SamplerPipeline pipeline = make(SamplingParams{});
  REQUIRE_ERROR(pipeline.process({0, kNaN, 0, 0}, TokenHistory{}),
                Contains("logits") && Contains("token 1") && Contains("NaN"));
  REQUIRE_ERROR(pipeline.process({0, 0, 0, kInf}, TokenHistory{}),
                Contains("logits") && Contains("token 3") && Contains("+inf"));
  REQUIRE_NOTHROW(pipeline.process({-kInf, 0, 0, 0}, TokenHistory{}));
  REQUIRE_ERROR(pipeline.process({0, 0, 0}, TokenHistory{}), Contains("3 entries") && Contains("vocabulary has 4"));
  // Greedy rows check their logits too.
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  REQUIRE_ERROR(make(greedy).process({kNaN, 0, 0, 0}, TokenHistory{}), Contains("token 0") && Contains("NaN"));
}

TEST_CASE("logits that overflow float32 inside the pipeline are an error naming the stage, never NaN",
          "[sampler][errors]") {
  const std::vector<float> huge = {3e38f, 0.0f, 1.0f, 0.0f};
  REQUIRE_ERROR(make(with([](SamplingParams& s) {
                  s.logit_bias = {{0, 3e38f}};
                })).process(huge, TokenHistory{}),
                Contains("token 0") && Contains("logit_bias and the penalties"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.repetition_penalty = 0.5f; })).process(huge, TokenHistory{{0}, {}}),
                Contains("token 0") && Contains("penalties"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.temperature = 0.5f; })).process(huge, TokenHistory{}),
                Contains("token 0") && Contains("after temperature (0.5)"));
  // Large but representable: fine.
  const std::vector<float> p =
      make(with([](SamplingParams& s) { s.temperature = 2.0f; })).process(huge, TokenHistory{});
  CHECK(p[0] == 1.0f);
}

TEST_CASE("large and shifted logits: the softmax is shift-invariant, finite and sums to 1", "[sampler]") {
  // A softmax that does not subtract the maximum overflows at logits + 150 (float32 exp overflows past 88) and
  // underflows to 0/0 at logits - 200: this test fails for it.
  const int32_t V = 64;
  std::vector<float> base(V);
  for (int32_t i = 0; i < V; ++i) base[i] = static_cast<float>(20.0 * std::sin(1.7 * i));  // in [-20, 20]
  for (float temperature : {1.0f, 0.05f}) {
    const SamplerPipeline pipeline = make(with([&](SamplingParams& s) { s.temperature = temperature; }), V);
    const std::vector<float> p = pipeline.process(base, TokenHistory{});
    double total = 0.0;
    for (float x : p) {
      CHECK(std::isfinite(x));
      total += x;
    }
    CHECK(total == Approx(1.0).epsilon(1e-5));
    for (float shift : {150.0f, -200.0f, 1e4f}) {
      INFO("T " << temperature << " shift " << shift);
      std::vector<float> shifted(base);
      for (float& x : shifted) x += shift;
      const std::vector<float> q = pipeline.process(shifted, TokenHistory{});
      // float32 rounds logit + shift to the shift's ulp (1e-3 at 1e4), which temperature magnifies by 1 / T.
      const double tolerance = (shift == 1e4f ? 2e-3 : 3e-5) / temperature;
      for (int32_t i = 0; i < V; ++i) CHECK(std::fabs(q[i] - p[i]) <= tolerance * std::max(p[i], 1e-3f));
    }
  }
}

TEST_CASE("min_tokens counts the output only, never the prompt", "[sampler]") {
  // A pipeline that counted prompt + output would allow the stop token at once here (the prompt has 3 tokens).
  const SamplerPipeline pipeline = make(with([](SamplingParams& s) {
    s.min_tokens = 2;
    s.stop_tokens = {0};
  }));
  const std::vector<float> logits = {2.0f, 0.0f, 0.5f, 0.1f};
  const std::vector<Token> prompt = {1, 2, 3};
  CHECK(pipeline.process(logits, TokenHistory{prompt, {}})[0] == 0.0f);
  CHECK(pipeline.process(logits, TokenHistory{prompt, {3}})[0] == 0.0f);
  CHECK(pipeline.process(logits, TokenHistory{prompt, {3, 2}})[0] > 0.5f);
}

TEST_CASE("temperature < 0, not finite, or in (0, kMinTemperature) is rejected", "[sampler][errors]") {
  for (float t : {-0.5f, -kInf, kInf, kNaN, 1e-4f, 1e-45f}) {
    INFO("temperature " << t);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.temperature = t; })), Contains("temperature"));
  }
  REQUIRE_NOTHROW(make(with([](SamplingParams& s) { s.temperature = 0.0f; })));
  REQUIRE_NOTHROW(make(with([](SamplingParams& s) { s.temperature = kMinTemperature; })));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.dynatemp_range = -0.1f; })), Contains("dynatemp_range"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.dynatemp_exponent = 0.0f; })), Contains("dynatemp_exponent"));
}

TEST_CASE("top_p outside (0, 1] is rejected", "[sampler][errors]") {
  for (float p : {0.0f, -0.1f, 1.5f, 1.0000001f, kNaN, kInf}) {
    INFO("top_p " << p);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.top_p = p; })), Contains("top_p") && Contains("(0, 1]"));
  }
  REQUIRE_NOTHROW(make(with([](SamplingParams& s) { s.top_p = 1.0f; })));
  REQUIRE_NOTHROW(make(with([](SamplingParams& s) { s.top_p = 1e-6f; })));
  // The other mass-like parameters share the rule.
  for (float v : {0.0f, 1.5f, kNaN}) {
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.typical_p = v; })), Contains("typical_p"));
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.tfs_z = v; })), Contains("tfs_z"));
  }
}

TEST_CASE("min_p outside [0, 1] is rejected", "[sampler][errors]") {
  for (float m : {-0.1f, 1.01f, kNaN, kInf}) {
    INFO("min_p " << m);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.min_p = m; })), Contains("min_p") && Contains("[0, 1]"));
  }
  REQUIRE_NOTHROW(make(with([](SamplingParams& s) { s.min_p = 0.0f; })));
  REQUIRE_NOTHROW(make(with([](SamplingParams& s) { s.min_p = 1.0f; })));
}

TEST_CASE("repetition_penalty <= 0 (or not finite) is rejected; other penalties must be finite", "[sampler][errors]") {
  for (float r : {0.0f, -1.0f, kNaN, kInf}) {
    INFO("repetition_penalty " << r);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.repetition_penalty = r; })), Contains("repetition_penalty"));
  }
  for (float v : {kNaN, kInf, -kInf}) {
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.frequency_penalty = v; })), Contains("frequency_penalty"));
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.presence_penalty = v; })), Contains("presence_penalty"));
  }
}

TEST_CASE("other out-of-range settings name their parameter", "[sampler][errors]") {
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.top_k = -2; })), Contains("top_k") && Contains("-2"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.mirostat = 1; })), Contains("mirostat"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.mirostat_tau = 0.0f; })), Contains("mirostat_tau"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.mirostat_eta = -1.0f; })), Contains("mirostat_eta"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.min_tokens = -1; })), Contains("min_tokens"));
  REQUIRE_ERROR(make(SamplingParams{}, 0), Contains("vocabulary size"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.logit_bias = {{1, kNaN}}; })), Contains("logit_bias"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.logit_bias = {{1, kInf}}; })), Contains("logit_bias"));
  REQUIRE_ERROR(make(with([](SamplingParams& s) { s.bad_words = {{}}; })), Contains("bad_words") && Contains("empty"));
  REQUIRE_ERROR(parse_filter_order("min_p,bogus"), Contains("sampler_order") && Contains("'bogus'"));
  REQUIRE_ERROR(parse_filter_order("top_k, top_k"), Contains("twice"));
  REQUIRE_ERROR(parse_filter_order("top_p,nope", "draft_sampler_order"), Contains("draft_sampler_order"));
}

TEST_CASE("token ids outside the vocabulary are rejected with the parameter named", "[sampler][errors]") {
  for (Token bad : {4, -1, 1000}) {
    INFO("token " << bad);
    const auto out_of_vocab = Contains("outside the vocabulary");
    REQUIRE_ERROR(make(with([&](SamplingParams& s) {
                    s.allowed_tokens = {0, bad};
                  })),
                  Contains("allowed_tokens") && out_of_vocab);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.banned_tokens = {bad}; })),
                  Contains("banned_tokens") && out_of_vocab);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) { s.stop_tokens = {bad}; })),
                  Contains("stop_tokens") && out_of_vocab);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) {
                    s.logit_bias = {{bad, 1.0f}};
                  })),
                  Contains("logit_bias") && out_of_vocab);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) {
                    s.bad_words = {{1, bad}};
                  })),
                  Contains("bad_words") && out_of_vocab);
    REQUIRE_ERROR(make(with([&](SamplingParams& s) {
                    s.bad_words = {{bad, 1}};
                  })),
                  Contains("bad_words") && out_of_vocab);
  }
}

TEST_CASE("history token ids outside the vocabulary are rejected, not read out of bounds", "[sampler][errors]") {
  SamplingParams s;
  s.repetition_penalty = 1.3f;
  s.frequency_penalty = 0.5f;
  const SamplerPipeline pipeline = make(s);
  for (Token bad : {4, -1, 1 << 20}) {
    INFO("token " << bad);
    TokenHistory h;
    h.prompt = {0, bad};
    REQUIRE_ERROR(pipeline.process(kLogits, h), Contains("prompt") && Contains("outside the vocabulary"));
    h.prompt = {0};
    h.output = {bad};
    REQUIRE_ERROR(pipeline.process(kLogits, h), Contains("output") && Contains("outside the vocabulary"));
  }
  const std::vector<float> probs = pipeline.process(kLogits, TokenHistory{});
  REQUIRE_ERROR(pipeline.advance(TokenHistory{}, 4, probs.data()), Contains("outside the vocabulary"));
}

TEST_CASE("settings that leave no token are rejected", "[sampler][errors]") {
  const auto no_token = Contains("no token");
  // Detected from the parameters alone.
  REQUIRE_ERROR(make(with([](SamplingParams& s) {
                  s.allowed_tokens = {1, 2};
                  s.banned_tokens = {2, 1};
                })),
                no_token && Contains("allowed_tokens"));
  // Detected per row, once the masks meet the logits and the history.
  auto process = [](const SamplingParams& s, const std::vector<float>& logits, const TokenHistory& h = {}) {
    return make(s).process(logits, h);
  };
  REQUIRE_ERROR(process(with([](SamplingParams& s) { s.banned_tokens = {0, 1, 2, 3}; }), kLogits), no_token);
  REQUIRE_ERROR(process(SamplingParams{}, {-kInf, -kInf, -kInf, -kInf}), no_token);
  REQUIRE_ERROR(process(with([](SamplingParams& s) { s.allowed_tokens = {2}; }), {0, 0, -kInf, 0}), no_token);
  REQUIRE_ERROR(process(with([](SamplingParams& s) {
                          s.banned_tokens = {0, 1, 2};
                          s.logit_bias = {{3, -kInf}};
                        }),
                        kLogits),
                no_token);
  REQUIRE_ERROR(process(with([](SamplingParams& s) {
                          s.min_tokens = 3;
                          s.stop_tokens = {0, 1, 2, 3};
                        }),
                        kLogits),
                no_token && Contains("min_tokens"));
  TokenHistory ends_with_1;
  ends_with_1.output = {1};
  REQUIRE_ERROR(process(with([](SamplingParams& s) {
                          s.banned_tokens = {0, 1, 2};
                          s.bad_words = {{1, 3}};
                        }),
                        kLogits, ends_with_1),
                no_token && Contains("bad_words"));
  // The same settings are fine once min_tokens is reached.
  TokenHistory three;
  three.output = {0, 0, 0};
  REQUIRE_NOTHROW(process(with([](SamplingParams& s) {
                            s.min_tokens = 3;
                            s.stop_tokens = {0, 1, 2, 3};
                          }),
                          kLogits, three));
}

TEST_CASE("batch errors name the row; selectors reject a distribution with no mass", "[sampler][errors]") {
  const SamplerPipeline pipeline = make(SamplingParams{});
  const std::vector<float> logits = {0, 1, 2, 3, 0, kNaN, 2, 3};
  const SamplerPipeline* pipelines[] = {&pipeline, &pipeline};
  const TokenHistory h;
  const TokenHistory* histories[] = {&h, &h};
  std::vector<float> probs(8);
  REQUIRE_ERROR(process_batch(logits.data(), 2, 4, pipelines, histories, probs.data()),
                Contains("row 1") && Contains("NaN"));
  const std::vector<float> zeros = {0, 0, 0};
  REQUIRE_ERROR(sample_categorical(zeros.data(), 3, RandomKey{1, 0, 0}), Contains("no mass"));
}
