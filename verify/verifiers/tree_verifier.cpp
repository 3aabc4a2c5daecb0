// Recursive rejection sampling over a token tree (ALGORITHMS.md §3, Algorithms 2 and 3).
//
// At a node with target law p and children c_1..c_m visited in generation order, child j is accepted with
// probability min(1, p(c_j) / q_j(c_j)) where q_j is the law c_j was drawn from given c_1..c_{j-1}; after
// a rejection p <- norm((p - q_j)+). By the one-step lemma applied recursively the emitted token has law
// p whatever the (adaptive) proposals were (Miao et al. 2023, SpecInfer, Thm. 4.2; Jeon et al. 2024).
//   iid:                  q_j = q                        (every draw, duplicates included, updates p)
//   without replacement:  q_j = norm(q * 1[x not in c_<j])
//   deterministic:        q_j = point mass at c_j         (accept with p(c_j), else zero it: EAGLE)
#include <cmath>
#include <vector>

#include "kernels/sampler_math.h"
#include "verify/mutants.h"
#include "verify/verifiers/verification.h"

namespace specula {
namespace {

// The proposal law of child j given its earlier siblings.
void sibling_proposal(const TokenTree& tree, const std::vector<float>& q, const std::vector<char>& drawn,
                      Token child, int32_t vocab_size, std::vector<double>& q_j) {
  const bool point_mass = q.empty() || tree.scheme == SiblingScheme::deterministic;
  if (point_mass) {
    std::fill(q_j.begin(), q_j.end(), 0.0);
    q_j[child] = 1.0;
    return;
  }
  double total = 0.0;
  for (int32_t x = 0; x < vocab_size; ++x) {
    const bool removed = tree.scheme == SiblingScheme::without_replacement && drawn[x];
    q_j[x] = removed ? 0.0 : q[x];
    total += q_j[x];
  }
  if (total > 0.0)
    for (double& v : q_j) v /= total;
}

}  // namespace

VerifyOutcome verify_tree(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng) {
  VerifyOutcome out;
  std::vector<std::vector<int32_t>> children(tree.size() + 1);
  for (int32_t n = 0; n < tree.size(); ++n) children[tree.parent[n] + 1].push_back(n);

  std::vector<double> p_cur(vocab_size), q_j(vocab_size), updated(vocab_size);
  std::vector<char> drawn(vocab_size);
  int32_t row = 0;
  while (true) {
    const float* p_row = p + static_cast<size_t>(row) * vocab_size;
    for (int32_t x = 0; x < vocab_size; ++x) p_cur[x] = p_row[x];
    if (children[row].empty()) {  // a leaf (or an empty tree): the bonus token from this row's p
      out.all_accepted = row > 0;
      if (!(row > 0 && mutant_on(Mutant::bonus_missing)))
        out.emitted.push_back(sample_categorical(p_row, vocab_size, rng.key(RandomRole::bonus, static_cast<uint32_t>(row))));
      return out;
    }
    const std::vector<float>& q = tree.q_at_row(row);
    std::fill(drawn.begin(), drawn.end(), 0);
    bool accepted = false;
    for (int32_t child : children[row]) {
      const Token c = tree.tokens[child];
      if (mutant_on(Mutant::tree_merge_duplicate_siblings) && drawn[c]) continue;  // merged into one trial
      sibling_proposal(tree, q, drawn, c, vocab_size, q_j);
      drawn[c] = 1;
      if (q_j[c] <= 0.0) ++out.q_zero_errors;
      const double u = accept_uniform(rng, static_cast<uint32_t>(child + 1));
      if (accept_draft_token(u, p_cur[c], q_j[c])) {
        out.emitted.push_back(c);
        out.path.push_back(child);
        ++out.accepted;
        row = child + 1;
        accepted = true;
        break;
      }
      // p <- norm((p - q_j)+); if the residual is empty (p = q_j up to rounding) keep p.
      double total = 0.0;
      for (int32_t x = 0; x < vocab_size; ++x) total += updated[x] = residual_weight(p_cur[x], q_j[x]);
      if (total > 0.0)
        for (int32_t x = 0; x < vocab_size; ++x) p_cur[x] = updated[x] / total;
    }
    if (accepted) continue;
    const double v = rng.key(RandomRole::residual, static_cast<uint32_t>(row)).uniform();
    const Token y = sample_from_weights(p_cur.data(), vocab_size, v);
    out.emitted.push_back(y >= 0 ? y : sample_categorical(p_row, vocab_size, rng.key(RandomRole::residual, row)));
    return out;
  }
}

}  // namespace specula
