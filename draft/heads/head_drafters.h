// Drafters built on the target's own features (verify/ALGORITHMS.md §6): Medusa heads (`medusa:DIR`) and the EAGLE
// head (`eagle:DIR`), from folders written by `specula train-medusa` / `specula train-eagle`. Torch-free
// header; the work is in head_drafters.cpp.
//
// Conditioning. After a verification step the committed context is x_0..x_{L-1}, where x_{L-1} is the
// correction/bonus token the verifier just sampled. Both drafters read f_{L-2}, the target's feature at the
// last position the verification forward has already run (TargetFeatureSource, draft/heads/target_features.h):
//   Medusa: head k on f_{L-2} predicts x_{L-1+k}: head 1 gives the first draft token x_L, head 2 the next...
//           (the heads do not see x_{L-1} or the drafted tokens: Medusa's Cartesian candidates).
//   EAGLE:  pairs (Embed(x_{t+1}), f_t) for t = 0..L-2 run through its layer (cached across steps); the
//           output at t = L-2 is f^_{L-1}, whose logits (target LM head) rank the first draft tokens; every
//           draft node d then runs (Embed(d), f^ of its parent) to rank its own children.
// A context of one token has no feature yet: the draft is empty and the step emits one token.
//
// Trees. Candidates are chosen by value (top-k), so every tree is verified with the point-mass rule
// (SiblingScheme::deterministic, draft_q empty) whatever --tree-sampling says (verify/ALGORITHMS.md §3):
//   - chain requests (--method greedy|chain|block|typical, no --tree): the top-1 chain, K = --num-draft-tokens
//     (Medusa: at most its number of heads; a deeper chain, --tree or tree=FILE is refused, never cut);
//   - --method tree without a drafter tree: the --tree shape as ranks ("2,2,1": the 2 best tokens at depth 1,
//     the 2 best under each, ...; Medusa's heads give the same candidates under every parent);
//   - tree=FILE: a static tree of rank paths (Medusa's medusa_choices; `specula tree-opt --output-ranks`);
//     the --tree shape is then ignored except that it selects tree verification;
//   - dynamic (EAGLE only): EAGLE-2's tree (Li et al. 2024, arXiv:2406.16858): expand the top_k frontier nodes
//     by cumulative draft log-probability for `depth` levels, then keep the best total_tokens nodes (parents
//     before children). Defaults: depth = the --tree depth, total_tokens = the --tree node count (the shape is a
//     budget), top_k = 4. The tree depends on the draft's values, so only the point-mass rule is exact.
// Generation metrics count positions up to the --tree depth (or --num-draft-tokens): give a --tree at least as
// deep as the drafter's tree to see every depth.
#pragma once

#include <memory>
#include <string>

#include "draft/drafter.h"
#include "draft/heads/head_drafter_spec.h"
#include "draft/heads/target_features.h"
#include "harness/models/language_model.h"

namespace specula {

class HeadDrafterFactory : public DrafterFactory {
 public:
  // Loads the heads and their target. `target`, when given, is the Generator's target: it must be a
  // transformer with the sizes the heads were trained on (it is the model verifying the drafts).
  HeadDrafterFactory(const HeadDrafterOptions& options, const LanguageModel* target);
  ~HeadDrafterFactory() override;
  std::unique_ptr<Drafter> create() const override;
  int32_t vocab_size() const override;
  std::string description() const override;
  int32_t max_draft_depth() const override;
  // The extra target forwards the drafters ran for features (see draft/heads/target_features.h), summed over
  // every drafter this factory created.
  TargetFeatureStats feature_stats() const;

  struct State;  // modules and counters (head_drafters.cpp)

 private:
  std::shared_ptr<State> state_;
};

// `medusa:...` or `eagle:...` (see parse_head_drafter_spec).
std::shared_ptr<const DrafterFactory> load_head_drafter(const std::string& spec,
                                                        const std::shared_ptr<const LanguageModel>& target);

// `medusa:...` and `eagle:...` (draft/registry/drafter_registry.cpp).
std::shared_ptr<const DrafterFactory> make_head_drafter(const DrafterSpec& spec);

}  // namespace specula
