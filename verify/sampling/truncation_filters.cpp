// Step 4: truncation filters, on the row's candidates (the tokens the cut left; all others are removed).
// Every filter recomputes probabilities from the current logits, keeps at least one token, and breaks ties
// inclusively (tied tokens share a fate), so the result never depends on token order.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"

namespace specula {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Positions of the candidates that are not -inf, most probable first (ties by id). A full sort: only
// tail-free sampling, which needs every second difference, and the top-k mutant use it.
void positions_by_probability(const Candidates& c, std::vector<int32_t>& order) {
  order.clear();
  for (int32_t j = 0; j < c.size(); ++j)
    if (c.logits[j] != kNegInf) order.push_back(j);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return c.logits[a] > c.logits[b] || (c.logits[a] == c.logits[b] && a < b); });
}

// Keeps candidate x iff the total probability of candidates *strictly better* than x (by `score`, lower is
// better) is below `mass`. The candidate that crosses `mass` is therefore kept, ties are kept together, and
// at least one remains. Shared by top-p (score = -p) and typical-p (score = |-log p - H|). Candidates
// with p = 0 are removed. The ranking is sorted only as far as the scan needs: a doubling partial sort,
// so a nucleus of n tokens among N candidates costs O(N log n), not a sort of all N.
void keep_by_cumulative_mass(Candidates& c, const std::vector<double>& p, const std::vector<double>& score,
                             double mass) {
  thread_local std::vector<int32_t> idx;
  thread_local std::vector<char> keep;
  idx.clear();
  for (int32_t j = 0; j < c.size(); ++j)
    if (p[j] > 0.0) idx.push_back(j);
  const auto better = [&](int32_t a, int32_t b) { return score[a] < score[b] || (score[a] == score[b] && a < b); };
  size_t sorted = 0;                           // idx[0, sorted) holds the best candidates, in order
  const auto sorted_through = [&](size_t i) {  // is idx[i] in place (false: past the end)?
    if (i >= idx.size()) return false;
    if (i >= sorted) {
      const size_t upto = std::min(idx.size(), std::max(i + 1, 2 * sorted + 16));
      std::partial_sort(idx.begin() + static_cast<std::ptrdiff_t>(sorted),
                        idx.begin() + static_cast<std::ptrdiff_t>(upto), idx.end(), better);
      sorted = upto;
    }
    return true;
  };
  keep.assign(c.ids.size(), 0);
  const bool drop_crossing = mutant_on(Mutant::top_p_drops_crossing_token);
  double strictly_better = 0.0;  // mass of candidates with a strictly smaller score than the current group
  for (size_t g = 0; sorted_through(g);) {
    size_t end = g;
    double group_mass = 0.0;
    while (sorted_through(end) && score[idx[end]] == score[idx[g]]) group_mass += p[idx[end++]];
    const bool kept = drop_crossing ? (strictly_better + group_mass <= mass || g == 0)
                                    : top_p_keeps(strictly_better, 1.0, mass);  // probabilities sum to 1
    if (!kept) break;
    for (size_t j = g; j < end; ++j) keep[idx[j]] = 1;
    strictly_better += group_mass;
    g = end;
  }
  c.keep_if([&](size_t j) { return keep[j] != 0; });
}

}  // namespace

MinPWindow min_p_window(float max_logit, float min_p) {
  // Four float steps either side of the bisection's threshold: exp is monotone up to an ulp, and neighbouring
  // floats differ by far more than an ulp of exp there, so every decision outside the window is certain.
  constexpr uint32_t kSlack = 4;
  const uint32_t key = float_order_key(min_p_threshold(max_logit, min_p));
  const uint32_t lowest = float_order_key(kNegInf), highest = float_order_key(max_logit);
  return {float_from_order_key(key - lowest > kSlack ? key - kSlack : lowest),
          float_from_order_key(highest - key > kSlack ? key + kSlack : highest)};
}

// min-p (Nguyen et al. 2024, "Turning up the heat: min-p sampling"): keep p(x) >= m * max p. Decided by the
// threshold min_p_threshold, with the exact predicate min_p_keeps for the few logits next to it.
void apply_min_p(Candidates& c, float min_p) {
  const float m = max_logit(c);
  if (!std::isfinite(m)) {  // nothing to threshold against: the predicate decides every candidate
    c.keep_if([&](size_t j) { return min_p_keeps(c.logits[j], m, min_p); });
    return;
  }
  const MinPWindow w = min_p_window(m, min_p);
  c.keep_if([&](size_t j) {
    const float x = c.logits[j];
    if (x >= w.upper) return true;
    if (x < w.lower) return false;
    return min_p_keeps(x, m, min_p);
  });
}

// top-k (Fan et al. 2018): keep logits >= the k-th largest; ties at the boundary are kept.
void apply_top_k(Candidates& c, int32_t k) {
  if (k <= 0 || k >= count_finite(c)) return;
  if (mutant_on(Mutant::top_k_breaks_ties_by_index)) {
    thread_local std::vector<int32_t> order;
    thread_local std::vector<char> keep;
    positions_by_probability(c, order);
    keep.assign(c.ids.size(), 0);
    for (int32_t j = 0; j < k; ++j) keep[order[j]] = 1;
    c.keep_if([&](size_t j) { return keep[j] != 0; });
    return;
  }
  thread_local std::vector<float> values;
  values = c.logits;
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  const float kth = values[k - 1];
  c.keep_if([&](size_t j) { return top_k_keeps(c.logits[j], kth); });
}

// top-p / nucleus (Holtzman et al. 2020): keep x iff the mass of strictly more probable tokens is < P.
void apply_top_p(Candidates& c, float top_p) {
  thread_local std::vector<double> p, score;
  candidate_probabilities(c, p);
  score.resize(p.size());
  for (size_t j = 0; j < p.size(); ++j) score[j] = -p[j];
  keep_by_cumulative_mass(c, p, score, top_p);
}

// Locally typical sampling (Meister et al. 2023, "Locally Typical Sampling", TACL): rank tokens by
// |-log p(x) - H(p)| and keep the most typical ones until their mass reaches tau (crossing token kept).
void apply_typical_p(Candidates& c, float typical_p) {
  thread_local std::vector<double> p, score;
  candidate_probabilities(c, p);
  double entropy = 0.0;
  for (double v : p)
    if (v > 0.0) entropy -= v * std::log(v);
  score.assign(p.size(), 0.0);
  const bool signed_score = mutant_on(Mutant::typical_signed_score);
  for (size_t j = 0; j < p.size(); ++j)
    if (p[j] > 0.0) score[j] = signed_score ? -std::log(p[j]) - entropy : std::fabs(-std::log(p[j]) - entropy);
  keep_by_cumulative_mass(c, p, score, typical_p);
}

// Tail-free sampling (Bricken 2019, "Tail-free sampling"; llama.cpp's definition): sort probabilities
// descending, take the absolute second differences, normalise them to sum 1, and keep the first i tokens
// where i is the first index (>= 1) at which their running sum exceeds z. Ties in the sort are broken by
// token id; with fewer than 3 candidates nothing is removed.
void apply_tfs_z(Candidates& c, float z) {
  thread_local std::vector<int32_t> idx;
  thread_local std::vector<double> p, first, second;
  thread_local std::vector<char> keep;
  positions_by_probability(c, idx);
  if (idx.size() <= 2) return;
  candidate_probabilities(c, p);
  first.resize(idx.size() - 1);
  second.resize(idx.size() - 2);
  for (size_t i = 0; i + 1 < idx.size(); ++i) first[i] = p[idx[i]] - p[idx[i + 1]];
  for (size_t i = 0; i + 2 < idx.size(); ++i) second[i] = std::fabs(first[i] - first[i + 1]);
  if (mutant_on(Mutant::tfs_first_derivative))
    for (size_t i = 0; i < second.size(); ++i) second[i] = std::fabs(first[i]);
  const double total = std::accumulate(second.begin(), second.end(), 0.0);
  if (!(total > 0.0)) return;  // a flat or linear tail: nothing to cut
  size_t last = idx.size();
  double cumulative = 0.0;
  for (size_t i = 0; i < second.size(); ++i) {
    cumulative += second[i] / total;
    if (cumulative > z && i >= 1) {
      last = i;
      break;
    }
  }
  keep.assign(c.ids.size(), 0);
  for (size_t i = 0; i < last; ++i) keep[idx[i]] = 1;
  c.keep_if([&](size_t j) { return keep[j] != 0; });
}

// Mirostat v2 (Basu et al. 2021, "Mirostat: a neural text decoding algorithm that directly controls
// perplexity", Alg. 2): keep tokens whose surprise -log2 p(x) is at most mu; if none, keep the most
// probable (ties kept). mu is row state, advanced by SamplerPipeline::advance after each emitted token.
void apply_mirostat_v2(Candidates& c, double mu) {
  thread_local std::vector<double> p;
  thread_local std::vector<char> keep;
  candidate_probabilities(c, p);
  const bool nats = mutant_on(Mutant::mirostat_natural_log_surprise);
  keep.assign(p.size(), 0);
  bool any = false;
  double best = 0.0;
  for (double v : p) best = std::max(best, v);
  for (size_t j = 0; j < p.size(); ++j) {
    if (p[j] <= 0.0) continue;
    const double surprise = nats ? -std::log(p[j]) : -std::log2(p[j]);
    keep[j] = surprise <= mu;
    any = any || keep[j];
  }
  if (!any)
    for (size_t j = 0; j < p.size(); ++j) keep[j] = p[j] == best;
  c.keep_if([&](size_t j) { return keep[j] != 0; });
}

}  // namespace specula
