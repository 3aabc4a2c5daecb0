// An independent float64 reference of the sampler pipeline, written plainly from the definitions in the
// issue and the stage comments (README "Sampler pipeline"), sharing no code with verify/: no processor,
// no sampler_math helper, not even SamplingParams::active_filters(). The tests compare the code under test
// with it (exact tables, random configs) and draw frequencies against its law. Plain loops, O(V^2) where
// that reads more simply than a sort; V is tiny in every test.
//
// Besides the law it reports `margin`: how close any discrete decision (a filter threshold, a near tie)
// came to flipping. The code under test works on float32 logits, so a decision closer than ~1e-6 to its
// threshold may legitimately go the other way there; random-config tests skip such configs.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula::reference {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Result {
  std::vector<double> probs;                                // the processed law, sums to 1
  double margin = std::numeric_limits<double>::infinity();  // closest a decision came to its threshold
  bool no_token_left = false;                               // the masks removed every token
};

namespace detail {

inline void note(Result& r, double distance) {
  distance = std::fabs(distance);
  if (distance > 0.0) r.margin = std::min(r.margin, distance);
}

inline bool finite_logit(double x) { return x != kNegInf; }

inline int count_finite(const std::vector<double>& x) {
  int n = 0;
  for (double v : x) n += finite_logit(v) ? 1 : 0;
  return n;
}

// softmax over the finite logits; removed tokens get exactly 0.
inline std::vector<double> softmax(const std::vector<double>& x) {
  double m = kNegInf;
  for (double v : x) m = std::max(m, v);
  std::vector<double> p(x.size(), 0.0);
  double z = 0.0;
  for (size_t i = 0; i < x.size(); ++i)
    if (finite_logit(x[i])) z += std::exp(x[i] - m);
  for (size_t i = 0; i < x.size(); ++i)
    if (finite_logit(x[i])) p[i] = std::exp(x[i] - m) / z;
  return p;
}

inline double entropy(const std::vector<double>& p) {
  double h = 0.0;
  for (double v : p)
    if (v > 0.0) h -= v * std::log(v);
  return h;
}

// Any nonzero gap between two distinct candidate logits is a place where float32 rounding could create or
// break a tie; record the smallest.
inline void note_gaps(Result& r, const std::vector<double>& x) {
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = i + 1; j < x.size(); ++j)
      if (finite_logit(x[i]) && finite_logit(x[j])) note(r, x[i] - x[j]);
}

inline void one_hot_argmax(std::vector<double>& x, Result& r) {
  size_t best = 0;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] > x[best]) best = i;  // strict: the lowest id wins a tie
  note_gaps(r, x);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i == best ? 0.0 : kNegInf;
}

// Keeps x iff the mass of tokens with a strictly smaller score is < mass (the "crossing" token is kept,
// tied tokens share a fate). Written as the definition reads: one sum per token.
inline void keep_by_strictly_better_mass(std::vector<double>& x, const std::vector<double>& p,
                                         const std::vector<double>& score, double mass, Result& r) {
  std::vector<double> out = x;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(p[i] > 0.0)) continue;
    double better = 0.0;
    for (size_t j = 0; j < x.size(); ++j)
      if (p[j] > 0.0 && score[j] < score[i]) better += p[j];
    note(r, better - mass);
    if (!(better < mass)) out[i] = kNegInf;
  }
  x = out;
}

// The filters. Each recomputes probabilities from the current logits.
inline void min_p(std::vector<double>& x, double m, Result& r) {
  const std::vector<double> p = softmax(x);
  const double pmax = *std::max_element(p.begin(), p.end());
  for (size_t i = 0; i < x.size(); ++i) {
    if (!finite_logit(x[i])) continue;
    note(r, p[i] / pmax - m);
    if (!(p[i] >= m * pmax)) x[i] = kNegInf;
  }
}

inline void top_k(std::vector<double>& x, int k, Result& r) {
  std::vector<double> finite;
  for (double v : x)
    if (finite_logit(v)) finite.push_back(v);
  if (k <= 0 || k >= static_cast<int>(finite.size())) return;
  std::sort(finite.begin(), finite.end(), [](double a, double b) { return a > b; });
  const double kth = finite[k - 1];
  note_gaps(r, x);
  for (double& v : x)
    if (v < kth) v = kNegInf;
}

inline void top_p(std::vector<double>& x, double mass, Result& r) {
  const std::vector<double> p = softmax(x);
  std::vector<double> score(p.size());
  for (size_t i = 0; i < p.size(); ++i) score[i] = -p[i];
  note_gaps(r, x);
  keep_by_strictly_better_mass(x, p, score, mass, r);
}

// Locally typical: score |-log p - H|, keep while the mass of strictly more typical tokens is < tau.
inline void typical_p(std::vector<double>& x, double tau, Result& r) {
  const std::vector<double> p = softmax(x);
  const double h = entropy(p);
  std::vector<double> score(p.size(), 0.0);
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0.0) score[i] = std::fabs(-std::log(p[i]) - h);
  for (size_t i = 0; i < p.size(); ++i)
    for (size_t j = i + 1; j < p.size(); ++j)
      if (p[i] > 0.0 && p[j] > 0.0 && x[i] != x[j]) note(r, score[i] - score[j]);
  keep_by_strictly_better_mass(x, p, score, tau, r);
}

// Tail-free (llama.cpp): sort p descending (ties by id), second differences |d_i - d_{i+1}| of the first
// differences d_i = p_(i) - p_(i+1), normalised to sum 1; keep the first i tokens for the first i >= 1 whose
// running sum exceeds z. Fewer than 3 candidates, or an all-zero second difference: nothing removed.
inline void tfs_z(std::vector<double>& x, double z, Result& r) {
  const std::vector<double> p = softmax(x);
  std::vector<size_t> order;
  for (size_t i = 0; i < x.size(); ++i)
    if (finite_logit(x[i])) order.push_back(i);
  if (order.size() <= 2) return;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] > x[b]; });
  const size_t n = order.size();
  std::vector<double> d(n - 1), dd(n - 2);
  for (size_t i = 0; i + 1 < n; ++i) d[i] = p[order[i]] - p[order[i + 1]];
  double total = 0.0;
  for (size_t i = 0; i + 2 < n; ++i) {
    dd[i] = std::fabs(d[i] - d[i + 1]);
    total += dd[i];
  }
  if (!(total > 0.0)) return;
  size_t keep = n;
  double running = 0.0;
  for (size_t i = 0; i < dd.size(); ++i) {
    running += dd[i] / total;
    if (i >= 1) note(r, running - z);
    if (running > z && i >= 1) {
      keep = i;
      break;
    }
  }
  note_gaps(r, x);
  for (size_t j = keep; j < n; ++j) x[order[j]] = kNegInf;
}

// Mirostat v2: keep tokens whose surprise -log2 p is at most mu; if none, the most probable (ties kept).
inline void mirostat_v2(std::vector<double>& x, double mu, Result& r) {
  const std::vector<double> p = softmax(x);
  const double pmax = *std::max_element(p.begin(), p.end());
  bool any = false;
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] > 0.0) {
      note(r, -std::log2(p[i]) - mu);
      any = any || -std::log2(p[i]) <= mu;
    }
  for (size_t i = 0; i < p.size(); ++i) {
    if (!(p[i] > 0.0)) continue;
    const bool keep = any ? -std::log2(p[i]) <= mu : p[i] == pmax;
    if (!keep) x[i] = kNegInf;
  }
}

inline bool stage_active(const SamplingParams& s, FilterStage stage) {
  switch (stage) {
    case FilterStage::min_p:
      return s.min_p > 0.0f;
    case FilterStage::top_k:
      return s.top_k > 0;
    case FilterStage::top_p:
      return s.top_p < 1.0f;
    case FilterStage::typical_p:
      return s.typical_p < 1.0f;
    case FilterStage::tfs_z:
      return s.tfs_z < 1.0f;
    case FilterStage::mirostat:
      return s.mirostat == 2;
  }
  return false;
}

}  // namespace detail

// Mirostat's mu for a history (2 tau before the first token).
inline double mirostat_mu(const SamplingParams& s, const TokenHistory& h) {
  return std::isnan(h.mirostat_mu) ? 2.0 * static_cast<double>(s.mirostat_tau) : h.mirostat_mu;
}

// The filters in the order they run: the listed active ones, then active unlisted ones in the canonical
// order min_p, top_k, top_p, typical_p, tfs_z, mirostat.
inline std::vector<FilterStage> filter_order(const SamplingParams& s) {
  const FilterStage canonical[] = {FilterStage::min_p,     FilterStage::top_k, FilterStage::top_p,
                                   FilterStage::typical_p, FilterStage::tfs_z, FilterStage::mirostat};
  std::vector<FilterStage> out;
  for (FilterStage f : s.order)
    if (detail::stage_active(s, f)) out.push_back(f);
  for (FilterStage f : canonical)
    if (detail::stage_active(s, f) && std::find(s.order.begin(), s.order.end(), f) == s.order.end()) out.push_back(f);
  return out;
}

// The whole pipeline, steps 1-5 of the issue, in float64.
inline Result pipeline(std::vector<double> x, const SamplingParams& s, const TokenHistory& h) {
  Result r;
  const size_t V = x.size();
  const std::vector<Token>& out = h.output;

  // 1. masks, then bias.
  if (!s.allowed_tokens.empty()) {
    std::vector<bool> allowed(V, false);
    for (Token t : s.allowed_tokens) allowed[t] = true;
    for (size_t i = 0; i < V; ++i)
      if (!allowed[i]) x[i] = kNegInf;
  }
  for (Token t : s.banned_tokens) x[t] = kNegInf;
  for (const auto& word : s.bad_words) {
    const size_t rest = word.size() - 1;
    bool ends_with_rest = out.size() >= rest;
    for (size_t j = 0; ends_with_rest && j < rest; ++j) ends_with_rest = out[out.size() - rest + j] == word[j];
    if (ends_with_rest) x[word.back()] = kNegInf;
  }
  if (static_cast<int64_t>(out.size()) < s.min_tokens)
    for (Token t : s.stop_tokens) x[t] = kNegInf;
  for (const auto& [t, bias] : s.logit_bias) x[t] += static_cast<double>(bias);
  if (detail::count_finite(x) == 0) {
    r.no_token_left = true;
    return r;
  }

  // 2. penalties.
  const double rep = s.repetition_penalty;
  if (rep != 1.0) {
    std::set<Token> seen(h.prompt.begin(), h.prompt.end());
    seen.insert(out.begin(), out.end());
    for (Token t : seen) x[t] = x[t] > 0.0 ? x[t] / rep : x[t] * rep;
  }
  std::map<Token, int> count;
  for (Token t : out) ++count[t];
  for (const auto& [t, c] : count)
    x[t] -= static_cast<double>(s.frequency_penalty) * c + static_cast<double>(s.presence_penalty) * (c > 0 ? 1 : 0);

  // 3. temperature.
  const double T = s.temperature;
  if (T == 0.0) {
    detail::one_hot_argmax(x, r);
    r.probs = detail::softmax(x);
    return r;
  }
  if (s.dynatemp_range > 0.0f) {
    const int n = detail::count_finite(x);
    if (n > 1) {
      const double t_min = std::max(0.0, T - static_cast<double>(s.dynatemp_range));
      const double t_max = T + static_cast<double>(s.dynatemp_range);
      const double normalized = detail::entropy(detail::softmax(x)) / std::log(static_cast<double>(n));
      const double t = t_min + (t_max - t_min) * std::pow(normalized, static_cast<double>(s.dynatemp_exponent));
      if (t <= 0.0) {
        detail::one_hot_argmax(x, r);
      } else {
        for (double& v : x) v /= t;
      }
    }
  } else {
    for (double& v : x) v /= T;
  }

  // 4. filters.
  for (FilterStage f : filter_order(s)) {
    switch (f) {
      case FilterStage::min_p:
        detail::min_p(x, s.min_p, r);
        break;
      case FilterStage::top_k:
        detail::top_k(x, s.top_k, r);
        break;
      case FilterStage::top_p:
        detail::top_p(x, s.top_p, r);
        break;
      case FilterStage::typical_p:
        detail::typical_p(x, s.typical_p, r);
        break;
      case FilterStage::tfs_z:
        detail::tfs_z(x, s.tfs_z, r);
        break;
      case FilterStage::mirostat:
        detail::mirostat_v2(x, mirostat_mu(s, h), r);
        break;
    }
  }

  // 5. softmax.
  r.probs = detail::softmax(x);
  return r;
}

inline Result pipeline(const std::vector<float>& logits, const SamplingParams& s, const TokenHistory& h) {
  return pipeline(std::vector<double>(logits.begin(), logits.end()), s, h);
}

inline std::vector<double> probs(const std::vector<float>& logits, const SamplingParams& s, const TokenHistory& h) {
  return pipeline(logits, s, h).probs;
}

// Total-variation distance between two laws.
inline double total_variation(const std::vector<double>& a, const std::vector<double>& b) {
  double tv = 0.0;
  for (size_t i = 0; i < a.size(); ++i) tv += std::fabs(a[i] - b[i]);
  return tv / 2.0;
}

}  // namespace specula::reference
