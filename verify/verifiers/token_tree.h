// A token tree of draft candidates, flattened in topological order: every parent precedes its children,
// and siblings appear in the order they were generated (the order the verifier must visit them,
// verify/ALGORITHMS.md §3). Rows: row 0 is the position after the committed context (the root); row j + 1 is the
// position after node j. A chain of k drafts is the tree whose node j has parent j - 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

// How the siblings under one node were drawn from the draft law q of that node.
enum class SiblingScheme {
  iid,                  // i.i.d. from q (SpecInfer, Miao et al. 2023)
  without_replacement,  // sequentially from q with earlier siblings removed (RSD, Jeon et al. 2024; Sequoia)
  deterministic,        // chosen by value (top-k of q, EAGLE-2, Medusa): verified as point masses
};

SiblingScheme parse_sibling_scheme(const std::string& text);  // "iid" | "without-replacement" | "topk"
const char* sibling_scheme_name(SiblingScheme s);

struct TokenTree {
  std::vector<Token> tokens;    // [n] node tokens
  std::vector<int32_t> parent;  // [n] parent node, -1 for children of the root
  SiblingScheme scheme = SiblingScheme::iid;
  // [n + 1] rows of the law the drafter drew each row's children from ([V] each); empty when the children
  // are point masses (deterministic candidates or a drafter that records no q).
  std::vector<std::vector<float>> draft_q;
  // Where a drafter that drew on a device left the laws instead (draft_q empty): [size() + 1, V] in that device's
  // memory, of which the rows with children hold their laws (a leaf's row holds whatever was there), read there by
  // its verifier (verify/device/batch_verifier.h, draft_laws); null when the laws are in draft_q.
  const float* device_q = nullptr;
  // Where a drafter that drew fed left the nodes' ids instead of bringing them to the host (their `tokens` hold -1
  // meanwhile): [size()] int32 in its verifier's device memory (BatchVerifier::keep_planned_ids), read there by the
  // target's forward and by verification, which brings them back (DeviceStepResult::draft_tokens); null when `tokens`
  // are the ids.
  const int32_t* device_tokens = nullptr;

  // The draft law of row `row`'s children; empty (point masses) when none was recorded. Refused for laws left in
  // device memory, which host code cannot read (and must not take for point masses).
  const std::vector<float>& q_at_row(int32_t row) const {
    static const std::vector<float> kPointMass;
    if (device_q) fail_device_q();
    return row < static_cast<int32_t>(draft_q.size()) ? draft_q[row] : kPointMass;
  }
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  int32_t row_of(int32_t node) const { return node + 1; }
  int32_t depth(int32_t node) const;  // 1 for children of the root
  int32_t max_depth() const;
  std::vector<int32_t> children(int32_t row) const;     // nodes whose parent row is `row`, in order
  std::vector<Token> path(int32_t node) const;          // tokens from the root's child down to `node`
  std::vector<int32_t> path_nodes(int32_t node) const;  // those nodes, in that order (none for node -1, the root)
  void add(Token token, int32_t parent_node) {
    tokens.push_back(token);
    parent.push_back(parent_node);
  }
  static TokenTree chain(const std::vector<Token>& drafts);

 private:
  [[noreturn]] static void fail_device_q();
};

// "2,2,1": 2 children at depth 1, 2 under each of those, 1 under each of those. Throws on bad input.
std::vector<int32_t> parse_tree_shape(const std::string& text, const std::string& option = "tree");
// The nodes of a full tree of `shape` (children per node at each depth): b0 + b0 b1 + ...; K for K ones (a chain).
int64_t tree_shape_nodes(const std::vector<int32_t>& shape);

}  // namespace specula
