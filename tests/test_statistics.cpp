// The statistical test kit itself is tested here: known tail values, the pooling rule, calibration under
// the null (a test that fires too often is as useless as one that never fires), power against a TV 0.02
// alternative (tests/TESTING.md "Sample size"), the exact zero-cell and rare-cell checks, and the transition test.
// Draws use the project's Philox and our own inverse-CDF code, never std::*_distribution (tests/TESTING.md).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "tests/statistics/goodness_of_fit.h"
#include "tests/statistics/transition_test.h"

using namespace specula;
using namespace specula::stats;

namespace {

// Inverse CDF: the first cell whose cumulative probability exceeds u. u is in (0, 1); if rounding leaves
// u above the last cumulative value, the last cell with positive probability is taken.
int draw(const std::vector<double>& probs, double u) {
  double cum = 0.0;
  int last_positive = 0;
  for (int i = 0; i < static_cast<int>(probs.size()); ++i) {
    if (probs[i] > 0.0) last_positive = i;
    cum += probs[i];
    if (u < cum) return i;
  }
  return last_positive;
}

std::vector<int64_t> sample_counts(const std::vector<double>& probs, int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> counts(probs.size(), 0);
  for (int64_t t = 0; t < n; ++t) ++counts[draw(probs, philox_uniform(seed, stream, static_cast<uint64_t>(t)))];
  return counts;
}

std::vector<double> normalised(std::vector<double> w) {
  double s = 0.0;
  for (double x : w) s += x;
  for (double& x : w) x /= s;
  return w;
}

// A K = 16 law with two rare cells (expected 2 and 10 at n = 20000), so calibration covers pooling and the
// rare-cell binomial check too.
std::vector<double> k16_law() {
  std::vector<double> w;
  for (int i = 0; i < 14; ++i) w.push_back(std::pow(0.8, i));
  std::vector<double> p = normalised(w);
  for (double& x : p) x *= 1.0 - 6e-4;
  p.push_back(1e-4);
  p.push_back(5e-4);
  return p;
}

double binomial_pmf(int n, int k, double p) {
  return std::exp(std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0) + k * std::log(p) +
                  (n - k) * std::log1p(-p));
}

}  // namespace

TEST_CASE("chi-square, binomial, Poisson and normal tails match hand-computed values", "[stats]") {
  // Textbook critical values.
  CHECK(chi_square_upper_tail(3.841458820694124, 1) == Approx(0.05).epsilon(1e-10));
  CHECK(chi_square_upper_tail(23.209251158954356, 10) == Approx(0.01).epsilon(1e-10));
  // Closed forms: df = 2 gives exp(-x/2); df = 4 gives exp(-x/2)(1 + x/2). Deep tails keep relative accuracy.
  CHECK(chi_square_upper_tail(10.0, 2) == Approx(std::exp(-5.0)).epsilon(1e-12));
  CHECK(chi_square_upper_tail(7.0, 4) == Approx(std::exp(-3.5) * 4.5).epsilon(1e-12));
  CHECK(chi_square_upper_tail(200.0, 2) == Approx(std::exp(-100.0)).epsilon(1e-10));
  CHECK(chi_square_upper_tail(0.0, 3) == 1.0);
  CHECK(chi_square_upper_tail(5.0, 0) == 1.0);

  // Binomial n = 10, p = 0.3 against direct sums of the pmf.
  for (int k : {0, 1, 3, 5, 7, 10}) {
    double lower = 0.0, upper = 0.0;
    for (int j = 0; j <= 10; ++j) {
      if (j <= k) lower += binomial_pmf(10, j, 0.3);
      if (j >= k) upper += binomial_pmf(10, j, 0.3);
    }
    const double expected = std::min(1.0, 2.0 * std::min(lower, upper));
    CHECK(binomial_two_sided_p(k, 10, 0.3) == Approx(expected).epsilon(1e-12));
  }
  CHECK(binomial_two_sided_p(0, 10, 0.3) == Approx(2.0 * std::pow(0.7, 10)).epsilon(1e-12));
  CHECK(binomial_two_sided_p(10, 20, 0.5) == 1.0);
  CHECK(binomial_two_sided_p(0, 1000, 0.5) == Approx(2.0 * std::pow(0.5, 1000)).epsilon(1e-9));  // ~1.9e-301
  CHECK(binomial_two_sided_p(3, 5, 0.0) == 0.0);
  CHECK(binomial_two_sided_p(0, 5, 0.0) == 1.0);
  CHECK(binomial_two_sided_p(5, 5, 1.0) == 1.0);
  CHECK(binomial_rate_p(500, 1000, 0.5) == 1.0);
  CHECK(binomial_rate_p(600, 1000, 0.5) < 1e-9);

  CHECK(poisson_two_sided_p(0, 3.0) == Approx(2.0 * std::exp(-3.0)).epsilon(1e-12));
  CHECK(poisson_two_sided_p(6, 2.0) ==
        Approx(2.0 * (1.0 - std::exp(-2.0) * (1 + 2.0 + 2.0 + 4.0 / 3 + 2.0 / 3 + 4.0 / 15))).epsilon(1e-10));

  CHECK(z_score(10.1, 2.0, 400, 10.0) == Approx(1.0).epsilon(1e-12));
  CHECK(z_score(9.9, 2.0, 400, 10.0) == Approx(1.0).epsilon(1e-12));
  CHECK(z_score(3.0, 0.0, 10, 3.0) == 0.0);
  CHECK(std::isinf(z_score(3.1, 0.0, 10, 3.0)));
  CHECK(normal_two_sided_p(1.959963984540054) == Approx(0.05).epsilon(1e-10));

  CHECK_THROWS_AS(binomial_two_sided_p(11, 10, 0.3), Error);
  CHECK_THROWS_AS(binomial_two_sided_p(1, 10, 1.5), Error);
  CHECK_THROWS_AS(z_score(1.0, 1.0, 0, 1.0), Error);
}

TEST_CASE("g_test rejects malformed input", "[stats]") {
  CHECK_THROWS_AS(g_test({1, 2}, {0.5, 0.6}), Error);         // probabilities do not sum to 1
  CHECK_THROWS_AS(g_test({1, 2, 3}, {0.5, 0.5}), Error);      // size mismatch
  CHECK_THROWS_AS(g_test({1, -2}, {0.5, 0.5}), Error);        // negative count
  CHECK_THROWS_AS(pearson_test({1, 2}, {1.5, -0.5}), Error);  // negative probability
  CHECK_NOTHROW(g_test({1, 2}, {0.5, 0.5 + 5e-10}));          // within 1e-9
}

TEST_CASE("pooling merges rare cells smallest first and never leaves a pooled cell below min_expected", "[stats]") {
  int groups = 0;
  SECTION("one pooled cell from four rare ones; zero cells excluded") {
    const std::vector<int> g = pool_cells({100, 3, 5, 0, 12, 50, 1, 30}, 20, &groups);
    CHECK(groups == 4);
    CHECK(g == std::vector<int>{0, 3, 3, -1, 3, 1, 3, 2});
  }
  SECTION("a remainder joins the last pooled cell") {
    // 12 + 12 closes a pool, 12 + 12 closes a second, the last 12 joins the second.
    const std::vector<int> g = pool_cells({200, 12, 12, 12, 12, 12}, 20, &groups);
    CHECK(groups == 3);
    CHECK(g == std::vector<int>{0, 1, 1, 2, 2, 2});
  }
  SECTION("rare cells that never reach min_expected join the smallest ordinary cell") {
    const std::vector<int> g = pool_cells({300, 3, 30, 4}, 20, &groups);
    CHECK(groups == 2);
    CHECK(g == std::vector<int>{0, 1, 1, 1});
  }
  SECTION("a total below min_expected gives one lone cell") {
    const std::vector<int> g = pool_cells({5, 3, 0}, 20, &groups);
    CHECK(groups == 1);
    CHECK(g == std::vector<int>{0, 0, -1});
  }
  SECTION("g_test and pearson_test on a constructed case") {
    // Expected 500, 300, 190, 9, 1: the two rare cells (10 in all) join cell 2, leaving 3 cells, df 2.
    const std::vector<double> probs{0.5, 0.3, 0.19, 0.009, 0.001};
    const GofResult exact = g_test({500, 300, 190, 9, 1}, probs);
    CHECK(exact.df == 2);
    CHECK(exact.statistic == Approx(0.0).margin(1e-9));
    CHECK(exact.p_value == Approx(1.0));
    CHECK(exact.passed(kAlpha));

    const GofResult g = g_test({520, 280, 190, 7, 3}, probs);
    const double want_g = 2.0 * (520 * std::log(520.0 / 500) + 280 * std::log(280.0 / 300));
    CHECK(g.df == 2);
    CHECK(g.statistic == Approx(want_g).epsilon(1e-12));
    CHECK(g.p_value == Approx(std::exp(-want_g / 2)).epsilon(1e-10));
    CHECK(g.rare_cell_p_value == Approx(std::min(1.0, 2.0 * std::min(binomial_two_sided_p(7, 1000, 0.009),
                                                                     binomial_two_sided_p(3, 1000, 0.001))))
                                     .epsilon(1e-12));
    const GofResult x2 = pearson_test({520, 280, 190, 7, 3}, probs);
    CHECK(x2.statistic == Approx(400.0 / 500 + 400.0 / 300).epsilon(1e-12));
    CHECK(x2.df == 2);

    // The pooled cell hides a rare cell that is 20x too frequent; only the exact rare-cell check sees it.
    const GofResult hidden = g_test({500, 300, 180, 0, 20}, probs);
    CHECK(hidden.statistic == Approx(0.0).margin(1e-9));
    CHECK(hidden.rare_cell_p_value < kAlpha);
    CHECK_FALSE(hidden.passed(kAlpha));
    CHECK(hidden.detail.find("worst cell 4") != std::string::npos);
  }
  SECTION("one cell after pooling gives df 0 and p 1") {
    const GofResult r = g_test({3, 2}, {0.5, 0.5});
    CHECK(r.df == 0);
    CHECK(r.p_value == 1.0);
  }
}

TEST_CASE("G and Pearson are calibrated under the null (K = 16, n = 20000, 200 repetitions)", "[stats]") {
  const std::vector<double> probs = k16_law();
  constexpr int kReps = 200;
  int g_below_01 = 0, x2_below_01 = 0, g_below_half = 0, rare_below_01 = 0, failures = 0;
  double g_min = 1.0, x2_min = 1.0;
  for (int rep = 0; rep < kReps; ++rep) {
    const std::vector<int64_t> counts = sample_counts(probs, 20000, /*seed=*/20240601, /*stream=*/rep);
    const GofResult g = g_test(counts, probs);
    const GofResult x2 = pearson_test(counts, probs);
    REQUIRE(g.df == 13);  // 14 ordinary cells + the two rare ones pooled into one: 15 cells
    g_below_01 += g.p_value < 0.01;
    x2_below_01 += x2.p_value < 0.01;
    g_below_half += g.p_value < 0.5;
    rare_below_01 += g.rare_cell_p_value < 0.01;
    failures += !g.passed(kAlpha) + !x2.passed(kAlpha);
    g_min = std::min(g_min, g.p_value);
    x2_min = std::min(x2_min, x2.p_value);
  }
  INFO("G p<0.01: " << g_below_01 << ", X2 p<0.01: " << x2_below_01 << ", G p<0.5: " << g_below_half
                    << ", rare p<0.01: " << rare_below_01 << ", min p G " << g_min << " X2 " << x2_min);
  // Binomial(200, 0.01) has mean 2; P[> 10] ~ 1e-5. Binomial(200, 0.5) is within 100 +- 40 with ~1e-8 error.
  CHECK(g_below_01 <= 10);
  CHECK(x2_below_01 <= 10);
  CHECK(rare_below_01 <= 10);
  CHECK(g_below_half >= 60);
  CHECK(g_below_half <= 140);
  CHECK(g_min >= kAlpha);
  CHECK(x2_min >= kAlpha);
  CHECK(failures == 0);
}

TEST_CASE("a law at TV distance 0.02 fails at kAlpha with n = 200k (K = 16)", "[stats]") {
  const std::vector<double> claimed = k16_law();
  // Move 0.02 of mass from the two most likely cells to cells 5 and 9: TV = 0.02.
  std::vector<double> actual = claimed;
  actual[0] -= 0.012;
  actual[1] -= 0.008;
  actual[5] += 0.01;
  actual[9] += 0.01;
  double tv = 0.0;
  for (size_t i = 0; i < claimed.size(); ++i) tv += 0.5 * std::abs(actual[i] - claimed[i]);
  REQUIRE(tv == Approx(0.02).epsilon(1e-9));
  const std::vector<int64_t> counts = sample_counts(actual, 200000, /*seed=*/7, /*stream=*/0);
  const GofResult g = g_test(counts, claimed);
  const GofResult x2 = pearson_test(counts, claimed);
  INFO(g.detail);
  CHECK_FALSE(g.passed(kAlpha));
  CHECK(g.p_value < kAlpha);
  CHECK_FALSE(x2.passed(kAlpha));
  // Sanity: the same draws pass against the law they were drawn from.
  CHECK(g_test(counts, actual).passed(kAlpha));
}

TEST_CASE("one sample in a probability-0 cell fails at once", "[stats]") {
  const std::vector<double> probs{0.5, 0.5, 0.0};
  const GofResult ok = g_test({500, 500, 0}, probs);
  CHECK_FALSE(ok.zero_cell_violation);
  CHECK(ok.passed(kAlpha));
  const GofResult bad = g_test({500, 499, 1}, probs);
  CHECK(bad.zero_cell_violation);
  CHECK(bad.p_value > 0.5);  // the chi-square part alone would never notice
  CHECK_FALSE(bad.passed(kAlpha));
  CHECK(bad.detail.find("ZERO-PROBABILITY") != std::string::npos);
  CHECK(pearson_test({500, 499, 1}, probs).zero_cell_violation);
}

namespace {

// A 2-state Markov chain started in state 0, sampled exactly with `actual`, tested against `claimed`.
GofResult markov_chain_test(const double actual[2][2], const double claimed[2][2], int steps, uint64_t seed) {
  TransitionTest test(2);
  int state = 0;
  for (int t = 0; t < steps; ++t) {
    const std::vector<double> act{actual[state][0], actual[state][1]};
    const int next = draw(act, philox_uniform(seed, 0, static_cast<uint64_t>(t)));
    test.add(/*stratum=*/state, next, {claimed[state][0], claimed[state][1]});
    state = next;
  }
  return test.result();
}

}  // namespace

TEST_CASE("transition test: an exactly sampled Markov chain passes, a perturbed one fails", "[stats]") {
  const double p[2][2] = {{0.9, 0.1}, {0.3, 0.7}};
  const double perturbed[2][2] = {{0.88, 0.12}, {0.3, 0.7}};
  const GofResult good = markov_chain_test(p, p, 100000, 11);
  INFO(good.detail);
  CHECK(good.df == 2);  // one free transition probability per state
  CHECK(good.passed(kAlpha));
  const GofResult bad = markov_chain_test(perturbed, p, 100000, 11);
  INFO(bad.detail);
  CHECK(bad.p_value < kAlpha);
  CHECK_FALSE(bad.passed(kAlpha));
}

TEST_CASE("transition test with one law per stratum equals Pearson's X^2", "[stats]") {
  const std::vector<double> law{0.4, 0.3, 0.2, 0.1};
  const int64_t n = 5000;
  std::vector<int64_t> counts(law.size(), 0);
  TransitionTest test(4), unpooled(4, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const int x = draw(law, philox_uniform(3, 1, static_cast<uint64_t>(t)));
    ++counts[x];
    test.add(0, x, law);
    unpooled.add(0, x, law);
  }
  const GofResult x2 = pearson_test(counts, law);
  CHECK(test.result().statistic == Approx(x2.statistic).epsilon(1e-9));
  CHECK(test.result().df == 3);
  CHECK(unpooled.result().statistic == Approx(x2.statistic).epsilon(1e-9));
}

TEST_CASE("transition test is calibrated with history-dependent laws and catches a perturbed one", "[stats]") {
  // V = 3; the law depends on the previous token AND on the position (a stand-in for penalties), while the
  // stratum is the previous token only, so C_s sums many different laws.
  auto law_at = [](int prev, int t, double bias) {
    const double phase = 0.5 + 0.4 * std::sin(0.37 * t);
    std::vector<double> w{1.0 + prev, phase * 2.0, 0.5 + 0.2 * ((t + prev) % 3)};
    w[0] += bias;
    return normalised(w);
  };
  auto run = [&](double actual_bias, uint64_t stream) {
    TransitionTest test(3);
    int prev = 0;
    for (int t = 0; t < 20000; ++t) {
      const int x = draw(law_at(prev, t, actual_bias), philox_uniform(99, stream, static_cast<uint64_t>(t)));
      test.add(prev, x, law_at(prev, t, 0.0));
      prev = x;
    }
    return test.result();
  };
  int below_01 = 0;
  double min_p = 1.0;
  for (int rep = 0; rep < 40; ++rep) {
    const GofResult r = run(0.0, rep);
    REQUIRE(r.df == 6);
    below_01 += r.p_value < 0.01;
    min_p = std::min(min_p, r.p_value);
  }
  INFO("p < 0.01 in " << below_01 << " of 40, min p " << min_p);
  CHECK(below_01 <= 4);  // Binomial(40, 0.01): P[> 4] ~ 1e-5
  CHECK(min_p >= kAlpha);
  const GofResult bad = run(0.3, 1000);
  INFO(bad.detail);
  CHECK_FALSE(bad.passed(kAlpha));
}

TEST_CASE("transition test: zero-probability tokens and rare tokens are checked exactly", "[stats]") {
  SECTION("a token emitted with law 0") {
    TransitionTest test(3);
    for (int t = 0; t < 100; ++t) test.add(0, t % 2, {0.5, 0.5, 0.0});
    CHECK(test.result().passed(kAlpha));
    test.add(0, 2, {0.5, 0.5, 0.0});
    const GofResult r = test.result();
    CHECK(r.zero_cell_violation);
    CHECK_FALSE(r.passed(kAlpha));
  }
  SECTION("a rare token seen far too often") {
    // Expected count 0.01; seen 5 times. Pooled, it barely moves S; the exact binomial tail catches it.
    TransitionTest test(3);
    const std::vector<double> law{0.5, 0.5 - 1e-5, 1e-5};
    for (int t = 0; t < 1000; ++t) test.add(7, t < 5 ? 2 : t % 2, law);
    const GofResult r = test.result();
    INFO(r.detail);
    CHECK(r.rare_cell_p_value < kAlpha);
    CHECK_FALSE(r.passed(kAlpha));
  }
  SECTION("malformed input throws") {
    TransitionTest test(3);
    CHECK_THROWS_AS(test.add(0, 3, {0.5, 0.5, 0.0}), Error);
    CHECK_THROWS_AS(test.add(0, 0, {0.5, 0.6, 0.0}), Error);
    CHECK_THROWS_AS(test.add(0, 0, {0.5, 0.5}), Error);
    CHECK_THROWS_AS(TransitionTest(1), Error);
  }
}
