// The token strings as a trie laid out flat in preorder, so that walking it from a DFA state (TokenConstraint::build,
// once per automaton state, over a vocabulary of up to some 10^5 tokens) reads its arrays front to back: a node's
// subtree is the run of nodes up to `end`, skipped whole where the pattern cannot go on, and a node's parent is the
// last node before it one level up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

struct TokenTrie {
  TokenTrie() = default;
  // The tokens t with included[t] and a non-empty string.
  TokenTrie(const std::vector<std::string>& strings, const std::vector<char>& included);

  int32_t size() const { return static_cast<int32_t>(byte.size()); }
  // The tokens whose string ends at node i.
  const Token* tokens_begin(int32_t i) const { return tokens.data() + first_token[i]; }
  const Token* tokens_end(int32_t i) const { return tokens.data() + first_token[i + 1]; }

  std::vector<unsigned char> byte;   // [N] the byte on the edge into the node (the root's, node 0, is unused)
  std::vector<int32_t> depth;        // [N] the root's is 0
  std::vector<int32_t> end;          // [N] one past the last node of the node's subtree
  std::vector<int32_t> first_token;  // [N + 1] into `tokens`
  std::vector<Token> tokens;
  int32_t max_depth = 0;
};

}  // namespace specula
