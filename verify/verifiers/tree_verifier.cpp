// Recursive rejection sampling over a token tree (verify/ALGORITHMS.md §3, Algorithms 2 and 3).
//
// At a node with target law p and children c_1..c_m visited in generation order, child j is accepted with
// probability min(1, p(c_j) / q_j(c_j)) where q_j is the law c_j was drawn from given c_1..c_{j-1}; after
// a rejection p <- norm((p - q_j)+). By the one-step lemma applied recursively the emitted token has law
// p whatever the (adaptive) proposals were (Miao et al. 2023, SpecInfer, Thm. 4.2; Jeon et al. 2024).
//   iid:                  q_j = q                        (every draw, duplicates included, updates p)
//   without replacement:  q_j = norm(q * 1[x not in c_<j])
//   deterministic:        q_j = point mass at c_j         (accept with p(c_j), else zero it: EAGLE)
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"
#include "verify/verifiers/verification.h"

namespace specula {
namespace {

bool contains(const std::vector<Token>& tokens, Token t) {
  return std::find(tokens.begin(), tokens.end(), t) != tokens.end();
}

// The proposal law q_j of one child given its earlier siblings, evaluated token by token (it is only ever
// needed on p's support and at the child itself).
struct SiblingProposal {
  bool point_mass = false;
  Token child = -1;
  const float* q = nullptr;
  const std::vector<Token>* removed = nullptr;  // earlier siblings (without replacement), else null
  double total = 0.0;                           // normaliser of the q with earlier siblings removed

  double operator()(Token x) const {
    if (point_mass) return x == child ? 1.0 : 0.0;
    const double v = removed && contains(*removed, x) ? 0.0 : static_cast<double>(q[x]);
    return total > 0.0 ? v / total : v;
  }
};

}  // namespace

// Every law here is zero outside the support of the row's p (p_cur only shrinks, and q's normaliser skips
// exact zeros), so the vocabulary-wide sums run over the nonzero entries, in id order: the same float64
// sums, hence the same decisions and draws, as loops over the whole vocabulary.
VerifyOutcome verify_tree(const float* p, const TokenTree& tree, int32_t vocab_size, const StepRandom& rng) {
  VerifyOutcome out;
  std::vector<std::vector<int32_t>> children(tree.size() + 1);
  for (int32_t n = 0; n < tree.size(); ++n) children[tree.parent[n] + 1].push_back(n);

  thread_local std::vector<int32_t> support, q_support;  // nonzero ids of the row's p and of its q
  thread_local std::vector<double> p_cur, updated;       // [support]
  thread_local std::vector<Token> drawn;                 // siblings tested so far
  int32_t row = 0;
  while (true) {
    const float* p_row = p + static_cast<size_t>(row) * vocab_size;
    if (children[row].empty()) {  // a leaf (or an empty tree): the bonus token from this row's p
      out.all_accepted = row > 0;
      if (!(row > 0 && mutant_on(Mutant::bonus_missing)))
        out.emitted.push_back(
            sample_categorical(p_row, vocab_size, rng.key(RandomRole::bonus, static_cast<uint32_t>(row))));
      return out;
    }
    nonzero_ids(p_row, vocab_size, support);
    p_cur.resize(support.size());
    updated.resize(support.size());
    for (size_t j = 0; j < support.size(); ++j) p_cur[j] = p_row[support[j]];
    const std::vector<float>& q = tree.q_at_row(row);
    const bool point_mass = q.empty() || tree.scheme == SiblingScheme::deterministic;
    if (!point_mass) nonzero_ids(q.data(), vocab_size, q_support);
    drawn.clear();
    bool accepted = false;
    for (int32_t child : children[row]) {
      const Token c = tree.tokens[child];
      if (mutant_on(Mutant::tree_merge_duplicate_siblings) && contains(drawn, c)) continue;  // merged into one trial
      SiblingProposal q_j{point_mass, c, point_mass ? nullptr : q.data(),
                          tree.scheme == SiblingScheme::without_replacement ? &drawn : nullptr, 0.0};
      if (!point_mass)
        for (const Token x : q_support)
          q_j.total += q_j.removed && contains(drawn, x) ? 0.0 : static_cast<double>(q[x]);
      const double q_c = q_j(c);
      if (q_c <= 0.0) ++out.q_zero_errors;
      const double u = accept_uniform(rng, static_cast<uint32_t>(child + 1));
      const auto at_c = std::lower_bound(support.begin(), support.end(), c);
      const double p_c = at_c != support.end() && *at_c == c ? p_cur[at_c - support.begin()] : 0.0;
      if (accept_draft_token(u, p_c, q_c)) {
        out.emitted.push_back(c);
        out.path.push_back(child);
        ++out.accepted;
        row = child + 1;
        accepted = true;
        break;
      }
      // p <- norm((p - q_j)+); if the residual is empty (p = q_j up to rounding) keep p.
      double total = 0.0;
      for (size_t j = 0; j < support.size(); ++j) total += updated[j] = residual_weight(p_cur[j], q_j(support[j]));
      if (total > 0.0)
        for (size_t j = 0; j < support.size(); ++j) p_cur[j] = updated[j] / total;
      drawn.push_back(c);  // later siblings' laws exclude it (without replacement)
    }
    if (accepted) continue;
    const double v = rng.key(RandomRole::residual, static_cast<uint32_t>(row)).uniform();
    const Token y = sample_listed_weights(support.data(), p_cur.data(), static_cast<int32_t>(support.size()), v);
    out.emitted.push_back(y >= 0 ? y : sample_categorical(p_row, vocab_size, rng.key(RandomRole::residual, row)));
    return out;
  }
}

}  // namespace specula
