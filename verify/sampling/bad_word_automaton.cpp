#include "verify/sampling/bad_word_automaton.h"

#include <algorithm>

#include "kernels/shared/error.h"

namespace specula {

BadWordAutomaton::BadWordAutomaton() : nodes_(1) {}

BadWordAutomaton::BadWordAutomaton(const std::vector<std::vector<Token>>& words) : nodes_(1) {
  // The trie of the words' rests, built from them in lexicographic order: a node's children then come in token
  // order, and a child met again is its last one, so each is appended, never inserted or searched for.
  std::vector<const std::vector<Token>*> sorted;
  for (const std::vector<Token>& word : words)
    if (word.size() >= 2) sorted.push_back(&word);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    return std::lexicographical_compare(a->begin(), a->end() - 1, b->begin(), b->end() - 1);
  });
  for (const std::vector<Token>* word : sorted) {
    int32_t node = kRoot;
    for (size_t i = 0; i + 1 < word->size(); ++i) {
      const Token token = (*word)[i];
      if (token < 0) fail("bad word token id ", token, " is negative");
      if (in_words_.size() <= static_cast<size_t>(token)) in_words_.resize(static_cast<size_t>(token) + 1, 0);
      in_words_[token] = 1;
      auto& children = nodes_[node].children;
      if (!children.empty() && children.back().first == token) {
        node = children.back().second;
        continue;
      }
      const int32_t next = static_cast<int32_t>(nodes_.size());
      children.emplace_back(token, next);
      nodes_.emplace_back();  // after the last use of `children`, which it may move
      node = next;
    }
    nodes_[node].banned.push_back(word->back());
  }
  // Breadth first, so that a node's failure link, which is shallower, is finished before the node.
  std::vector<int32_t> order = {kRoot};
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t u = order[k];
    for (const auto& [token, v] : nodes_[u].children) {
      if (u != kRoot) nodes_[v].fail = step(nodes_[u].fail, token);
      const std::vector<Token>& inherited = nodes_[nodes_[v].fail].banned;
      nodes_[v].banned.insert(nodes_[v].banned.end(), inherited.begin(), inherited.end());
      order.push_back(v);
    }
  }
  for (Node& n : nodes_) {
    std::sort(n.banned.begin(), n.banned.end());
    n.banned.erase(std::unique(n.banned.begin(), n.banned.end()), n.banned.end());
  }
}

int32_t BadWordAutomaton::child(int32_t node, Token token) const {
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(token, int32_t{0}));
  return it != children.end() && it->first == token ? it->second : -1;
}

int32_t BadWordAutomaton::step_in_words(int32_t state, Token token) const {
  for (;;) {
    if (const int32_t next = child(state, token); next >= 0) return next;
    if (state == kRoot) return kRoot;
    state = nodes_[state].fail;
  }
}

}  // namespace specula
