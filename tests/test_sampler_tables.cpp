// Battery A (tests/TESTING.md): the processed distribution, exactly. Small hand-checkable tables per stage, in the
// style of llama.cpp's test-sampling.cpp (given logits and a setting, the exact surviving probabilities),
// then random configs compared with the independent float64 reference (tests/reference_pipeline.h).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tests/reference_pipeline.h"
#include "tests/support/mutant_switch.h"
#include "verify/sampling/logits_processors.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;
using Catch::Matchers::Contains;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax is `probs` (0 -> -inf).
std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> out;
  for (double p : probs) out.push_back(p > 0.0 ? static_cast<float>(std::log(p)) : -kInf);
  return out;
}

std::vector<double> normalized(std::vector<double> w) {
  double z = 0.0;
  for (double v : w) z += v;
  for (double& v : w) v /= z;
  return w;
}

// exp of each entry, normalised: the softmax of hand-written logits.
std::vector<double> softmax_of(const std::vector<double>& logits) {
  std::vector<double> w;
  for (double l : logits) w.push_back(std::isinf(l) ? 0.0 : std::exp(l));
  return normalized(w);
}

std::string show(const std::vector<double>& v) {
  std::ostringstream os;
  os.precision(9);
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "[") << v[i];
  return os.str() + "]";
}

std::vector<double> run(const std::vector<float>& logits, const SamplingParams& s, const TokenHistory& h = {}) {
  const SamplerPipeline pipeline(s, static_cast<int32_t>(logits.size()));
  const std::vector<float> p = pipeline.process(logits, h);
  return std::vector<double>(p.begin(), p.end());
}

// Every probability within tol; a removed token (expected 0) must be exactly 0.
void check_probs(const std::vector<double>& actual, const std::vector<double>& expected, double tol = 1e-6) {
  INFO("actual   " << show(actual));
  INFO("expected " << show(expected));
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("token " << i);
    if (expected[i] == 0.0)
      CHECK(actual[i] == 0.0);
    else
      CHECK(std::fabs(actual[i] - expected[i]) <= tol);
  }
}

// The table, checked against the hand value AND the reference (so the reference itself is pinned by hand).
void check_table(const std::vector<float>& logits, const SamplingParams& s, const TokenHistory& h,
                 const std::vector<double>& expected) {
  check_probs(run(logits, s, h), expected);
  check_probs(reference::probs(logits, s, h), expected, 1e-7);  // float32 inputs: log p rounded
}
void check_table(const std::vector<float>& logits, const SamplingParams& s, const std::vector<double>& expected) {
  check_table(logits, s, TokenHistory{}, expected);
}

TokenHistory history(std::vector<Token> prompt, std::vector<Token> output) {
  TokenHistory h;
  h.prompt = std::move(prompt);
  h.output = std::move(output);
  return h;
}

const std::vector<double> kP4 = {0.1, 0.2, 0.3, 0.4};

}  // namespace

TEST_CASE("top_k keeps logits >= the k-th largest, ties at the boundary kept", "[sampler][table]") {
  SamplingParams s;
  const auto L = log_of(kP4);
  s.top_k = 1;
  check_table(L, s, {0, 0, 0, 1});
  s.top_k = 3;
  check_table(L, s, normalized({0, 2, 3, 4}));
  s.top_k = 4;
  check_table(L, s, kP4);
  s.top_k = 9;  // larger than V: nothing removed
  check_table(L, s, kP4);
  s.top_k = 0;
  check_table(L, s, kP4);
  s.top_k = -1;
  check_table(L, s, kP4);

  // Ties: both tokens at the boundary survive, whatever k says.
  const std::vector<float> tied = {1, 2, 2, 0};
  s.top_k = 1;
  check_table(tied, s, {0, 0.5, 0.5, 0});
  s.top_k = 2;
  check_table(tied, s, {0, 0.5, 0.5, 0});
  s.top_k = 3;
  check_table(tied, s, softmax_of({1, 2, 2, -INFINITY}));
  // -inf inputs are not candidates (and are not "the k-th largest").
  s.top_k = 1;
  check_table({-kInf, 0, -kInf, 0}, s, {0, 0.5, 0, 0.5});
  s.top_k = 2;
  check_table({-kInf, 1, -kInf, 0, -kInf}, s, softmax_of({-INFINITY, 1, -INFINITY, 0, -INFINITY}));
}

TEST_CASE("top_p keeps x iff the mass of strictly more probable tokens is < P (crossing token kept)",
          "[sampler][table]") {
  SamplingParams s;
  const auto L = log_of(kP4);
  s.top_p = 0.35f;
  check_table(L, s, {0, 0, 0, 1});
  s.top_p = 0.5f;  // 0.4 < 0.5, so 0.3 (which crosses 0.5) is kept; 0.7 >= 0.5, so 0.2 goes
  check_table(L, s, normalized({0, 0, 3, 4}));
  s.top_p = 0.75f;
  check_table(L, s, normalized({0, 2, 3, 4}));
  s.top_p = 0.95f;
  check_table(L, s, kP4);
  s.top_p = 1.0f;
  check_table(L, s, kP4);

  // Ties share a fate.
  const auto tied = log_of({0.2, 0.2, 0.2, 0.4});
  s.top_p = 0.5f;
  check_table(tied, s, {0.2, 0.2, 0.2, 0.4});
  s.top_p = 0.3f;
  check_table(tied, s, {0, 0, 0, 1});
  s.top_p = 0.45f;
  check_table(log_of({0.3, 0.3, 0.4}), s, {0.3, 0.3, 0.4});
  // -inf inputs.
  const auto holes = log_of({0, 0.25, 0.75, 0});
  s.top_p = 0.5f;
  check_table(holes, s, {0, 0, 1, 0});
  s.top_p = 0.8f;
  check_table(holes, s, {0, 0.25, 0.75, 0});
  // Probabilities are recomputed from the logits after temperature: T = 0.5 squares them,
  // (1, 4, 9, 16) / 30, so P = 0.75 now keeps only 16/30 and 9/30.
  s.temperature = 0.5f;
  s.top_p = 0.75f;
  check_table(L, s, normalized({0, 0, 9, 16}));
}

TEST_CASE("min_p keeps p >= m * max p", "[sampler][table]") {
  SamplingParams s;
  const auto L = log_of(kP4);
  s.min_p = 0.6f;  // threshold 0.24
  check_table(L, s, normalized({0, 0, 3, 4}));
  s.min_p = 0.3f;  // threshold 0.12
  check_table(L, s, normalized({0, 2, 3, 4}));
  s.min_p = 1.0f;
  check_table(L, s, {0, 0, 0, 1});
  s.min_p = 0.0f;
  check_table(L, s, kP4);
  // A tie at the maximum survives m = 1.
  s.min_p = 1.0f;
  check_table({1, 3, 3, 0}, s, {0, 0.5, 0.5, 0});
  s.min_p = 0.5f;
  check_table(log_of({0, 0.1, 0.0, 0.9}), s, {0, 0, 0, 1});
}

TEST_CASE("temperature divides logits; min_p is decided on the tempered distribution", "[sampler][table]") {
  SamplingParams s;
  const auto L = log_of(normalized({1, 2, 4, 8}));
  s.temperature = 0.5f;
  check_table(L, s, normalized({1, 4, 16, 64}));
  s.temperature = 2.0f;
  check_table(L, s, normalized({1, std::sqrt(2.0), 2, std::sqrt(8.0)}));
  s.temperature = 1.0f;
  check_table(L, s, normalized({1, 2, 4, 8}));

  // Order dependence of min_p and temperature: with T = 2 the ratios to the max are exp(-1.5), exp(-1),
  // exp(-0.5), so m = 0.3 keeps tokens 1..3; on the untempered logits it would keep only 2 and 3.
  const std::vector<float> ramp = {0, 1, 2, 3};
  s.min_p = 0.3f;
  s.temperature = 2.0f;
  check_table(ramp, s, softmax_of({-INFINITY, 0.5, 1.0, 1.5}));
  s.temperature = 1.0f;
  check_table(ramp, s, softmax_of({-INFINITY, -INFINITY, 2, 3}));
  // Same for top_p: T = 2 flattens, so more tokens are needed to reach P.
  s = SamplingParams{};
  s.top_p = 0.6f;
  s.temperature = 1.0f;  // p = e^l / Z: 0.032, 0.087, 0.237, 0.644 -> only token 3 (0 < 0.6), token 2 has 0.644
  check_table(ramp, s, {0, 0, 0, 1});
  s.temperature = 2.0f;  // 0.10, 0.17, 0.28, 0.46: token 2 (0.46 < 0.6) kept, token 1 (0.74) not
  check_table(ramp, s, softmax_of({-INFINITY, -INFINITY, 1.0, 1.5}));
}

TEST_CASE("greedy: one-hot at the argmax after masks and penalties, ties to the lowest id", "[sampler][table]") {
  SamplingParams s;
  s.temperature = 0.0f;
  const std::vector<float> L = {1, 3, 3, 2};
  check_table(L, s, {0, 1, 0, 0});
  s.banned_tokens = {1};
  check_table(L, s, {0, 0, 1, 0});
  s.banned_tokens = {};
  s.repetition_penalty = 2.0f;  // token 1: 3 -> 1.5
  check_table(L, s, history({1}, {}), {0, 0, 1, 0});
  s.repetition_penalty = 1.0f;
  s.logit_bias = {{3, 1.5f}};  // token 3: 2 -> 3.5
  check_table(L, s, {0, 0, 0, 1});
  s.logit_bias = {};
  // Filters do not matter for greedy, and -inf ties are not candidates.
  s.top_k = 3;
  s.top_p = 0.1f;
  check_table({-kInf, -kInf, -5, -5}, s, {0, 0, 1, 0});
}

TEST_CASE("masks: allowed, banned, bad words, min_tokens; then logit bias", "[sampler][table]") {
  const std::vector<float> flat = {0, 0, 0, 0};
  SamplingParams s;
  s.allowed_tokens = {1, 3};
  check_table(flat, s, {0, 0.5, 0, 0.5});
  s.banned_tokens = {3};
  check_table(flat, s, {0, 1, 0, 0});

  s = SamplingParams{};
  s.logit_bias = {{0, static_cast<float>(std::log(3.0))}};
  check_table(flat, s, normalized({3, 1, 1, 1}));
  s.banned_tokens = {0};
  s.logit_bias = {{0, 5.0f}};  // bias never revives a banned token
  check_table(flat, s, normalized({0, 1, 1, 1}));
  s.banned_tokens = {};
  s.logit_bias = {{2, -kInf}};  // a -inf bias is a ban
  check_table(flat, s, normalized({1, 1, 0, 1}));

  // Bad words: the last token is banned when the output ends with the rest.
  s = SamplingParams{};
  s.bad_words = {{2, 3}};
  check_table(flat, s, history({}, {0, 2}), normalized({1, 1, 1, 0}));
  check_table(flat, s, history({}, {2, 0}), normalized({1, 1, 1, 1}));
  check_table(flat, s, history({2}, {}), normalized({1, 1, 1, 1}));  // the prompt is not output
  s.bad_words = {{1}};                                               // one-token word: always banned
  check_table(flat, s, history({}, {}), normalized({1, 0, 1, 1}));
  s.bad_words = {{0, 1, 2}};
  check_table(flat, s, history({}, {3, 0, 1}), normalized({1, 1, 0, 1}));
  check_table(flat, s, history({}, {1, 1}), normalized({1, 1, 1, 1}));
  check_table(flat, s, history({}, {1}), normalized({1, 1, 1, 1}));  // shorter than the prefix

  // min_tokens: stop tokens banned while |output| < min_tokens.
  s = SamplingParams{};
  s.min_tokens = 2;
  s.stop_tokens = {3};
  check_table(flat, s, history({}, {}), normalized({1, 1, 1, 0}));
  check_table(flat, s, history({}, {0}), normalized({1, 1, 1, 0}));
  check_table(flat, s, history({}, {0, 1}), normalized({1, 1, 1, 1}));
  s.min_tokens = 0;
  check_table(flat, s, history({}, {}), normalized({1, 1, 1, 1}));
}

TEST_CASE("keep_only and any_kept agree with a plain loop over token sets of every shape", "[sampler][table]") {
  // The mask pass takes a word of 64 tokens at a time, skipping one of all ones, writing one of all zeros and selecting
  // by the bits of the rest, then the tail token by token; any_kept stops at the first kept token above -inf. Sets
  // dense, sparse, of whole words and of one token, over rows that end inside a word and on its edge, with -inf logits.
  std::mt19937 rng(20261206);
  auto uniform = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  for (const int32_t V : {1, 7, 63, 64, 65, 127, 128, 129, 1000, 3001}) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<float> row(V);
      for (float& x : row) x = std::uniform_real_distribution<float>(-5, 5)(rng);
      const double density = std::vector<double>{0.0, 0.02, 0.5, 0.98, 1.0}[trial % 5];
      const bool whole_words = trial % 3 == 1;  // each word all in or all out
      TokenSet keep(V);
      bool word_in = false;
      for (Token t = 0; t < V; ++t) {
        if (t % 64 == 0) word_in = uniform() < density;
        if (whole_words ? word_in : uniform() < density) keep.set(t);
      }
      if (trial % 7 == 3) {  // one token alone
        keep = TokenSet(V);
        keep.set(static_cast<Token>(rng() % V));
      }
      const double neg_inf_share = std::vector<double>{0.0, 0.3, 1.0}[trial % 3 == 0 ? 0 : trial % 2 ? 1 : 2];
      for (float& x : row)
        if (uniform() < neg_inf_share) x = -kInf;
      // Values a mask must keep bit for bit where it keeps them: -0.0, NaNs with payloads (quiet and signalling),
      // +inf and a denormal.
      uint32_t snan_bits = 0x7f800001u, qnan_bits = 0xffc00123u;
      float snan, qnan;
      std::memcpy(&snan, &snan_bits, sizeof snan);
      std::memcpy(&qnan, &qnan_bits, sizeof qnan);
      for (const float special : {-0.0f, snan, qnan, kInf, std::numeric_limits<float>::denorm_min()})
        row[static_cast<size_t>(rng() % V)] = special;
      bool expected = false;
      std::vector<float> masked = row;
      for (Token t = 0; t < V; ++t) {
        expected = expected || (keep.test(t) && row[t] != -kInf);
        if (!keep.test(t)) masked[t] = -kInf;
      }
      INFO("V = " << V << ", trial " << trial << ", " << keep.count() << " tokens in the set");
      std::vector<float> got = row;
      CHECK(any_kept(LogitsRow{got.data(), V}, keep) == expected);
      keep_only(LogitsRow{got.data(), V}, keep);
      CHECK(std::memcmp(got.data(), masked.data(), sizeof(float) * V) == 0);  // bit for bit: -0.0 stays -0.0
    }
    // The one kept token at each word's edge: found wherever it is, and not found under a -inf logit.
    for (const int32_t at : {0, 63, 64, 127, 128, V - 1}) {
      if (at >= V) continue;
      std::vector<float> row(V, 0.5f);
      TokenSet keep(V);
      keep.set(at);
      INFO("V = " << V << ", only token " << at << " kept");
      CHECK(any_kept(LogitsRow{row.data(), V}, keep));
      row[at] = -kInf;
      CHECK_FALSE(any_kept(LogitsRow{row.data(), V}, keep));
    }
  }
  // A set of another size is refused, not read past its end.
  std::vector<float> row(65, 0.0f);
  CHECK_THROWS_WITH(keep_only(LogitsRow{row.data(), 65}, TokenSet(64)), Contains("a set of 64 tokens for a row of 65"));
  CHECK_THROWS_WITH(any_kept(LogitsRow{row.data(), 65}, TokenSet(66)), Contains("a set of 66 tokens for a row of 65"));
}

TEST_CASE("TokenSet: a bit a token, counted and compared over its tokens only", "[sampler][table]") {
  TokenSet a(130), b(130);
  CHECK(a.count() == 0);
  CHECK(a.words().size() == 3);
  for (const Token t : {0, 63, 64, 127, 128, 129}) a.set(t);
  CHECK(a.count() == 6);
  CHECK(a.test(129));
  CHECK_FALSE(a.test(1));
  CHECK(a.words()[2] == 3u);  // tokens 128 and 129; the bits past the size stay 0
  CHECK_FALSE(a == b);
  for (const Token t : {129, 128, 127, 64, 63, 0}) b.set(t);
  CHECK(a == b);
  a.reset(64);
  CHECK(a.count() == 5);
  CHECK_FALSE(a.test(64));
  a.clear(7);
  CHECK(a.size() == 7);
  CHECK(a.count() == 0);
  CHECK(a.words().size() == 1);
  CHECK_FALSE(TokenSet(7) == TokenSet(8));
  CHECK(TokenSet(0).count() == 0);
  CHECK_THROWS_WITH(TokenSet(-1), Contains("TokenSet: a negative size, -1"));
}

TEST_CASE("repetition penalty over prompt and output: divide positive logits, multiply negative ones",
          "[sampler][table]") {
  const std::vector<float> L = {2, -1, 0.5f, 1, 0};
  SamplingParams s;
  s.repetition_penalty = 2.0f;
  // 0 in the prompt, 1 twice in the output (penalised once), 4 has logit 0 (unchanged either way).
  check_table(L, s, history({0, 4}, {1, 1}), softmax_of({1, -2, 0.5, 1, 0}));
  s.repetition_penalty = 0.5f;  // r < 1 rewards repetition, symmetrically
  check_table(L, s, history({0, 4}, {1, 1}), softmax_of({4, -0.5, 0.5, 1, 0}));
  // A removed token stays removed.
  s.repetition_penalty = 2.0f;
  check_table({-kInf, 1, 1}, s, history({0, 1}, {}), softmax_of({-INFINITY, 0.5, 1}));
}

TEST_CASE("frequency and presence penalties count the output only", "[sampler][table]") {
  const std::vector<float> flat = {0, 0, 0, 0};
  SamplingParams s;
  s.frequency_penalty = 0.5f;
  s.presence_penalty = 1.0f;
  // 2 twice, 3 once; 0 twice in the prompt does not count.
  check_table(flat, s, history({0, 0}, {2, 2, 3}), softmax_of({0, 0, -2, -1.5}));
  s.frequency_penalty = -0.5f;  // negative penalties encourage
  s.presence_penalty = 0.0f;
  check_table(flat, s, history({0, 0}, {2, 2, 3}), softmax_of({0, 0, 1, 0.5}));
}

TEST_CASE("stage order: masks and penalties before temperature, filters in the configured order", "[sampler][table]") {
  SamplingParams s;
  // Frequency before temperature: (1 - 1) / 0.5 = 0, not 1 / 0.5 - 1 = 1.
  s.frequency_penalty = 1.0f;
  s.temperature = 0.5f;
  check_table({1, 0}, s, history({}, {0}), {0.5, 0.5});
  // Bias before temperature: ln 3 / 0.5 = ln 9.
  s = SamplingParams{};
  s.temperature = 0.5f;
  s.logit_bias = {{0, static_cast<float>(std::log(3.0))}};
  check_table({0, 0, 0, 0}, s, normalized({9, 1, 1, 1}));

  // top_k and top_p do not commute: top_k = 2 renormalises to (4/7, 3/7), where 0.3's strictly-better mass
  // 4/7 >= 0.5; top_p first keeps 0.4 and 0.3, and top_k = 2 keeps both.
  const auto L = log_of({0.1, 0.2, 0.3, 0.4});
  s = SamplingParams{};
  s.top_k = 2;
  s.top_p = 0.5f;
  s.order = {FilterStage::top_k, FilterStage::top_p};
  check_table(L, s, {0, 0, 0, 1});
  s.order = {FilterStage::top_p, FilterStage::top_k};
  check_table(L, s, normalized({0, 0, 3, 4}));
  // min_p then top_p: min_p 0.3 keeps (4, 3, 2) / 9, then 2/9's strictly-better mass 7/9 >= 0.72 drops it.
  // top_p first keeps 0.4, 0.3, 0.2 (0.7 < 0.72) and min_p keeps all three.
  s = SamplingParams{};
  s.min_p = 0.3f;
  s.top_p = 0.72f;
  s.order = {FilterStage::min_p, FilterStage::top_p};
  check_table(L, s, normalized({0, 0, 3, 4}));
  s.order = {FilterStage::top_p, FilterStage::min_p};
  check_table(L, s, normalized({0, 2, 3, 4}));
  // An active filter missing from the order runs after the listed ones, in canonical order.
  s.order = {FilterStage::top_p};
  check_table(L, s, normalized({0, 2, 3, 4}));
  s.order = {};
  check_table(L, s, normalized({0, 0, 3, 4}));
  CHECK(reference::filter_order(s) == std::vector<FilterStage>{FilterStage::min_p, FilterStage::top_p});
  s.order = {FilterStage::top_p};
  CHECK(s.active_filters() == reference::filter_order(s));
  CHECK(s.describe() == "logits -> penalties -> temperature -> top_p -> min_p -> dist");
}

TEST_CASE("typical_p ranks by |-log p - H| and keeps the crossing token", "[sampler][table]") {
  // p = (1/2, 1/4, 1/8, 1/8): H = 1.75 ln 2; scores 0.75, 0.25, 1.25, 1.25 (x ln 2): most typical is token 1.
  const auto L = log_of({0.5, 0.25, 0.125, 0.125});
  SamplingParams s;
  s.typical_p = 0.2f;
  check_table(L, s, {0, 1, 0, 0});
  s.typical_p = 0.5f;  // token 0's strictly-more-typical mass 0.25 < 0.5: kept; tokens 2, 3 have 0.75
  check_table(L, s, normalized({2, 1, 0, 0}));
  s.typical_p = 0.9f;  // the tied pair 2, 3 is kept together
  check_table(L, s, {0.5, 0.25, 0.125, 0.125});
}

TEST_CASE("tfs_z: normalised |second differences| of the sorted probabilities", "[sampler][table]") {
  // Sorted p: 0.35, 0.25, 0.18, 0.12, 0.07, 0.03 -> d = .10 .07 .06 .05 .04 -> |dd| = .03 .01 .01 .01,
  // normalised .5 .1667 .1667 .1667, running sum .5 .667 .833 1. Keep the first i (i >= 1) where it
  // first exceeds z. Tokens are shuffled so that the sort is exercised.
  const std::vector<double> p = {0.12, 0.35, 0.03, 0.25, 0.07, 0.18};
  const auto L = log_of(p);
  SamplingParams s;
  s.tfs_z = 0.4f;  // exceeds at i = 0, but at least i = 1 -> one token
  check_table(L, s, {0, 1, 0, 0, 0, 0});
  s.tfs_z = 0.6f;
  check_table(L, s, {0, 1, 0, 0, 0, 0});
  s.tfs_z = 0.7f;
  check_table(L, s, normalized({0, 0.35, 0, 0.25, 0, 0}));
  s.tfs_z = 0.9f;
  check_table(L, s, normalized({0, 0.35, 0, 0.25, 0, 0.18}));
  // A flat distribution has no second difference: nothing is cut. Two candidates: nothing is cut.
  check_table({0, 0, 0, 0}, s, {0.25, 0.25, 0.25, 0.25});
  check_table(log_of({0, 0.3, 0.7}), s, {0, 0.3, 0.7});
  // One head, flat tail: |dd| = (0.2, 0) -> running sum 1 at i = 1 -> keep 1.
  check_table(log_of({0.2, 0.4, 0.2, 0.2}), s, {0, 1, 0, 0});
}

TEST_CASE("mirostat v2 keeps surprise <= mu (bits); mu advances by eta * (surprise - tau)", "[sampler][table]") {
  // Surprises 1, 2, 3, 3 bits.
  const auto L = log_of({0.5, 0.25, 0.125, 0.125});
  SamplingParams s;
  s.mirostat = 2;
  s.mirostat_tau = 1.2f;  // mu starts at 2 tau = 2.4
  s.mirostat_eta = 0.1f;
  check_table(L, s, normalized({2, 1, 0, 0}));
  s.mirostat_tau = 1.6f;  // 3.2: all
  check_table(L, s, {0.5, 0.25, 0.125, 0.125});
  TokenHistory h;
  h.mirostat_mu = 0.5;  // below every surprise: the most probable token stays
  check_table(L, s, h, {1, 0, 0, 0});
  h.mirostat_mu = 2.5;
  check_table(L, s, h, normalized({2, 1, 0, 0}));
  check_table({0, 0, -5, -5}, s, h, {0.5, 0.5, 0, 0});  // ties kept: each surprise is 1 bit

  // advance(): surprise of the emitted token under the processed law (1/3 -> log2 3 bits).
  s.mirostat_tau = 1.2f;
  const SamplerPipeline pipeline(s, 4);
  const TokenHistory start = history({3}, {1});
  const std::vector<float> probs = pipeline.process(L, start);
  const TokenHistory next = pipeline.advance(start, 1, probs.data());
  CHECK(next.output == std::vector<Token>{1, 1});
  CHECK(next.prompt == start.prompt);
  CHECK(next.mirostat_mu == Approx(2.4 - 0.1 * (std::log2(3.0) - 1.2)).epsilon(1e-6));
  const TokenHistory after = pipeline.advance(next, 0, probs.data());
  CHECK(after.mirostat_mu == Approx(next.mirostat_mu - 0.1 * (std::log2(1.5) - 1.2)).epsilon(1e-6));
}

TEST_CASE("dynamic temperature: T = T_min + (T_max - T_min) (H / log #candidates)^exponent", "[sampler][table]") {
  SamplingParams s;
  s.temperature = 1.0f;
  s.dynatemp_range = 0.5f;
  // p = (1/2, 1/4, 1/8, 1/8): H / log 4 = 1.75 ln 2 / 2 ln 2 = 0.875 -> T = 0.5 + 1.0 * 0.875.
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.125};
  auto powered = [&](double t) {
    std::vector<double> w;
    for (double v : p) w.push_back(v > 0 ? std::pow(v, 1.0 / t) : 0.0);
    return normalized(w);
  };
  check_table(log_of(p), s, powered(1.375));
  s.dynatemp_exponent = 2.0f;
  check_table(log_of(p), s, powered(0.5 + 0.875 * 0.875));
  // #candidates counts finite logits only: (1/2, 1/4, 1/4, -inf) has H = 1.5 ln 2 against log 3.
  s.dynatemp_exponent = 1.0f;
  const std::vector<double> q = {0.5, 0.25, 0.25, 0};
  const double t = 0.5 + 1.5 * std::log(2.0) / std::log(3.0);
  check_table(log_of(q), s, normalized({std::pow(0.5, 1 / t), std::pow(0.25, 1 / t), std::pow(0.25, 1 / t), 0}));
  // T_min is clamped at 0.
  s.temperature = 0.3f;
  s.dynatemp_range = 0.5f;
  check_table(log_of(p), s, powered(0.0 + 0.8 * 0.875));
  // One candidate: nothing to do.
  check_table(log_of({0, 1, 0, 0}), s, {0, 1, 0, 0});
}

TEST_CASE("removed (-inf) inputs stay removed through every stage", "[sampler][table]") {
  SamplingParams s;
  s.repetition_penalty = 1.5f;
  s.frequency_penalty = 0.3f;
  s.presence_penalty = 0.2f;
  s.logit_bias = {{0, 2.0f}};
  s.temperature = 0.7f;
  s.min_p = 0.01f;
  s.top_k = 3;
  s.top_p = 0.99f;
  const std::vector<float> L = {-kInf, 1, -kInf, 0.5f, -2};
  const std::vector<double> p = run(L, s, history({0, 1}, {2, 3}));
  CHECK(p[0] == 0.0);
  CHECK(p[2] == 0.0);
  check_probs(p, reference::probs(L, s, history({0, 1}, {2, 3})));
}

// ---- Random configs against the float64 reference ------------------------------------------------------

namespace {

// splitmix64: a fixed, portable generator for the configs (std distributions differ across libraries).
struct ConfigRng {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  bool coin(double p = 0.5) { return uniform() < p; }
  double normal() {  // Box-Muller
    const double u1 = (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53, u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

struct RandomCase {
  std::vector<float> logits;
  SamplingParams params;
  TokenHistory history;
};

RandomCase random_case(ConfigRng& rng) {
  RandomCase c;
  const int V = 6 + rng.below(11);  // 6..16
  const double scale = 0.5 + 3.0 * rng.uniform();
  for (int i = 0; i < V; ++i) {
    // Quantised logits make exact ties common (ties are where top_k / top_p bugs live).
    float l = static_cast<float>(std::round(rng.normal() * scale * 4.0) / 4.0);
    if (rng.coin(0.08)) l = -std::numeric_limits<float>::infinity();
    c.logits.push_back(l);
  }
  c.logits[rng.below(V)] = 1.0f;  // at least one finite logit
  auto token = [&] { return static_cast<Token>(rng.below(V)); };
  for (int i = rng.below(5); i > 0; --i) c.history.prompt.push_back(token());
  for (int i = rng.below(6); i > 0; --i) c.history.output.push_back(token());

  SamplingParams& s = c.params;
  if (rng.coin(0.2))
    for (int i = 0; i < V; ++i)
      if (rng.coin(0.7)) s.allowed_tokens.push_back(i);
  if (rng.coin(0.3)) s.banned_tokens = {token()};
  if (rng.coin(0.4)) {
    const double kind = rng.uniform();
    if (!c.history.output.empty() && kind < 0.4)
      s.bad_words = {{c.history.output.back(), token()}};  // the prefix matches
    else if (kind < 0.7)
      s.bad_words = {{token(), token()}, {token(), token(), token()}};  // usually it does not
    else
      s.bad_words = {{token()}};
  }
  if (rng.coin(0.3)) {
    s.min_tokens = rng.below(6);
    s.stop_tokens = {token()};
  }
  if (rng.coin(0.4)) s.logit_bias = {{token(), static_cast<float>(rng.normal() * 2)}, {token(), 1.25f}};
  if (rng.coin(0.5)) s.repetition_penalty = static_cast<float>(0.5 + 1.5 * rng.uniform());
  if (rng.coin(0.5)) s.frequency_penalty = static_cast<float>(rng.normal() * 0.5);
  if (rng.coin(0.5)) s.presence_penalty = static_cast<float>(rng.normal() * 0.5);
  const double t = rng.uniform();
  s.temperature = t < 0.1 ? 0.0f : static_cast<float>(0.3 + 1.7 * rng.uniform());
  if (rng.coin(0.2)) {
    s.dynatemp_range = static_cast<float>(0.1 + rng.uniform());
    s.dynatemp_exponent = static_cast<float>(0.5 + 1.5 * rng.uniform());
  }
  if (rng.coin(0.5)) s.min_p = static_cast<float>(0.3 * rng.uniform());
  if (rng.coin(0.5)) s.top_k = 1 + rng.below(V);
  if (rng.coin(0.5)) s.top_p = static_cast<float>(0.3 + 0.69 * rng.uniform());
  if (rng.coin(0.25)) s.typical_p = static_cast<float>(0.3 + 0.69 * rng.uniform());
  if (rng.coin(0.25)) s.tfs_z = static_cast<float>(0.3 + 0.69 * rng.uniform());
  if (rng.coin(0.2)) {
    s.mirostat = 2;
    s.mirostat_tau = static_cast<float>(0.5 + 2.5 * rng.uniform());
    if (rng.coin()) c.history.mirostat_mu = 0.5 + 5 * rng.uniform();
  }
  // A random order over a random subset of the filters.
  std::vector<FilterStage> all = {FilterStage::min_p,     FilterStage::top_k, FilterStage::top_p,
                                  FilterStage::typical_p, FilterStage::tfs_z, FilterStage::mirostat};
  for (size_t i = all.size(); i > 1; --i) std::swap(all[i - 1], all[rng.below(static_cast<int>(i))]);
  all.resize(rng.below(7));
  if (rng.coin(0.3)) all = {FilterStage::min_p, FilterStage::top_k, FilterStage::top_p};
  s.order = all;
  return c;
}

std::string describe_case(const RandomCase& c) {
  std::ostringstream os;
  os << "logits";
  for (float l : c.logits) os << ' ' << l;
  os << "\nprompt";
  for (Token t : c.history.prompt) os << ' ' << t;
  os << "\noutput";
  for (Token t : c.history.output) os << ' ' << t;
  const SamplingParams& s = c.params;
  os << "\nchain " << s.describe() << "\nT " << s.temperature << " dyn " << s.dynatemp_range << "^"
     << s.dynatemp_exponent << " rep " << s.repetition_penalty << " freq " << s.frequency_penalty << " pres "
     << s.presence_penalty << " min_p " << s.min_p << " top_k " << s.top_k << " top_p " << s.top_p << " typical "
     << s.typical_p << " tfs " << s.tfs_z << " mirostat " << s.mirostat << " tau " << s.mirostat_tau << " mu "
     << c.history.mirostat_mu << " min_tokens " << s.min_tokens << " allowed " << s.allowed_tokens.size() << " banned "
     << s.banned_tokens.size() << " bad_words " << s.bad_words.size() << " bias " << s.logit_bias.size();
  return os.str();
}

}  // namespace

TEST_CASE("200 random configs: the pipeline matches the float64 reference within 1e-6", "[sampler][table]") {
  ConfigRng rng{20240601};
  int compared = 0, skipped_near_threshold = 0, truncated = 0;
  while (compared < 200) {
    const RandomCase c = random_case(rng);
    const reference::Result ref = reference::pipeline(c.logits, c.params, c.history);
    if (ref.no_token_left) continue;  // the error path has its own tests
    // float32 logits may flip a decision that sits within ~1e-6 of its threshold; such configs say
    // nothing about correctness. Real threshold distances here are ~1e-2.
    if (ref.margin < 1e-4) {
      ++skipped_near_threshold;
      continue;
    }
    INFO(describe_case(c));
    const std::vector<double> actual = run(c.logits, c.params, c.history);
    double max_diff = 0.0;
    int support = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      max_diff = std::max(max_diff, std::fabs(actual[i] - ref.probs[i]));
      CHECK((actual[i] == 0.0) == (ref.probs[i] == 0.0));
      support += ref.probs[i] > 0.0;
    }
    INFO("reference " << show(ref.probs) << "\nactual    " << show(actual));
    CHECK(max_diff <= 1e-6);
    truncated += support < static_cast<int>(c.logits.size());
    ++compared;
  }
  INFO("skipped " << skipped_near_threshold << ", truncated " << truncated);
  CHECK(skipped_near_threshold < 50);
  CHECK(truncated >= 100);  // the configs exercise the filters, not just softmax
}

// Battery M on battery A: every pipeline mutant changes the processed law of some random configs (the
// frequency tests then show the change is caught by sampling too).
TEST_CASE("every sampler-pipeline mutant moves the processed law of some random configs", "[sampler][mutant][table]") {
  for (int m = static_cast<int>(Mutant::top_p_drops_crossing_token);
       m < static_cast<int>(Mutant::uniform_reused_across_rows); ++m) {
    ConfigRng rng{20240601};
    int caught = 0, compared = 0;
    while (compared < 200) {
      const RandomCase c = random_case(rng);
      const reference::Result ref = reference::pipeline(c.logits, c.params, c.history);
      if (ref.no_token_left || ref.margin < 1e-4) continue;
      ++compared;
      ScopedMutant on(static_cast<Mutant>(m));
      const std::vector<double> actual = run(c.logits, c.params, c.history);
      double max_diff = 0.0;
      for (size_t i = 0; i < actual.size(); ++i) max_diff = std::max(max_diff, std::fabs(actual[i] - ref.probs[i]));
      caught += max_diff > 1e-4;
    }
    INFO("mutant #" << m << " moved " << caught << " of " << compared << " configs");
    CHECK(caught >= 2);
  }
}
