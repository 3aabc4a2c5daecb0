// The LibTorch baseline of `bench verify --device cuda` does chain verification's work: on the CPU its accept
// decisions follow Leviathan et al.'s rule on given uniforms, and its emitted token has the residual's law after a
// rejection (G-test, with the power check that p's law is rejected) and p_{K+1}'s after K acceptances.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "harness/bench/torch_verify_baseline.h"
#include "tests/statistics/goodness_of_fit.h"

using namespace specula;

namespace {

std::vector<float> random_rows(int64_t rows, int32_t vocab, std::mt19937_64& rng) {
  std::lognormal_distribution<float> weight(0.0f, 1.0f);
  std::vector<float> out(static_cast<size_t>(rows) * vocab);
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0.0;
    for (int32_t x = 0; x < vocab; ++x) total += out[r * vocab + x] = weight(rng);
    for (int32_t x = 0; x < vocab; ++x) out[r * vocab + x] = static_cast<float>(out[r * vocab + x] / total);
  }
  return out;
}

// Rows that all copy row 0 of `one` ([rows_per_batch, V]) B times.
std::vector<float> repeated(const std::vector<float>& one, int64_t times) {
  std::vector<float> out;
  for (int64_t b = 0; b < times; ++b) out.insert(out.end(), one.begin(), one.end());
  return out;
}

std::vector<double> normalised(std::vector<double> w) {
  double total = 0.0;
  for (double x : w) total += x;
  for (double& x : w) x /= total;
  return w;
}

}  // namespace

TEST_CASE("the LibTorch chain verifier accepts by u * q(d) < p(d) up to the first rejection", "[device][verify]") {
  std::mt19937_64 rng(5);
  const int32_t V = 16, K = 4, B = 200;
  const std::vector<float> p = random_rows(B * (K + 1), V, rng), q = random_rows(B * K, V, rng);
  std::vector<int64_t> drafts(B * K);
  std::vector<float> u(B * K);
  std::uniform_int_distribution<int64_t> token(0, V - 1);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (auto& d : drafts) d = token(rng);
  for (auto& x : u) x = uniform(rng);
  const bench::TorchChainResult r = bench::torch_chain_verify(p, q, drafts, u, V, K);
  int64_t rejected_somewhere = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t expected = 0;
    while (expected < K) {
      const int64_t d = drafts[b * K + expected];
      if (!(u[b * K + expected] * q[(b * K + expected) * V + d] < p[(b * (K + 1) + expected) * V + d])) break;
      ++expected;
    }
    rejected_somewhere += expected < K;
    CHECK(r.accepted[b] == expected);
    CHECK((r.token[b] >= 0 && r.token[b] < V));
  }
  CHECK(rejected_somewhere > 0);
  CHECK(rejected_somewhere < B);
}

TEST_CASE("the LibTorch chain verifier draws the residual after a rejection and p after K acceptances (G-test)",
          "[device][verify][law]") {
  std::mt19937_64 rng(6);
  const int32_t V = 8, K = 1;
  const int64_t B = 40000;
  const std::vector<float> p1 = random_rows(K + 1, V, rng), q1 = random_rows(K, V, rng);
  const std::vector<float> p = repeated(p1, B), q = repeated(q1, B);
  // The draft token where q exceeds p most: u = 1 rejects it (u q(d) < p(d) fails); u = 0 accepts it (p > 0).
  int64_t d = 0;
  for (int32_t x = 1; x < V; ++x)
    if (q1[x] - p1[x] > q1[d] - p1[d]) d = x;
  REQUIRE(q1[d] >= p1[d]);
  const std::vector<int64_t> drafts(B, d);
  for (const bool reject : {true, false}) {
    const std::vector<float> u(B, reject ? 1.0f : 0.0f);
    const bench::TorchChainResult r = bench::torch_chain_verify(p, q, drafts, u, V, K);
    std::vector<int64_t> counts(V, 0);
    for (int64_t b = 0; b < B; ++b) {
      REQUIRE(r.accepted[b] == (reject ? 0 : 1));
      ++counts[static_cast<size_t>(r.token[b])];
    }
    std::vector<double> residual(V), p_row(V), bonus(V);
    for (int32_t x = 0; x < V; ++x) {
      residual[x] = std::max(0.0, static_cast<double>(p1[x]) - q1[x]);
      p_row[x] = p1[x];
      bonus[x] = p1[V + x];
    }
    const std::vector<double> law = normalised(reject ? residual : bonus);
    const stats::GofResult gof = stats::g_test(counts, law);
    INFO((reject ? "after a rejection: " : "after K acceptances: ") << gof.detail);
    CHECK(gof.passed(stats::kAlpha));
    // Power: the wrong row's law is rejected.
    const stats::GofResult wrong = stats::g_test(counts, normalised(reject ? p_row : residual));
    CHECK_FALSE(wrong.passed(stats::kAlpha));
  }
}

TEST_CASE("the LibTorch chain verifier times on the CPU and names a bad device", "[device][verify]") {
  CHECK(bench::time_torch_chain_verify(256, 2, 4, "cpu", 2) > 0.0);
  CHECK_THROWS_WITH(bench::time_torch_chain_verify(256, 2, 4, "tpu", 2), Catch::Contains("cpu or cuda"));
}
