// Martingale Pearson / transition test (tests/TESTING.md "Sequences without enumeration"; Anderson & Goodman,
// Ann. Math. Statist. 28, 1957, for the Markov case). See transition_test.h for the statistic.
#include "tests/statistics/transition_test.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/shared/error.h"

namespace specula::stats {

TransitionTest::TransitionTest(int vocab_size, double min_expected)
    : vocab_size_(vocab_size), min_expected_(min_expected) {
  if (vocab_size < 2) fail("TransitionTest: vocab_size must be >= 2, got ", vocab_size);
  if (!(min_expected >= 0.0) || std::isinf(min_expected)) {
    fail("TransitionTest: min_expected must be finite and >= 0, got ", min_expected);
  }
}

void TransitionTest::flush_pending(Stratum& s, int vocab_size) {
  if (s.pending_weight == 0) return;
  if (s.outer.empty()) s.outer.assign(static_cast<size_t>(vocab_size) * vocab_size, 0.0);
  // Only the support of the law contributes; truncated laws (top-k, top-p) have small supports.
  std::vector<int> support;
  for (int i = 0; i < vocab_size; ++i) {
    if (s.pending_law[i] != 0.0) support.push_back(i);
  }
  const double w = static_cast<double>(s.pending_weight);
  for (int i : support) {
    const double wi = w * s.pending_law[i];
    double* row = &s.outer[static_cast<size_t>(i) * vocab_size];
    for (int j : support) row[j] += wi * s.pending_law[j];
  }
  s.pending_weight = 0;
}

void TransitionTest::add(int64_t stratum, int token, const std::vector<double>& law) {
  if (static_cast<int>(law.size()) != vocab_size_) {
    fail("TransitionTest::add: law has ", law.size(), " entries, vocab_size is ", vocab_size_);
  }
  if (token < 0 || token >= vocab_size_) fail("TransitionTest::add: token ", token, " outside [0, ", vocab_size_, ")");
  double sum = 0.0;
  for (int i = 0; i < vocab_size_; ++i) {
    if (!(law[i] >= 0.0) || !std::isfinite(law[i])) fail("TransitionTest::add: law[", i, "] = ", law[i]);
    sum += law[i];
  }
  if (std::abs(sum - 1.0) > 1e-9) fail("TransitionTest::add: law sums to ", sum, ", not 1 (tolerance 1e-9)");
  if (law[token] == 0.0) {
    if (zero_cell_hits_ == 0) {
      std::ostringstream os;
      os << "token " << token << " emitted with probability 0 in stratum " << stratum << " (sample #" << tokens_ << ")";
      zero_cell_detail_ = os.str();
    }
    ++zero_cell_hits_;
  }

  Stratum& s = strata_[stratum];
  if (s.counts.empty()) {
    s.counts.assign(vocab_size_, 0);
    s.expected.assign(vocab_size_, 0.0);
  }
  ++tokens_;
  ++s.visits;
  ++s.counts[token];
  for (int i = 0; i < vocab_size_; ++i) s.expected[i] += law[i];
  if (s.pending_weight > 0 && s.pending_law == law) {
    ++s.pending_weight;
  } else {
    if (s.pending_weight > 0) s.single_law = false;
    flush_pending(s, vocab_size_);
    s.pending_law = law;
    s.pending_weight = 1;
  }
}

GofResult TransitionTest::result() const {
  GofResult r;
  r.zero_cell_violation = zero_cell_hits_ > 0;
  const int v = vocab_size_;
  double total = 0.0;
  int total_df = 0;
  int rare_cells = 0;
  double min_rare_p = 1.0;
  std::string worst_rare;

  struct StratumScore {
    int64_t key;
    double statistic;
    int df;
    double z;  // (S_s - df_s) / sqrt(2 df_s), to rank strata in the failure message
  };
  std::vector<StratumScore> scores;

  for (const auto& [key, s] : strata_) {
    // Rare cells, each on its own with an exact tail (see the header for binomial vs Poisson).
    for (int x = 0; x < v; ++x) {
      const double e = s.expected[x];
      if (!(e > 0.0 && e < min_expected_)) continue;
      ++rare_cells;
      const double p = s.single_law ? binomial_two_sided_p(s.counts[x], s.visits, std::min(1.0, s.pending_law[x]))
                                    : poisson_two_sided_p(s.counts[x], e);
      if (worst_rare.empty() || p < min_rare_p) {
        min_rare_p = p;
        std::ostringstream os;
        os.precision(6);
        os << "stratum " << key << " token " << x << ": observed " << s.counts[x] << ", expected " << e;
        worst_rare = os.str();
      }
    }

    int groups = 0;
    const std::vector<int> group = pool_cells(s.expected, min_expected_, &groups);
    if (groups <= 1) continue;
    // C = diag(sum p) - sum p p^T, then pooled: C' = A C A^T, D' = A D.
    Eigen::MatrixXd c = Eigen::MatrixXd::Zero(groups, groups);
    Eigen::VectorXd d = Eigen::VectorXd::Zero(groups);
    const double w = static_cast<double>(s.pending_weight);
    for (int i = 0; i < v; ++i) {
      const int gi = group[i];
      if (gi < 0) continue;
      d[gi] += static_cast<double>(s.counts[i]) - s.expected[i];
      c(gi, gi) += s.expected[i];
      for (int j = 0; j < v; ++j) {
        const int gj = group[j];
        if (gj < 0) continue;
        double o = w * s.pending_law[i] * s.pending_law[j];
        if (!s.outer.empty()) o += s.outer[static_cast<size_t>(i) * v + j];
        c(gi, gj) -= o;
      }
    }
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(c);
    if (eig.info() != Eigen::Success) fail("TransitionTest: eigen-decomposition failed in stratum ", key);
    const Eigen::VectorXd& lambda = eig.eigenvalues();
    const double lambda_max = lambda.maxCoeff();
    if (!(lambda_max > 0.0)) continue;
    const Eigen::VectorXd proj = eig.eigenvectors().transpose() * d;
    double stat = 0.0;
    int rank = 0;
    for (int i = 0; i < groups; ++i) {
      // Moore-Penrose pseudo-inverse: directions with no variance (the all-ones direction, tokens the law
      // never allowed) are dropped, both from S and from the degrees of freedom.
      if (lambda[i] < 1e-9 * lambda_max) continue;
      stat += proj[i] * proj[i] / lambda[i];
      ++rank;
    }
    total += stat;
    total_df += rank;
    if (rank > 0) scores.push_back({key, stat, rank, (stat - rank) / std::sqrt(2.0 * rank)});
  }

  r.statistic = total;
  r.df = total_df;
  r.p_value = total_df == 0 ? 1.0 : chi_square_upper_tail(total, total_df);
  if (rare_cells > 0) r.rare_cell_p_value = std::min(1.0, min_rare_p * rare_cells);

  std::ostringstream detail;
  detail.precision(6);
  detail << "transition test: " << tokens_ << " tokens in " << strata_.size() << " strata, S = " << r.statistic
         << ", df = " << r.df << ", p = " << r.p_value;
  if (rare_cells > 0) {
    detail << "; rare-cell p = " << r.rare_cell_p_value << " over " << rare_cells << " (worst " << worst_rare << ")";
  }
  if (r.zero_cell_violation) {
    detail << "; ZERO-PROBABILITY tokens emitted " << zero_cell_hits_ << "x, first: " << zero_cell_detail_;
  }
  std::stable_sort(scores.begin(), scores.end(),
                   [](const StratumScore& a, const StratumScore& b) { return a.z > b.z; });
  if (!scores.empty()) {
    detail << "; worst strata:";
    for (size_t j = 0; j < scores.size() && j < 3; ++j) {
      const StratumScore& sc = scores[j];
      const Stratum& s = strata_.at(sc.key);
      detail << " [" << sc.key << "] S " << sc.statistic << " df " << sc.df << " (";
      // The tokens that deviate most in this stratum, observed vs expected.
      std::vector<int> order;
      for (int x = 0; x < v; ++x) {
        if (s.expected[x] > 0.0) order.push_back(x);
      }
      auto resid = [&](int x) { return (static_cast<double>(s.counts[x]) - s.expected[x]) / std::sqrt(s.expected[x]); };
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return std::abs(resid(a)) > std::abs(resid(b)); });
      for (size_t t = 0; t < order.size() && t < 3; ++t) {
        const int x = order[t];
        detail << (t ? ", " : "") << "tok " << x << " obs " << s.counts[x] << " exp " << s.expected[x];
      }
      detail << ")";
    }
  }
  r.detail = detail.str();
  return r;
}

}  // namespace specula::stats
