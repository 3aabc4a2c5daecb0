// Exact-law goodness-of-fit tests used by every distribution test (tests/TESTING.md "Statistics"): a G-test
// (or Pearson) with cells pooled until every expected count is >= 20, plus two exact checks that the
// chi-square approximation cannot make: a sample in a probability-0 cell fails at once, and every rare
// cell gets an exact binomial tail. All arithmetic is float64; p-values come from Boost.Math.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specula::stats {

// The suite-wide false-alarm level for one assertion. Bonferroni: the suite's ~160 law assertions at 1e-6
// (each at most ~2e-6 with its rare-cell check) keep the family-wise false-alarm rate below 4e-4
// (tests/TESTING.md "Multiple tests"). Seeds are fixed, so a
// failure reproduces; re-seed and look before believing one that appears after a change in how
// randomness is consumed.
constexpr double kAlpha = 1e-6;

struct GofResult {
  double statistic = 0;              // G (or Pearson X^2) after pooling
  int df = 0;                        // cells after pooling - 1 (minus extra constraints)
  double p_value = 1;                // of the chi-square approximation
  bool zero_cell_violation = false;  // a sample fell in a cell with probability 0 -> immediate failure
  double rare_cell_p_value = 1;      // smallest exact tail p over rare cells (expected < min_expected),
                                     // Bonferroni-corrected by the number of rare cells
  std::string detail;                // human-readable: worst cells, observed vs expected, for failure messages
  // !zero_cell_violation && p_value >= alpha && rare_cell_p_value >= alpha
  bool passed(double alpha) const;
};

// Observed counts per cell vs exact probabilities (sum to 1 within 1e-9; throws specula::Error otherwise).
// Cells with expected count < min_expected are pooled (smallest first, into one or more pooled cells each
// with expected >= min_expected; a remainder is merged into the last pooled cell, or into the smallest
// ordinary cell when the rare cells together stay below min_expected), and ALSO each checked individually
// with an exact binomial tail. Cells with probability exactly 0 take no part in the chi-square statistic:
// a sample there sets zero_cell_violation. If after pooling there is only 1 cell, df = 0 and p_value = 1.
GofResult g_test(const std::vector<int64_t>& observed, const std::vector<double>& probs, double min_expected = 20.0);
GofResult pearson_test(const std::vector<int64_t>& observed, const std::vector<double>& probs,
                       double min_expected = 20.0);

// Exact two-sided binomial tail probability for k successes out of n with success prob p (Boost.Math
// ibeta): min(1, 2 min(P[X <= k], P[X >= k])), the "doubled smaller tail" (central) definition.
double binomial_two_sided_p(int64_t k, int64_t n, double p);

// Upper tail of chi-square(df) at x via boost::math::gamma_q(df/2, x/2). df <= 0 or x <= 0 gives 1.
double chi_square_upper_tail(double x, int df);

// Binomial test for an event count vs an exact expected rate (e.g. acceptance rate vs sum min(p,q)):
// the two-sided exact binomial p-value.
double binomial_rate_p(int64_t successes, int64_t trials, double expected_rate);

// Mean-test: |mean - expected| in standard errors, for counts like accepted tokens per step (normal
// approximation). sample_sd is the sample standard deviation of one observation; a zero sd gives 0 when
// the means agree exactly and +infinity otherwise.
double z_score(double sample_mean, double sample_sd, int64_t n, double expected_mean);

// Two-sided normal tail for a z score, erfc(|z| / sqrt 2), so z_score can be compared with kAlpha.
double normal_two_sided_p(double z);

// Exact two-sided Poisson tail for a count k with mean mu (same doubled-smaller-tail definition).
double poisson_two_sided_p(int64_t k, double mu);

// The pooling rule shared by g_test, pearson_test and TransitionTest. Returns, per cell, the index of the
// cell after pooling (-1 for cells with expected exactly 0, which take no part) and sets *num_groups.
// Cells with expected >= min_expected keep a group of their own (numbered first, in cell order); the rest
// are sorted by expected count, smallest first, and filled into pooled groups that are closed as soon as
// they reach min_expected. A remainder below min_expected joins the last pooled group, or, when no pooled
// group was closed, the smallest ordinary cell; only when the whole total is below min_expected can a
// group stay below it (it is then the only group).
std::vector<int> pool_cells(const std::vector<double>& expected, double min_expected, int* num_groups);

}  // namespace specula::stats
