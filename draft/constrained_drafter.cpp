#include "draft/constrained_drafter.h"

#include <algorithm>

#include "kernels/shared/error.h"

namespace specula {
namespace {

class ConstrainedDrafter : public Drafter {
 public:
  ConstrainedDrafter(std::unique_ptr<Drafter> inner, std::shared_ptr<const TokenConstraint> constraint)
      : inner_(std::move(inner)), constraint_(std::move(constraint)) {}

  std::string name() const override { return inner_->name(); }
  void set_target_session(ModelSession* target) override { inner_->set_target_session(target); }
  void begin(const std::vector<Token>& prompt) override {
    inner_->begin(prompt);
    sync();
  }
  TokenTree propose(const DraftRequest& request) override {
    const TokenTree proposed = inner_->propose(request);
    int32_t removed = 0;
    TokenTree tree = cut_illegal_point_masses(proposed, *constraint_, request.history->constraint_state,
                                              static_cast<int32_t>(request.history->produced()), &removed);
    removed_ += removed;
    sync();
    return tree;
  }
  void accept(int32_t n_accepted) override {
    inner_->accept(n_accepted);
    sync();
  }

 private:
  // The counters are the inner drafter's, less the candidates cut here.
  void sync() {
    counters_ = inner_->counters();
    counters_.n_draft_tokens -= removed_;
  }

  std::unique_ptr<Drafter> inner_;
  std::shared_ptr<const TokenConstraint> constraint_;
  int64_t removed_ = 0;
};

// Can the target emit `token` after the path that led to `state`, `produced` tokens into the output, where the
// automaton leads from `state` to `next` with it?
bool emittable(const TokenConstraint& constraint, int32_t state, int32_t next, int32_t produced, Token token) {
  if (next == TokenConstraint::kDead) return false;
  const std::vector<Token>& stops = constraint.stop_tokens();
  if (produced < constraint.min_tokens() && std::find(stops.begin(), stops.end(), token) != stops.end()) return false;
  return constraint.allows(state, produced, token);
}

}  // namespace

TokenTree cut_illegal_point_masses(const TokenTree& tree, const TokenConstraint& constraint, int32_t state,
                                   int32_t produced, int32_t* removed) {
  TokenTree out;
  out.scheme = tree.scheme;
  const bool has_q = !tree.draft_q.empty();
  out.draft_q.push_back(has_q ? tree.q_at_row(0) : std::vector<float>{});
  std::vector<int32_t> new_node(tree.size(), -1);  // -1 = cut
  std::vector<int32_t> node_state(tree.size(), TokenConstraint::kDead), depth(tree.size(), 0);
  for (int32_t n = 0; n < tree.size(); ++n) {  // parents come first
    const int32_t p = tree.parent[n];
    if (p >= 0 && new_node[p] < 0) continue;  // below a cut node
    depth[n] = p < 0 ? 0 : depth[p] + 1;
    const int32_t parent_state = p < 0 ? state : node_state[p];
    const int32_t s = constraint.next_state(parent_state, tree.tokens[n]);
    const bool point_mass = tree.q_at_row(p + 1).empty();
    if (point_mass && parent_state != TokenConstraint::kDead &&
        !emittable(constraint, parent_state, s, produced + depth[n], tree.tokens[n]))
      continue;
    node_state[n] = s;
    out.add(tree.tokens[n], p < 0 ? -1 : new_node[p]);
    new_node[n] = out.size() - 1;
    out.draft_q.push_back(has_q ? tree.q_at_row(n + 1) : std::vector<float>{});
  }
  if (!has_q)
    out.draft_q.clear();
  else
    out.draft_q.resize(out.size() + 1);
  if (removed) *removed = tree.size() - out.size();
  return out;
}

ConstrainedDrafterFactory::ConstrainedDrafterFactory(std::shared_ptr<const DrafterFactory> inner,
                                                     std::shared_ptr<const TokenConstraint> constraint)
    : inner_(std::move(inner)), constraint_(std::move(constraint)) {
  if (!inner_ || !constraint_) fail("constrained drafter: needs a drafter and a constraint");
  if (constraint_->vocab_size() != inner_->vocab_size())
    fail("constrained drafter: ", constraint_->description(), " has ", constraint_->vocab_size(),
         " token strings but the drafter ", inner_->description(), " has ", inner_->vocab_size(), " tokens");
}

std::unique_ptr<Drafter> ConstrainedDrafterFactory::create() const {
  return std::make_unique<ConstrainedDrafter>(inner_->create(), constraint_);
}

}  // namespace specula
