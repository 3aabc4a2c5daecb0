// Beam search's target sessions (beam_search.h, "Sessions"): one per distinct live beam at most, each keeping its own
// sequence's cache, and a step's rows computed in one batched call (LanguageModel::batch_tree_logits), so that a model
// that batches forwards reads its weights once a step and no step reruns a beam's whole suffix since the beams
// diverged.
#pragma once

#include <memory>
#include <vector>

#include "harness/models/language_model.h"

namespace specula {

// A live beam as its step's call sees it: its tokens past the prompt, and the session that ran its parent's row (that
// session holds all of the beam but its last token), or -1; a session that does not exist is refused.
struct BeamRow {
  const std::vector<Token>* tokens = nullptr;
  int32_t parent_session = -1;
};

struct BeamStep {
  std::vector<int32_t> row_of;          // per beam given: its row (identical beams share one)
  std::vector<int32_t> session_of_row;  // the session that ran each row
  std::vector<float> logits;            // [rows, V]: the next-token logits after the prompt and the row's tokens
};

class BeamSessions {
 public:
  explicit BeamSessions(const LanguageModel& target) : target_(target) {}

  // Assigns each row a session: its first beam's parent's session when no earlier row took it (one new token to
  // run); else the free session (its beam was pruned or ended) whose last sequence shares the longest prefix with the
  // row's, the lowest index on a tie; else a new one, first given the prompt alone where the row is past it, which a
  // model that keeps its last prompt's cache (a transformer's) serves without running it. Then runs every row in one
  // batched call. The time spent in the model (sessions made, their prompt calls, the batched call) is added to
  // `target_seconds`.
  BeamStep step(const std::vector<Token>& prompt, const std::vector<BeamRow>& beams, double& target_seconds);
  size_t size() const { return sessions_.size(); }

 private:
  struct Session {
    std::unique_ptr<ModelSession> session;
    std::vector<Token> tokens;  // the row it ran last (past the prompt)
  };
  Session fresh_session(const std::vector<Token>& prompt, bool past_prompt, double& target_seconds);

  const LanguageModel& target_;
  std::vector<Session> sessions_;
  const TokenTree no_tree_{};
};

}  // namespace specula
