// Step 4: truncation filters. Every filter recomputes probabilities from the current logits, keeps at
// least one token, and breaks ties inclusively (tied tokens share a fate), so the result never depends on
// token order.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "kernels/sampler_math.h"
#include "verify/logits_processors.h"
#include "verify/mutants.h"

namespace specula {
namespace {

// Indices of finite logits, most probable first (ties by id).
std::vector<int32_t> finite_indices_by_probability(LogitsRow row) {
  std::vector<int32_t> idx;
  idx.reserve(row.size);
  for (int32_t i = 0; i < row.size; ++i)
    if (row.logits[i] != -std::numeric_limits<float>::infinity()) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
    return row.logits[a] > row.logits[b] || (row.logits[a] == row.logits[b] && a < b);
  });
  return idx;
}

// Keeps token x iff the total probability of tokens *strictly better* than x (by `score`, lower is
// better) is below `mass`. The token that crosses `mass` is therefore kept, ties are kept together, and at
// least one token always remains. Shared by top-p (score = -p) and typical-p (score = |-log p - H|).
void keep_by_cumulative_mass(LogitsRow row, const std::vector<double>& p, const std::vector<double>& score,
                             double mass) {
  std::vector<int32_t> idx;
  for (int32_t i = 0; i < row.size; ++i)
    if (p[i] > 0.0) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return score[a] < score[b]; });
  std::vector<char> keep(row.size, 0);
  const bool drop_crossing = mutant_on(Mutant::top_p_drops_crossing_token);
  double strictly_better = 0.0;  // mass of tokens with a strictly smaller score than the current group
  for (size_t g = 0; g < idx.size();) {
    size_t end = g;
    double group_mass = 0.0;
    while (end < idx.size() && score[idx[end]] == score[idx[g]]) group_mass += p[idx[end++]];
    const bool kept = drop_crossing ? (strictly_better + group_mass <= mass || g == 0) : strictly_better < mass;
    if (!kept) break;
    for (size_t j = g; j < end; ++j) keep[idx[j]] = 1;
    strictly_better += group_mass;
    g = end;
  }
  keep_only(row, keep);
}

}  // namespace

// min-p (Nguyen et al. 2024, "Turning up the heat: min-p sampling"): keep p(x) >= m * max p.
void apply_min_p(LogitsRow row, float min_p) {
  const double m = max_logit(row);
  for (int32_t i = 0; i < row.size; ++i)
    if (!min_p_keeps(row.logits[i], m, min_p)) row.logits[i] = -std::numeric_limits<float>::infinity();
}

// top-k (Fan et al. 2018): keep logits >= the k-th largest; ties at the boundary are kept.
void apply_top_k(LogitsRow row, int32_t k) {
  if (k <= 0 || k >= count_finite(row)) return;
  if (mutant_on(Mutant::top_k_breaks_ties_by_index)) {
    const std::vector<int32_t> idx = finite_indices_by_probability(row);
    std::vector<char> keep(row.size, 0);
    for (int32_t j = 0; j < k; ++j) keep[idx[j]] = 1;
    keep_only(row, keep);
    return;
  }
  std::vector<float> values(row.logits, row.logits + row.size);
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  const float kth = values[k - 1];
  for (int32_t i = 0; i < row.size; ++i)
    if (row.logits[i] < kth) row.logits[i] = -std::numeric_limits<float>::infinity();
}

// top-p / nucleus (Holtzman et al. 2020): keep x iff the mass of strictly more probable tokens is < P.
void apply_top_p(LogitsRow row, float top_p) {
  const std::vector<double> p = row_probabilities(row);
  std::vector<double> score(p.size());
  for (size_t i = 0; i < p.size(); ++i) score[i] = -p[i];
  keep_by_cumulative_mass(row, p, score, top_p);
}

// Locally typical sampling (Meister et al. 2023, "Locally Typical Sampling", TACL): rank tokens by
// |-log p(x) - H(p)| and keep the most typical ones until their mass reaches tau (crossing token kept).
void apply_typical_p(LogitsRow row, float typical_p) {
  const std::vector<double> p = row_probabilities(row);
  double entropy = 0.0;
  for (double v : p)
    if (v > 0.0) entropy -= v * std::log(v);
  std::vector<double> score(p.size(), 0.0);
  const bool signed_score = mutant_on(Mutant::typical_signed_score);
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0.0) score[i] = signed_score ? -std::log(p[i]) - entropy : std::fabs(-std::log(p[i]) - entropy);
  keep_by_cumulative_mass(row, p, score, typical_p);
}

// Tail-free sampling (Bricken 2019, "Tail-free sampling"; llama.cpp's definition): sort probabilities
// descending, take the absolute second differences, normalise them to sum 1, and keep the first i tokens
// where i is the first index (>= 1) at which their running sum exceeds z. Ties in the sort are broken by
// token id; with fewer than 3 candidates nothing is removed.
void apply_tfs_z(LogitsRow row, float z) {
  const std::vector<int32_t> idx = finite_indices_by_probability(row);
  if (idx.size() <= 2) return;
  const std::vector<double> p = row_probabilities(row);
  std::vector<double> first(idx.size() - 1), second(idx.size() - 2);
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
  std::vector<char> keep(row.size, 0);
  for (size_t i = 0; i < last; ++i) keep[idx[i]] = 1;
  keep_only(row, keep);
}

// Mirostat v2 (Basu et al. 2021, "Mirostat: a neural text decoding algorithm that directly controls
// perplexity", Alg. 2): keep tokens whose surprise -log2 p(x) is at most mu; if none, keep the most
// probable (ties kept). mu is row state, advanced by SamplerPipeline::advance after each emitted token.
void apply_mirostat_v2(LogitsRow row, double mu) {
  const std::vector<double> p = row_probabilities(row);
  const bool nats = mutant_on(Mutant::mirostat_natural_log_surprise);
  std::vector<char> keep(row.size, 0);
  bool any = false;
  double best = 0.0;
  for (int32_t i = 0; i < row.size; ++i) best = std::max(best, p[i]);
  for (int32_t i = 0; i < row.size; ++i) {
    if (p[i] <= 0.0) continue;
    const double surprise = nats ? -std::log(p[i]) : -std::log2(p[i]);
    keep[i] = surprise <= mu;
    any = any || keep[i];
  }
  if (!any)
    for (int32_t i = 0; i < row.size; ++i) keep[i] = p[i] == best;
  keep_only(row, keep);
}

}  // namespace specula
