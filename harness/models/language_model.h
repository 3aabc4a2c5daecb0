// A language model as the generation loop sees it: logits for the position after a context and after
// every node of a draft tree, in one call (one "target forward"). Weights are shared by all sessions; a
// session holds one sequence's state (e.g. a KV cache it reuses across calls whose contexts share a
// prefix), so sequences can be generated in parallel, one session each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "verify/token_tree.h"

namespace specula {

class ModelSession {
 public:
  virtual ~ModelSession() = default;
  // out [tree.size() + 1, V]: row 0 = logits after `context`; row j + 1 = after context + path(node j).
  virtual void tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) = 0;
  // Logits after `context` only.
  void next_logits(const std::vector<Token>& context, float* out) { tree_logits(context, TokenTree{}, out); }
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual int32_t vocab_size() const = 0;
  virtual std::string description() const = 0;
  virtual std::unique_ptr<ModelSession> new_session() const = 0;
};

}  // namespace specula
