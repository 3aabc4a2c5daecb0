// Bad words of several tokens as an automaton over the output, so that a constraint can foresee the bans they make
// (verify/sampling/token_constraint.h). The sampler's mask step (masks.cpp) bans a word's last token when the output
// ends with the rest of it; the automaton's state is what decides that: the longest suffix of the output that is a
// prefix of some word's rest (a node of their trie), advanced token by token through failure links, as in Aho and
// Corasick's matcher (Aho & Corasick 1975, "Efficient string matching"). banned(state) holds the last tokens of the
// words whose rest ends the output there, the node's own and those of its proper suffixes.
#pragma once

#include <algorithm>
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
  // The state after one more output token. Inline: a constraint asks it of every token from each state it builds.
  int32_t step(int32_t state, Token token) const {
    if (static_cast<size_t>(token) >= in_words_.size() || !in_words_[token]) return kRoot;
    return step_in_words(state, token);
  }
  // The tokens banned in `state`, sorted.
  const std::vector<Token>& banned(int32_t state) const { return nodes_[state].banned; }
  bool bans(int32_t state, Token token) const {
    const std::vector<Token>& b = nodes_[state].banned;
    return !b.empty() && std::binary_search(b.begin(), b.end(), token);
  }

 private:
  struct Node {
    std::vector<std::pair<Token, int32_t>> children;  // sorted by token
    int32_t fail = kRoot;                             // the node of the longest proper suffix that is one
    std::vector<Token> banned;
  };
  int32_t child(int32_t node, Token token) const;           // -1 where there is none
  int32_t step_in_words(int32_t state, Token token) const;  // step for a token that occurs in some word's rest
  std::vector<Node> nodes_;
  // in_words_[t]: does t occur in some word's rest? From any state, any other token leads to the root. Most of a
  // vocabulary is such tokens, and a constraint steps every token of it from each state it builds.
  std::vector<char> in_words_;
};

}  // namespace specula
