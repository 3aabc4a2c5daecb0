// Bad words of several tokens as an automaton over the output, so that a constraint can foresee the bans they make
// (verify/sampling/token_constraint.h). The sampler's mask step (masks.cpp) bans a word's last token when the output
// ends with the rest of it; the automaton's state is what decides that: the longest suffix of the output that is a
// prefix of some word's rest (a node of their trie), advanced token by token through failure links, as in Aho and
// Corasick's matcher (Aho & Corasick 1975, "Efficient string matching"). banned(state) holds the last tokens of the
// words whose rest ends the output there, the node's own and those of its proper suffixes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

class BadWordAutomaton {
 public:
  static constexpr int32_t kRoot = 0;  // no suffix of the output begins a word's rest

  BadWordAutomaton();  // no words: one state, which bans nothing
  // Words of one token ban it whatever the output: they are left to the caller's permitted tokens, not kept here.
  explicit BadWordAutomaton(const std::vector<std::vector<Token>>& words);

  bool empty() const { return nodes_.size() == 1; }
  // The state after one more output token.
  int32_t step(int32_t state, Token token) const;
  // The tokens banned in `state`, sorted.
  const std::vector<Token>& banned(int32_t state) const { return nodes_[state].banned; }
  bool bans(int32_t state, Token token) const;

 private:
  struct Node {
    std::vector<std::pair<Token, int32_t>> children;  // sorted by token
    int32_t fail = kRoot;                             // the node of the longest proper suffix that is one
    std::vector<Token> banned;
  };
  int32_t child(int32_t node, Token token) const;  // -1 where there is none
  std::vector<Node> nodes_;
};

}  // namespace specula
