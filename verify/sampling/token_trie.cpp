#include "verify/sampling/token_trie.h"

#include <algorithm>

namespace specula {

// Sorted, the strings list the trie's nodes in preorder: each string adds the nodes past its common prefix with the one
// before it (std::string compares bytes as unsigned, and a prefix sorts before its extensions, so a node's tokens come
// before its children).
TokenTrie::TokenTrie(const std::vector<std::string>& strings, const std::vector<char>& included) {
  std::vector<Token> order;
  for (Token t = 0; t < static_cast<Token>(strings.size()); ++t)
    if (included[t] && !strings[t].empty()) order.push_back(t);
  std::stable_sort(order.begin(), order.end(), [&](Token a, Token b) { return strings[a] < strings[b]; });
  byte = {0};
  depth = {0};
  first_token = {0};
  const std::string* previous = nullptr;
  for (Token t : order) {
    const std::string& s = strings[t];
    size_t common = 0;
    if (previous)
      while (common < s.size() && common < previous->size() && s[common] == (*previous)[common]) ++common;
    for (size_t d = common; d < s.size(); ++d) {
      byte.push_back(static_cast<unsigned char>(s[d]));
      depth.push_back(static_cast<int32_t>(d + 1));
      first_token.push_back(static_cast<int32_t>(tokens.size()));
    }
    tokens.push_back(t);
    max_depth = std::max(max_depth, static_cast<int32_t>(s.size()));
    previous = &s;
  }
  first_token.push_back(static_cast<int32_t>(tokens.size()));
  // A node's subtree ends at the first node after it that is no deeper.
  end.assign(byte.size(), size());
  std::vector<int32_t> open;
  for (int32_t i = 0; i < size(); ++i) {
    while (!open.empty() && depth[open.back()] >= depth[i]) {
      end[open.back()] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
}

}  // namespace specula
