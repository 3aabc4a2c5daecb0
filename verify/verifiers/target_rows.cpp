#include "verify/verifiers/target_rows.h"

#include <utility>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"

namespace specula {

TokenHistory row_history(const SamplerPipeline& pipeline, const TokenHistory& committed, const TokenTree& tree,
                         const float* probs, int32_t row) {
  TokenHistory h = pipeline.trimmed(committed);
  if (row == 0 || mutant_on(Mutant::penalties_ignore_draft_prefix)) return h;
  const int32_t V = pipeline.vocab_size();
  for (int32_t n : tree.path_nodes(row - 1))
    h = pipeline.advance(std::move(h), tree.tokens[n], probs + static_cast<size_t>(tree.parent[n] + 1) * V);
  if (mutant_on(Mutant::constraint_state_not_advanced)) h.constraint_state = committed.constraint_state;
  return h;
}

TokenHistory pending_history(const SamplerPipeline& pipeline, const TokenHistory& committed,
                             std::vector<int32_t> path) {
  if (!committed.pending_ids.empty()) fail("pending_history: the committed history has ids still in device memory");
  TokenHistory h = pipeline.trimmed(committed);
  h.output.resize(h.output.size() + path.size(), 0);
  h.pending_ids = std::move(path);
  return h;
}

void process_tree_rows(const SamplerPipeline& pipeline, const float* logits, const TokenHistory& committed,
                       const TokenTree& tree, float* probs) {
  const int32_t V = pipeline.vocab_size();
  if (!pipeline.params().uses_history()) {
    for (int32_t row = 0; row <= tree.size(); ++row)
      pipeline.process(logits + static_cast<size_t>(row) * V, committed, probs + static_cast<size_t>(row) * V);
    return;
  }
  // Topological order: a row's ancestors are processed before it.
  for (int32_t row = 0; row <= tree.size(); ++row) {
    const TokenHistory h = row_history(pipeline, committed, tree, probs, row);
    pipeline.process(logits + static_cast<size_t>(row) * V, h, probs + static_cast<size_t>(row) * V);
  }
}

}  // namespace specula
