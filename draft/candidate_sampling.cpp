#include "draft/candidate_sampling.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "kernels/shared/mutation_points.h"
#include "verify/sampling/categorical.h"

namespace specula {

std::vector<Token> draw_children(const float* q, int32_t vocab_size, int32_t count, SiblingScheme scheme,
                                 const StepRandom& rng, uint32_t& slot) {
  std::vector<Token> out;
  if (scheme == SiblingScheme::deterministic) {
    std::vector<Token> idx(vocab_size);
    std::iota(idx.begin(), idx.end(), 0);
    const int32_t n = std::min(count, vocab_size);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                      [&](Token a, Token b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
    out.assign(idx.begin(), idx.begin() + n);
    return out;
  }
  if (scheme == SiblingScheme::iid) {
    const bool prune = mutant_on(Mutant::tree_prune_stochastic_by_q) && count > 1;
    const int32_t draws = prune ? count + 1 : count;
    for (int32_t j = 0; j < draws; ++j)
      out.push_back(sample_categorical(q, vocab_size, rng.key(RandomRole::draft, slot++)));
    if (prune) {  // keep the `count` most confident draws: NOT exact (verify/ALGORITHMS.md §3)
      std::stable_sort(out.begin(), out.end(), [&](Token a, Token b) { return q[a] > q[b]; });
      out.resize(count);
    }
    return out;
  }
  // Without replacement: sequential draws from q with earlier picks removed (same law as Gumbel-top-k).
  std::vector<float> remaining(q, q + vocab_size);
  for (int32_t j = 0; j < count; ++j) {
    const Token t = sample_from_weights(remaining.data(), vocab_size, rng.key(RandomRole::draft, slot++).uniform());
    if (t < 0) break;  // support exhausted
    out.push_back(t);
    remaining[t] = 0.0f;
  }
  return out;
}

bool ranked_tree(const DraftRequest& request) {
  return !request.tree_shape.empty() && request.scheme == SiblingScheme::deterministic;
}

std::vector<int32_t> draft_shape(const DraftRequest& request) {
  if (!request.tree_shape.empty()) return request.tree_shape;
  return std::vector<int32_t>(std::max(request.num_draft_tokens, 0), 1);
}

TokenTree sample_draft_tree(const DraftRequest& request, int32_t vocab_size, const RowLaws& row_laws,
                            const RowLaws& doubt_laws) {
  TokenTree tree;
  tree.scheme = request.tree_shape.empty() ? SiblingScheme::iid : request.scheme;
  tree.draft_q.emplace_back();
  std::vector<int32_t> frontier = {0};  // rows whose children are drawn next
  std::vector<std::vector<float>> laws, doubts;
  uint32_t slot = 0;
  const bool doubted = doubt_laws && request.confidence_threshold > 0.0f;
  for (int32_t branching : draft_shape(request)) {
    laws.assign(frontier.size(), {});
    row_laws(tree, frontier, laws);
    if (doubted) {
      doubts.assign(frontier.size(), {});
      doubt_laws(tree, frontier, doubts);
    }
    std::vector<int32_t> next_frontier;
    for (size_t i = 0; i < frontier.size(); ++i) {
      for (Token c : draw_children(laws[i].data(), vocab_size, branching, tree.scheme, request.rng, slot)) {
        tree.add(c, frontier[i] - 1);
        tree.draft_q.emplace_back();
        next_frontier.push_back(tree.size());
      }
      const bool doubt = stops_after_doubt(request, (doubted ? doubts : laws)[i].data(), tree);
      tree.draft_q[frontier[i]] = std::move(laws[i]);
      if (doubt) next_frontier.clear();
    }
    frontier = std::move(next_frontier);
    if (frontier.empty()) break;
  }
  // Deterministic candidates are verified as point masses: their recorded q is not a sampling law.
  if (tree.scheme == SiblingScheme::deterministic) tree.draft_q.clear();
  tree.draft_q.resize(tree.size() + 1);
  return tree;
}

bool stops_after_doubt(const DraftRequest& request, const float* q, TokenTree& tree) {
  if (request.confidence_threshold <= 0.0f || !request.tree_shape.empty() || tree.size() == 0) return false;
  if (q[tree.tokens.back()] >= request.confidence_threshold) return false;
  if (mutant_on(Mutant::confidence_stop_drops_draft)) {  // NOT exact: the stop decided by the draft it drops
    tree.tokens.pop_back();
    tree.parent.pop_back();
    if (tree.draft_q.size() > static_cast<size_t>(tree.size()) + 1) tree.draft_q.pop_back();
  }
  return true;
}

TokenHistory path_history(const SamplerPipeline& pipeline, const TokenHistory& committed, const TokenTree& tree,
                          int32_t row, const std::function<const float*(int32_t)>& law_of_row) {
  TokenHistory h = pipeline.trimmed(committed);
  if (row == 0) return h;
  for (int32_t n : tree.path_nodes(row - 1))
    h = pipeline.advance(std::move(h), tree.tokens[n], law_of_row(tree.parent[n] + 1));
  return h;
}

}  // namespace specula
