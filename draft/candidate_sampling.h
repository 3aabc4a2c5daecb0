// Drawing draft candidates from a law q, shared by every drafter that samples (model, n-gram, synthetic):
// the children of one tree row under a sibling scheme, and a whole draft tree built depth by depth from a
// per-row law. What is recorded in TokenTree::draft_q is exactly the q each row's children were drawn from
// (verify/ALGORITHMS.md §1 "Edge cases": store the very tensor the sampler drew from).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "draft/drafter.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/token_tree.h"

namespace specula {

// Draws `count` children of one row from q [V] (verify/ALGORITHMS.md §3):
//   iid                  count independent draws (duplicates kept: each is one trial of the verifier)
//   without_replacement  sequential draws with earlier picks removed (stops early if q's support runs out)
//   deterministic        the `count` largest q, lowest id on ties (verified as point masses)
// Each random draw uses rng.key(RandomRole::draft, slot++).
std::vector<Token> draw_children(const float* q, int32_t vocab_size, int32_t count, SiblingScheme scheme,
                                 const StepRandom& rng, uint32_t& slot);

// Fills laws[i] ([V], sums to 1) with the law the children of rows[i] are drawn from. When called, the
// rows of every ancestor already hold their law in tree.draft_q.
using RowLaws =
    std::function<void(const TokenTree& tree, const std::vector<int32_t>& rows, std::vector<std::vector<float>>& laws)>;

// A draft tree of the request's shape (a chain of K when tree_shape is empty, drawn i.i.d.), built depth by
// depth: `row_laws` is called once per depth for the frontier rows, and their children are drawn with
// draw_children. draft_q holds every row's law, or nothing when the scheme is deterministic (point masses).
// `doubt_laws`, when given, fills the laws a chain's drafts are doubted with instead (stops_after_doubt): a greedy
// draft's rows at temperature 1.
TokenTree sample_draft_tree(const DraftRequest& request, int32_t vocab_size, const RowLaws& row_laws,
                            const RowLaws& doubt_laws = nullptr);

// A chain's early stop on the draft's doubt (DraftRequest::confidence_threshold; Hugging Face's
// assistant_confidence_threshold, after Mamou et al. 2024, "Dynamic Speculation Lookahead"): true when the chain's
// newest draft, the tree's last node, was drawn from `q` with q(draft) below the threshold, and then no more drafts are
// drawn this step. The draft is kept: whether a draft is proposed depends only on the drafts before it, so each
// proposed draft's law is still its q (verify/ALGORITHMS.md §1). Trees and an empty chain never stop.
bool stops_after_doubt(const DraftRequest& request, const float* q, TokenTree& tree);

// The history of row `row` (0 = committed): `committed` advanced through the tokens on the row's path, each
// with the processed law of its parent row, `law_of_row(parent_row)` (mirostat's mu reads it).
TokenHistory path_history(const SamplerPipeline& pipeline, const TokenHistory& committed, const TokenTree& tree,
                          int32_t row, const std::function<const float*(int32_t)>& law_of_row);

// Whether the request asks for ranked candidates (a tree with the deterministic scheme). At temperature 0 the
// processed law is a point mass, which ranks nothing after its argmax: such drafters rank the law at
// temperature 1 instead (at_unit_temperature), whose argmax is the same token (unless two logits round to one
// probability, where the lower id is ranked first). Point-mass verification is exact
// whatever the candidates (verify/ALGORITHMS.md §3), so the choice only changes what is accepted.
bool ranked_tree(const DraftRequest& request);

// The draft shape of a request: tree_shape, or K ones for a chain.
std::vector<int32_t> draft_shape(const DraftRequest& request);

}  // namespace specula
