// Random verification cases shared by the CPU test of the verification kernels' per-row algorithms
// (test_verify_kernels_host.cpp) and the GPU parity test (test_cuda_verify.cpp): batches of chains or trees
// with random p / q rows (zeros, one-hots, sub-normalised p so the residual is empty, q = p, point-mass
// q), and the comparison of a kernel's outputs with the reference verifiers (verify/verifiers).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"
#include "verify/device/tree_scheme.h"
#include "verify/verifiers/verification.h"

namespace specula::testing {

enum class VerifyKind { chain, block, tree };
inline const char* verify_kind_name(VerifyKind k) {
  return k == VerifyKind::chain ? "chain" : (k == VerifyKind::block ? "block" : "tree");
}

struct VerifyCase {
  VerifyKind kind = VerifyKind::chain;
  int32_t vocab = 0;
  int32_t width = 0;             // K (chain, block) or N (tree)
  std::vector<float> p;          // [B, width + 1, V]
  std::vector<float> q;          // [B, K, V] or [B, N + 1, V]; rows without kVerifyRowHasQ are not read
  std::vector<int32_t> tokens;   // [B, width]
  std::vector<int32_t> parents;  // [B, N] (tree)
  std::vector<VerifyRowParams> rows;

  int32_t batch() const { return static_cast<int32_t>(rows.size()); }
  int32_t p_rows() const { return width + 1; }
  int32_t q_rows() const { return kind == VerifyKind::tree ? width + 1 : width; }
  const float* p_of(int32_t b) const { return p.data() + static_cast<size_t>(b) * p_rows() * vocab; }
  const float* q_row(int32_t b, int32_t r) const { return q.data() + (static_cast<size_t>(b) * q_rows() + r) * vocab; }
  StepRandom rng(int32_t b) const { return {rows[b].seed, rows[b].sequence, rows[b].step}; }

  // The reference verifiers' input for batch row b.
  TokenTree token_tree(int32_t b) const {
    const VerifyRowParams& r = rows[b];
    TokenTree t;
    for (int32_t i = 0; i < r.num_draft; ++i)
      t.add(tokens[static_cast<size_t>(b) * width + i],
            kind == VerifyKind::tree ? parents[static_cast<size_t>(b) * width + i] : i - 1);
    t.scheme = static_cast<SiblingScheme>(r.scheme);
    if (r.flags & kVerifyRowHasQ) {
      const int32_t n_q = kind == VerifyKind::tree ? r.num_draft + 1 : r.num_draft;
      for (int32_t i = 0; i < n_q; ++i) t.draft_q.emplace_back(q_row(b, i), q_row(b, i) + vocab);
    }
    return t;
  }

  VerifyOutcome reference(int32_t b) const {
    const TokenTree t = token_tree(b);
    switch (kind) {
      case VerifyKind::chain:
        return verify_chain(p_of(b), t, vocab, rng(b));
      case VerifyKind::block:
        return verify_block(p_of(b), t, vocab, rng(b));
      case VerifyKind::tree:
        return verify_tree(p_of(b), t, vocab, rng(b));
    }
    fail("unknown kind");
  }
};

// Host copies of a kernel's outputs.
struct VerifyResult {
  int32_t width = 0;  // E = K + 1 or N + 1
  std::vector<int32_t> emitted, num_emitted, num_accepted, bonus, q_zero_errors, status, path;
  // The expected acceptance (VerifyOutputs::overlap_sum / overlap_count): asked for by outputs(), compared with the
  // reference's when it was (not empty).
  std::vector<double> overlap_sum;
  std::vector<int32_t> overlap_count;

  VerifyResult() = default;
  VerifyResult(int32_t batch, int32_t e, int32_t poison = -7)
      : width(e),
        emitted(static_cast<size_t>(batch) * e, poison),
        num_emitted(batch, poison),
        num_accepted(batch, poison),
        bonus(batch, poison),
        q_zero_errors(batch, poison),
        status(batch, poison),
        path(static_cast<size_t>(batch) * std::max(e - 1, 0), poison),
        overlap_sum(batch, std::nan("")),
        overlap_count(batch, poison) {}
  VerifyOutputs outputs() {
    return {emitted.data(),       num_emitted.data(), num_accepted.data(), bonus.data(),
            q_zero_errors.data(), status.data(),      overlap_sum.data(),  overlap_count.data()};
  }
};

// The expected acceptance of batch row b given the reference's outcome, as VerifyOutputs::overlap_sum defines it: over
// the positions the verifier reached whose row has children (chain, block: rows 0 .. reached - 1 up to the depth;
// tree: row 0, then the row after each accepted node, up to the rejecting row), sum_x min(p(x), q(x)) in index order,
// or p at the first child's token where the row has no q.
struct ReferenceOverlap {
  double sum = 0.0;
  int32_t count = 0;
};
inline ReferenceOverlap reference_overlap(const VerifyCase& c, int32_t b, const VerifyOutcome& ref) {
  const VerifyRowParams& r = c.rows[b];
  const bool has_q = (r.flags & kVerifyRowHasQ) != 0;
  ReferenceOverlap o;
  const auto add = [&](int32_t row, int32_t candidate) {
    const float* p = c.p_of(b) + static_cast<size_t>(row) * c.vocab;
    double sum = 0.0;
    if (!has_q) {
      sum = p[candidate];
    } else {
      const float* q = c.q_row(b, row);
      for (int32_t x = 0; x < c.vocab; ++x) sum += std::min(p[x], q[x]);
    }
    o.sum += sum;
    ++o.count;
  };
  if (c.kind != VerifyKind::tree) {
    const int32_t reached = std::min(r.num_draft, ref.accepted + (ref.all_accepted ? 0 : 1));
    for (int32_t i = 0; i < reached; ++i) add(i, c.tokens[static_cast<size_t>(b) * c.width + i]);
    return o;
  }
  const auto first_child = [&](int32_t row) {
    for (int32_t n = 0; n < r.num_draft; ++n)
      if (c.parents[static_cast<size_t>(b) * c.width + n] == row - 1) return n;
    return -1;
  };
  int32_t row = 0;
  for (int32_t j = 0; j <= ref.accepted; ++j) {
    const int32_t kid = first_child(row);
    if (kid < 0) break;  // a leaf: the bonus row
    add(row, c.tokens[static_cast<size_t>(b) * c.width + kid]);
    if (j < ref.accepted) row = ref.path[static_cast<size_t>(j)] + 1;
  }
  return o;
}

// "" when row b of `r` is the reference verifier's outcome, else what differs.
inline std::string compare_with_reference(const VerifyCase& c, int32_t b, const VerifyResult& r) {
  std::ostringstream os;
  VerifyOutcome ref;
  try {
    ref = c.reference(b);
  } catch (const Error& e) {
    if (r.status[b] != static_cast<int32_t>(VerifyRowStatus::empty_distribution))
      os << "reference threw '" << e.what() << "' but status is " << r.status[b];
    return os.str();
  }
  std::vector<int32_t> emitted(r.emitted.begin() + static_cast<size_t>(b) * r.width,
                               r.emitted.begin() + static_cast<size_t>(b + 1) * r.width);
  const int32_t n = r.num_emitted[b];
  const auto list = [](const std::vector<int32_t>& v) {
    std::ostringstream s;
    for (int32_t x : v) s << x << " ";
    return s.str();
  };
  if (r.status[b] != 0) os << "status " << r.status[b] << "; ";
  if (n != static_cast<int32_t>(ref.emitted.size())) os << "num_emitted " << n << " vs " << ref.emitted.size() << "; ";
  if (n >= 0 && n <= r.width) {
    std::vector<int32_t> got(emitted.begin(), emitted.begin() + n);
    if (got != ref.emitted) os << "emitted [" << list(got) << "] vs [" << list(ref.emitted) << "]; ";
    for (int32_t j = n; j < r.width; ++j)
      if (emitted[j] != -1) os << "emitted[" << j << "] = " << emitted[j] << " past the end; ";
  }
  if (r.num_accepted[b] != ref.accepted) os << "accepted " << r.num_accepted[b] << " vs " << ref.accepted << "; ";
  if (r.bonus[b] != (ref.all_accepted ? 1 : 0)) os << "bonus " << r.bonus[b] << " vs " << ref.all_accepted << "; ";
  if (r.q_zero_errors[b] != ref.q_zero_errors)
    os << "q_zero_errors " << r.q_zero_errors[b] << " vs " << ref.q_zero_errors << "; ";
  if (c.kind == VerifyKind::tree && c.width > 0) {
    std::vector<int32_t> path(r.path.begin() + static_cast<size_t>(b) * c.width,
                              r.path.begin() + static_cast<size_t>(b + 1) * c.width);
    std::vector<int32_t> want = ref.path;
    want.resize(c.width, -1);
    if (path != want) os << "path [" << list(path) << "] vs [" << list(want) << "]; ";
  }
  if (!r.overlap_sum.empty()) {
    // Float64 sums of at most V terms in [0, 1], in another order on a device: ~V * 2^-53 relative apart.
    const ReferenceOverlap want = reference_overlap(c, b, ref);
    if (r.overlap_count[b] != want.count) os << "overlap_count " << r.overlap_count[b] << " vs " << want.count << "; ";
    if (!(std::fabs(r.overlap_sum[b] - want.sum) <= 1e-10 * (1.0 + want.sum)))
      os << "overlap_sum " << r.overlap_sum[b] << " vs " << want.sum << "; ";
  }
  return os.str();
}

class CaseRandom {
 public:
  explicit CaseRandom(uint64_t seed) : rng_(seed) {}
  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  bool chance(double p) { return uniform() < p; }
  int32_t below(int32_t hi) { return std::uniform_int_distribution<int32_t>(0, hi - 1)(rng_); }
  int32_t between(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }
  uint64_t bits() { return rng_(); }

  // A random distribution over V tokens with at least one positive entry: dense, sparse (zeros), one-hot,
  // or peaked; normalised in float64 and rounded to float (so it sums to 1 within float rounding).
  void distribution(float* out, int32_t V) {
    const int style = below(4);
    std::vector<double> w(V);
    double total = 0.0;
    for (int32_t x = 0; x < V; ++x) {
      switch (style) {
        case 0:
          w[x] = uniform();
          break;
        case 1:
          w[x] = chance(0.5) ? uniform() : 0.0;
          break;
        case 2:
          w[x] = 0.0;
          break;
        default:
          w[x] = std::exp(6.0 * (uniform() - 0.5));
          break;
      }
      total += w[x];
    }
    if (!(total > 0.0)) {
      w[below(V)] = 1.0;
      total = 1.0;
    }
    for (int32_t x = 0; x < V; ++x) out[x] = static_cast<float>(w[x] / total);
  }
  // A token drawn from `weights` (any token when they are all zero).
  int32_t draw(const float* weights, int32_t V) {
    double total = 0.0;
    for (int32_t x = 0; x < V; ++x) total += weights[x];
    if (!(total > 0.0)) return below(V);
    double u = uniform() * total;
    for (int32_t x = 0; x < V; ++x) {
      u -= weights[x];
      if (u < 0.0 && weights[x] > 0.0) return x;
    }
    for (int32_t x = V - 1; x >= 0; --x)
      if (weights[x] > 0.0f) return x;
    return 0;
  }

 private:
  std::mt19937_64 rng_;
};

// Target and draft rows for one position: p random, q random, q = p, or p = s * q with s < 1 (sub-normalised
// target: every residual weight is 0, so the draw falls back to p).
inline void random_pq(CaseRandom& g, float* p, float* q, int32_t V) {
  g.distribution(q, V);
  const int style = g.below(8);
  if (style == 0) {
    std::copy(q, q + V, p);
  } else if (style == 1) {
    const float s = static_cast<float>(0.2 + 0.7 * g.uniform());
    for (int32_t x = 0; x < V; ++x) p[x] = s * q[x];
  } else {
    g.distribution(p, V);
  }
}

inline VerifyRowParams random_row_params(CaseRandom& g, int32_t num_draft, bool has_q, int32_t scheme) {
  VerifyRowParams r;
  r.seed = g.bits();
  r.sequence = g.bits() >> 10;
  r.step = g.bits() >> 20;
  r.num_draft = num_draft;
  r.flags = has_q ? kVerifyRowHasQ : 0u;
  r.scheme = scheme;
  return r;
}

// A batch of chains for chain or block verification: K drafts per row (each row uses num_draft <= K of
// them), drawn from q, from p, or anywhere (q = 0 and p = 0 drafts included).
inline VerifyCase random_chain_case(uint64_t seed, VerifyKind kind, int32_t batch, int32_t vocab, int32_t K) {
  CaseRandom g(seed);
  VerifyCase c;
  c.kind = kind;
  c.vocab = vocab;
  c.width = K;
  c.p.resize(static_cast<size_t>(batch) * (K + 1) * vocab);
  c.q.resize(static_cast<size_t>(batch) * K * vocab);
  c.tokens.resize(static_cast<size_t>(batch) * K);
  for (int32_t b = 0; b < batch; ++b) {
    const bool has_q = g.chance(0.75);
    c.rows.push_back(random_row_params(g, g.chance(0.7) ? K : g.between(0, K), has_q, 0));
    float* p = c.p.data() + static_cast<size_t>(b) * (K + 1) * vocab;
    for (int32_t i = 0; i < K; ++i) {
      float* q = c.q.data() + (static_cast<size_t>(b) * K + i) * vocab;
      random_pq(g, p + static_cast<size_t>(i) * vocab, q, vocab);
      const int how = g.below(10);
      c.tokens[static_cast<size_t>(b) * K + i] = how < 7   ? g.draw(q, vocab)
                                                 : how < 9 ? g.draw(p + static_cast<size_t>(i) * vocab, vocab)
                                                           : g.below(vocab);
    }
    g.distribution(p + static_cast<size_t>(K) * vocab, vocab);
  }
  return c;
}

// A batch of random trees of at most N nodes: parents uniform over earlier nodes (or the root), siblings
// drawn i.i.d. from q (duplicates included), without replacement, or chosen (top of q, any token). Bushy trees
// hang most nodes under the root or one of the first nodes; `deep` trees mostly extend the previous node.
inline VerifyCase random_tree_case(uint64_t seed, int32_t batch, int32_t vocab, int32_t N, bool deep = false) {
  CaseRandom g(seed);
  VerifyCase c;
  c.kind = VerifyKind::tree;
  c.vocab = vocab;
  c.width = N;
  c.p.resize(static_cast<size_t>(batch) * (N + 1) * vocab);
  c.q.resize(static_cast<size_t>(batch) * (N + 1) * vocab);
  c.tokens.assign(static_cast<size_t>(batch) * N, 0);
  c.parents.assign(static_cast<size_t>(batch) * N, -1);
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t n = N == 0 || g.chance(0.1) ? 0 : g.between(1, N);
    const int32_t scheme = g.below(3);
    const bool has_q = g.chance(0.8);
    c.rows.push_back(random_row_params(g, n, has_q, scheme));
    for (int32_t r = 0; r <= N; ++r)
      random_pq(g, c.p.data() + (static_cast<size_t>(b) * (N + 1) + r) * vocab,
                c.q.data() + (static_cast<size_t>(b) * (N + 1) + r) * vocab, vocab);
    int32_t* tokens = c.tokens.data() + static_cast<size_t>(b) * N;
    int32_t* parents = c.parents.data() + static_cast<size_t>(b) * N;
    for (int32_t i = 0; i < n; ++i)
      parents[i] = deep ? (g.chance(0.85) ? i - 1 : g.between(-1, i - 1))
                        : (g.chance(0.3) ? -1 : g.between(-1, std::min(i - 1, 2)));
    for (int32_t i = 0; i < n; ++i) {
      const float* q = c.q_row(b, parents[i] + 1);
      std::vector<char> used(vocab, 0);
      for (int32_t j = 0; j < i; ++j)
        if (parents[j] == parents[i]) used[tokens[j]] = 1;
      int32_t t = g.chance(0.9) ? g.draw(q, vocab) : g.below(vocab);
      if (scheme != static_cast<int32_t>(TreeSiblingScheme::iid))  // distinct siblings, if there is room
        for (int tries = 0; used[t] && tries < 4 * vocab; ++tries)
          t = g.chance(0.5) ? g.draw(q, vocab) : g.below(vocab);
      tokens[i] = t;
    }
  }
  return c;
}

inline ChainVerifyParams chain_params(const VerifyCase& c, VerifyResult& r) {
  ChainVerifyParams p;
  p.p = c.p.data();
  p.q = c.q.empty() ? nullptr : c.q.data();
  p.draft = c.tokens.empty() ? nullptr : c.tokens.data();
  p.rows = c.rows.data();
  p.out = r.outputs();
  p.batch = c.batch();
  p.max_draft = c.width;
  p.vocab = c.vocab;
  return p;
}

inline TreeVerifyParams tree_params(const VerifyCase& c, VerifyResult& r) {
  TreeVerifyParams p;
  p.p = c.p.data();
  p.q = c.q.data();
  p.tokens = c.tokens.empty() ? nullptr : c.tokens.data();
  p.parents = c.parents.empty() ? nullptr : c.parents.data();
  p.rows = c.rows.data();
  p.out = r.outputs();
  p.path = r.path.empty() ? nullptr : r.path.data();
  p.batch = c.batch();
  p.max_nodes = c.width;
  p.vocab = c.vocab;
  return p;
}

// Runs a case through the CPU backend of the kernels' per-row algorithms.
inline VerifyResult run_host(const VerifyCase& c, VerifyRules rules = VerifyRules::exact) {
  VerifyResult r(c.batch(), c.width + 1);
  if (c.kind == VerifyKind::tree) {
    run_tree_verify_host(tree_params(c, r), rules);
  } else if (c.kind == VerifyKind::chain) {
    run_chain_verify_host(chain_params(c, r), rules);
  } else {
    BlockVerifyParams p;
    static_cast<ChainVerifyParams&>(p) = chain_params(c, r);
    run_block_verify_host(p, rules);
  }
  return r;
}

// One-position exact-law case (tests/TESTING.md battery E, reduced to the first emitted token): every row has
// the same target p_1 and draft q_1, a draft drawn from q_1 by an independent generator, and its own
// sequence number, so the rows are independent repetitions and the first emitted token has law p_1.
//   chain, block: K = 2 drafts; tree: three i.i.d. siblings under the root, one child under the first.
struct LawCase {
  VerifyCase c;
  std::vector<double> law;  // p_1 normalised in float64
};

inline LawCase law_case(VerifyKind kind, int32_t batch, uint64_t seed) {
  constexpr int32_t V = 6;
  const float p1[V] = {0.30f, 0.05f, 0.25f, 0.0f, 0.15f, 0.25f};
  const float q1[V] = {0.05f, 0.40f, 0.10f, 0.20f, 0.15f, 0.10f};
  const float p2[V] = {0.10f, 0.30f, 0.20f, 0.10f, 0.20f, 0.10f};
  const float q2[V] = {0.20f, 0.20f, 0.10f, 0.20f, 0.10f, 0.20f};
  CaseRandom g(seed);
  LawCase out;
  VerifyCase& c = out.c;
  c.kind = kind;
  c.vocab = V;
  const bool tree = kind == VerifyKind::tree;
  c.width = tree ? 4 : 2;
  const int32_t p_rows = c.width + 1, q_rows = tree ? c.width + 1 : c.width;
  c.p.resize(static_cast<size_t>(batch) * p_rows * V);
  c.q.resize(static_cast<size_t>(batch) * q_rows * V);
  c.tokens.resize(static_cast<size_t>(batch) * c.width);
  if (tree) c.parents.resize(static_cast<size_t>(batch) * c.width);
  for (int32_t b = 0; b < batch; ++b) {
    VerifyRowParams r;
    r.seed = 0x1a3c5e7ull;
    r.sequence = static_cast<uint64_t>(b);
    r.step = 3;
    r.num_draft = c.width;
    r.flags = kVerifyRowHasQ;
    r.scheme = static_cast<int32_t>(TreeSiblingScheme::iid);
    c.rows.push_back(r);
    for (int32_t i = 0; i < p_rows; ++i)
      std::copy(i == 0 ? p1 : p2, (i == 0 ? p1 : p2) + V, c.p.begin() + (static_cast<size_t>(b) * p_rows + i) * V);
    for (int32_t i = 0; i < q_rows; ++i)
      std::copy(i == 0 ? q1 : q2, (i == 0 ? q1 : q2) + V, c.q.begin() + (static_cast<size_t>(b) * q_rows + i) * V);
    int32_t* tokens = c.tokens.data() + static_cast<size_t>(b) * c.width;
    if (tree) {
      int32_t* parents = c.parents.data() + static_cast<size_t>(b) * c.width;
      const int32_t shape[4] = {-1, -1, -1, 0};  // three i.i.d. siblings under the root, one under node 0
      for (int32_t i = 0; i < 4; ++i) {
        parents[i] = shape[i];
        tokens[i] = g.draw(shape[i] < 0 ? q1 : q2, V);
      }
    } else {
      tokens[0] = g.draw(q1, V);
      tokens[1] = g.draw(q2, V);
    }
  }
  double total = 0.0;
  for (float x : p1) total += x;
  for (float x : p1) out.law.push_back(x / total);
  return out;
}

// Counts of the first emitted token over the rows of a result.
inline std::vector<int64_t> first_token_counts(const VerifyResult& r, int32_t batch, int32_t V) {
  std::vector<int64_t> counts(V, 0);
  for (int32_t b = 0; b < batch; ++b) {
    const int32_t t = r.emitted[static_cast<size_t>(b) * r.width];
    if (t >= 0 && t < V) ++counts[t];
  }
  return counts;
}

}  // namespace specula::testing
