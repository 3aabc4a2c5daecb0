// Martingale Pearson / transition test for sequences whose joint law is too large to enumerate
// (tests/TESTING.md "Sequences without enumeration"). For a Markov target it is the transition-count test of
// Anderson & Goodman, "Statistical inference about Markov chains", Ann. Math. Statist. 28 (1957); with
// history-dependent laws it is the martingale form: each emitted token x with its exact conditional law
// p_t adds e_x - p_t, a martingale difference with conditional covariance diag p_t - p_t p_t^T, so by the
// martingale CLT the normalised sum is asymptotically chi-square.
//
// Stratify only on the emitted prefix (position, previous tokens): never on verifier-internal events
// (accepted, residual, bonus), because only the law given the emitted prefix is guaranteed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tests/statistics/goodness_of_fit.h"

namespace specula::stats {

// Accumulates, per stratum s (an integer key chosen by the caller, e.g. (position, previous token)),
// D_s = sum(e_x - p_t) and C_s = sum(diag p_t - p_t p_t^T) over emitted tokens x with their exact
// conditional law p_t. statistic S = sum_s D_s^T C_s^+ D_s ~ chi^2 with sum rank(C_s) df.
//
// Rare tokens: like g_test, within each stratum the tokens whose expected count sum_t p_t[x] is below
// min_expected are pooled (D -> A D, C -> A C A^T for the 0/1 pooling matrix A) so that a single
// improbable token cannot dominate S (Pearson's 1/E tail), and each is also checked on its own with an
// exact tail: binomial when the stratum saw one law throughout, otherwise Poisson with mean sum_t p_t[x]
// (a Poisson-binomial count's tails are no heavier than that Poisson's, Hoeffding 1956). min_expected = 0
// turns pooling off and gives the plain Anderson-Goodman statistic.
class TransitionTest {
 public:
  explicit TransitionTest(int vocab_size, double min_expected = 20.0);

  // law sums to 1 (within 1e-9; throws specula::Error otherwise); a token with law 0 sets
  // zero_cell_violation.
  void add(int64_t stratum, int token, const std::vector<double>& law);

  // Uses Eigen (pseudo-inverse via SelfAdjointEigenSolver, eigenvalues < 1e-9*max treated as 0).
  GofResult result() const;

  int64_t tokens() const { return tokens_; }
  size_t strata() const { return strata_.size(); }

 private:
  struct Stratum {
    int64_t visits = 0;
    std::vector<int64_t> counts;   // emitted tokens, size V
    std::vector<double> expected;  // sum_t p_t, size V (so D = counts - expected)
    // sum_t p_t p_t^T, row-major V x V; allocated only once a second distinct law appears, because a
    // Markov target shows one law per stratum and then C = n (diag p - p p^T) needs no storage.
    std::vector<double> outer;
    std::vector<double> pending_law;  // the most recent law, not yet folded into `outer`
    int64_t pending_weight = 0;       // how many times pending_law was seen in a row
    bool single_law = true;           // every add() to this stratum had the same law
  };
  static void flush_pending(Stratum& s, int vocab_size);

  int vocab_size_;
  double min_expected_;
  int64_t tokens_ = 0;
  std::map<int64_t, Stratum> strata_;  // ordered, so result() and its detail are deterministic
  int64_t zero_cell_hits_ = 0;
  std::string zero_cell_detail_;  // the first violation, for the failure message
};

}  // namespace specula::stats
