#include "harness/generation/beam_sessions.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "kernels/shared/elapsed.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

size_t shared_prefix(const std::vector<Token>& a, const std::vector<Token>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

}  // namespace

BeamStep BeamSessions::step(const std::vector<Token>& prompt, const std::vector<BeamRow>& beams,
                            double& target_seconds) {
  BeamStep out;
  std::map<std::vector<Token>, int32_t> row_of_tokens;
  std::vector<const BeamRow*> first;  // the first beam of each row
  for (const BeamRow& b : beams) {
    const auto [it, fresh] = row_of_tokens.emplace(*b.tokens, static_cast<int32_t>(first.size()));
    if (fresh) first.push_back(&b);
    out.row_of.push_back(it->second);
  }
  const size_t n = first.size();
  out.session_of_row.assign(n, -1);
  std::vector<char> taken(sessions_.size(), 0);
  for (size_t r = 0; r < n; ++r) {
    const int32_t s = first[r]->parent_session;
    if (s >= static_cast<int32_t>(sessions_.size()))
      fail("beam sessions: parent session ", s, ", but there are ", sessions_.size());
    if (s >= 0 && !taken[s]) out.session_of_row[r] = s, taken[s] = 1;
  }
  for (size_t r = 0; r < n; ++r) {
    if (out.session_of_row[r] >= 0) continue;
    int32_t best = -1;
    size_t best_shared = 0;
    for (size_t s = 0; s < sessions_.size(); ++s) {
      if (taken[s]) continue;
      const size_t shared = shared_prefix(sessions_[s].tokens, *first[r]->tokens);
      if (best < 0 || shared > best_shared) best = static_cast<int32_t>(s), best_shared = shared;
    }
    if (best < 0) {
      best = static_cast<int32_t>(sessions_.size());
      sessions_.push_back(fresh_session(prompt, !first[r]->tokens->empty(), target_seconds));
      taken.push_back(0);
    }
    out.session_of_row[r] = best;
    taken[best] = 1;
  }
  const size_t V = static_cast<size_t>(target_.vocab_size());
  out.logits.resize(n * V);
  std::vector<std::vector<Token>> contexts(n, prompt);
  std::vector<TreeLogitsCall> calls(n);
  for (size_t r = 0; r < n; ++r) {
    contexts[r].insert(contexts[r].end(), first[r]->tokens->begin(), first[r]->tokens->end());
    Session& session = sessions_[out.session_of_row[r]];
    calls[r].session = session.session.get();
    calls[r].context = &contexts[r];
    calls[r].tree = &no_tree_;
    calls[r].out = out.logits.data() + r * V;
    session.tokens = *first[r]->tokens;
  }
  const auto start = Clock::now();
  target_.batch_tree_logits(calls);
  target_seconds += seconds_since(start);
  return out;
}

BeamSessions::Session BeamSessions::fresh_session(const std::vector<Token>& prompt, bool past_prompt,
                                                  double& target_seconds) {
  const auto start = Clock::now();
  Session fresh{target_.new_session(), {}};
  if (past_prompt) {
    std::vector<float> logits(static_cast<size_t>(target_.vocab_size()));
    fresh.session->next_logits(prompt, logits.data());
  }
  target_seconds += seconds_since(start);
  return fresh;
}

}  // namespace specula
