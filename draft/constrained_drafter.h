// Speculation under a constraint (verify/sampling/token_constraint.h): wraps any drafter and cuts the
// point-mass candidates the constraint forbids (or that min_tokens does, with a stop token), with everything below
// them: the target could not emit them, so they would only take a draft position. Model, n-gram and synthetic
// drafters sample from their processed q, which carries the same constraint, so their candidates are
// legal, except at a row where the draft's own masks ban every token the constraint allows (its mask is dropped
// there: SamplingParams::constraint_yields_to_masks); prompt lookup copies tokens from the context, which may leave
// the pattern at any point.
//
// Only point masses are cut. A deterministic draft is a function of the context alone, so any rule that
// shortens it is still a deterministic draft, verified exactly (verify/ALGORITHMS.md §1 "Deterministic drafts").
// A sampled candidate is NEVER cut: cutting stochastic drafts by their value changes the law of what is
// emitted (verify/ALGORITHMS.md §3, "pruned stochastic drafts"). An illegal sampled candidate (a draft pipeline
// without the constraint) is left to the verifier, which rejects it since p(candidate) = 0.
#pragma once

#include <memory>

#include "draft/drafter.h"
#include "verify/sampling/token_constraint.h"

namespace specula {

// The tree with every point-mass node that the target cannot emit under `constraint` removed, with its subtree: a
// token the automaton does not allow after the node's path (state kDead), or allows only in a match that min_tokens
// would keep from ending, or a stop token before min_tokens. `state` is the constraint state at the root and
// `produced` the number of output tokens before it. Rows keep their recorded q. `removed` (optional) receives the
// number of nodes cut.
TokenTree cut_illegal_point_masses(const TokenTree& tree, const TokenConstraint& constraint, int32_t state,
                                   int32_t produced, int32_t* removed = nullptr);

class ConstrainedDrafterFactory : public DrafterFactory {
 public:
  ConstrainedDrafterFactory(std::shared_ptr<const DrafterFactory> inner,
                            std::shared_ptr<const TokenConstraint> constraint);
  std::unique_ptr<Drafter> create() const override;
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  std::string description() const override { return inner_->description(); }
  int32_t max_draft_depth() const override { return inner_->max_draft_depth(); }
  bool records_draft_laws() const override { return inner_->records_draft_laws(); }
  bool drafts_penalised() const override { return inner_->drafts_penalised(); }
  bool stops_on_confidence() const override { return inner_->stops_on_confidence(); }

 private:
  std::shared_ptr<const DrafterFactory> inner_;
  std::shared_ptr<const TokenConstraint> constraint_;
};

}  // namespace specula
