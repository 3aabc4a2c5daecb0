#include "verify/verifiers/token_tree.h"

#include <algorithm>
#include <sstream>

#include "kernels/shared/error.h"

namespace specula {

SiblingScheme parse_sibling_scheme(const std::string& text) {
  if (text == "iid") return SiblingScheme::iid;
  if (text == "without-replacement" || text == "without_replacement") return SiblingScheme::without_replacement;
  if (text == "topk" || text == "deterministic") return SiblingScheme::deterministic;
  fail_parameter("tree_sampling", " '", text, "' is not a sibling scheme (known: iid, without-replacement, topk)");
}

const char* sibling_scheme_name(SiblingScheme s) {
  switch (s) {
    case SiblingScheme::iid:
      return "iid";
    case SiblingScheme::without_replacement:
      return "without-replacement";
    case SiblingScheme::deterministic:
      return "topk";
  }
  return "?";
}

int32_t TokenTree::depth(int32_t node) const {
  int32_t d = 0;
  for (int32_t n = node; n >= 0; n = parent[n]) ++d;
  return d;
}

int32_t TokenTree::max_depth() const {
  int32_t d = 0;
  for (int32_t n = 0; n < size(); ++n) d = std::max(d, depth(n));
  return d;
}

std::vector<int32_t> TokenTree::children(int32_t row) const {
  std::vector<int32_t> out;
  for (int32_t n = 0; n < size(); ++n)
    if (parent[n] + 1 == row) out.push_back(n);
  return out;
}

std::vector<int32_t> TokenTree::path_nodes(int32_t node) const {
  std::vector<int32_t> out;
  for (int32_t n = node; n >= 0; n = parent[n]) out.push_back(n);
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<Token> TokenTree::path(int32_t node) const {
  std::vector<Token> out;
  for (int32_t n : path_nodes(node)) out.push_back(tokens[n]);
  return out;
}

void TokenTree::fail_device_q() {
  fail("token tree: its draft laws are in device memory (device_q), where only the device's verifier reads them");
}

TokenTree TokenTree::chain(const std::vector<Token>& drafts) {
  TokenTree t;
  for (size_t i = 0; i < drafts.size(); ++i) t.add(drafts[i], static_cast<int32_t>(i) - 1);
  return t;
}

int64_t tree_shape_nodes(const std::vector<int32_t>& shape) {
  int64_t nodes = 0, level = 1;
  for (int32_t branching : shape) nodes += level *= branching;
  return nodes;
}

std::vector<int32_t> parse_tree_shape(const std::string& text, const std::string& option) {
  std::vector<int32_t> shape;
  if (!text.empty() && text.back() == ',') fail_parameter(option, " '", text, "' ends with a comma");
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 64)
      fail_parameter(option, " '", item, "' in '", text, "' is not a branching factor in 1..64");
    shape.push_back(static_cast<int32_t>(v));
  }
  if (shape.empty()) fail_parameter(option, " is an empty tree shape");
  int64_t nodes = 0, level = 1;
  for (int32_t b : shape) {
    level *= b;
    nodes += level;
    if (nodes > 4096) fail_parameter(option, " '", text, "' has more than 4096 nodes");
  }
  return shape;
}

}  // namespace specula
