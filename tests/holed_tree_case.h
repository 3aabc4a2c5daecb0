// Trees with holes (kVerifyRowHoles) for the tree kernel's tests: random trees of siblings drawn without replacement
// (the reference verifier's input) laid out again at a larger shape with holes among their nodes, as a draft drawn at
// a full shape leaves them where a row's law ran out of mass. A hole is a last sibling and has holes alone under it;
// its p and q rows are NaN, so a kernel that read them would not give the reference's outcome. The kernel on the holed
// trees must give the reference's outcome on the trees of the drawn nodes, draw for draw, its paths naming the same
// nodes at their places in the larger shape.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "kernel_verify_cases.h"

namespace specula::testing {

struct HoledTreeCase {
  VerifyCase drawn;                              // the trees of the drawn nodes, siblings without replacement
  VerifyCase holed;                              // the same trees with holes, every row flagged kVerifyRowHoles
  std::vector<std::vector<int32_t>> drawn_node;  // [B][holed node]: its node in `drawn`, -1 for a hole
};

// Up to `most_holes` holes a row, among trees of at most N drawn nodes.
inline HoledTreeCase holed_tree_case(uint64_t seed, int32_t batch, int32_t vocab, int32_t N, int32_t most_holes) {
  HoledTreeCase h;
  h.drawn = random_tree_case(seed, batch, vocab, N);
  CaseRandom g(seed ^ 0x401e5ull);
  VerifyCase& c = h.drawn;
  VerifyCase& f = h.holed;
  f.kind = VerifyKind::tree;
  f.vocab = vocab;
  f.width = N + most_holes;
  const size_t V = static_cast<size_t>(vocab), rows = static_cast<size_t>(f.width) + 1;
  f.p.assign(static_cast<size_t>(batch) * rows * V, std::numeric_limits<float>::quiet_NaN());
  f.q = f.p;
  f.tokens.assign(static_cast<size_t>(batch) * f.width, 0);
  f.parents.assign(static_cast<size_t>(batch) * f.width, -1);
  const auto copy_row = [&](int32_t b, int32_t from, int32_t to) {
    std::copy(c.p_of(b) + static_cast<size_t>(from) * V, c.p_of(b) + static_cast<size_t>(from + 1) * V,
              f.p.begin() + (static_cast<size_t>(b) * rows + to) * V);
    std::copy(c.q_row(b, from), c.q_row(b, from) + V, f.q.begin() + (static_cast<size_t>(b) * rows + to) * V);
  };
  for (int32_t b = 0; b < batch; ++b) {
    c.rows[b].scheme = static_cast<int32_t>(TreeSiblingScheme::without_replacement);
    const int32_t n = c.rows[b].num_draft;
    const int32_t* parents = c.parents.data() + static_cast<size_t>(b) * c.width;
    const int32_t* tokens = c.tokens.data() + static_cast<size_t>(b) * c.width;
    // last_child[r]: the last drawn node under row r (-1 for none); a hole may join row r's children after it.
    std::vector<int32_t> last_child(static_cast<size_t>(n) + 1, -1);
    for (int32_t i = 0; i < n; ++i) last_child[static_cast<size_t>(parents[i] + 1)] = i;
    std::vector<int32_t> holed_of(static_cast<size_t>(n), -1), out_tokens, out_parents;
    std::vector<int32_t>& drawn_node = h.drawn_node.emplace_back();
    int32_t holes = 0;
    copy_row(b, 0, 0);
    for (int32_t i = 0; i <= n; ++i) {
      // Before drawn node i (after the last at i = n): holes under rows whose drawn children are all placed, or
      // under holes.
      while (holes < most_holes && g.chance(0.3)) {
        std::vector<int32_t> parent_rows;  // holed rows (0: the root)
        for (int32_t r = 0; r <= i; ++r)
          if (last_child[static_cast<size_t>(r)] < i)
            parent_rows.push_back(r == 0 ? 0 : holed_of[static_cast<size_t>(r - 1)] + 1);
        for (size_t m = 0; m < out_tokens.size(); ++m)
          if (out_tokens[m] < 0) parent_rows.push_back(static_cast<int32_t>(m) + 1);
        if (parent_rows.empty()) break;
        out_tokens.push_back(-1);
        out_parents.push_back(parent_rows[static_cast<size_t>(g.below(static_cast<int32_t>(parent_rows.size())))] - 1);
        drawn_node.push_back(-1);
        ++holes;
      }
      if (i == n) break;
      holed_of[static_cast<size_t>(i)] = static_cast<int32_t>(out_tokens.size());
      out_tokens.push_back(tokens[i]);
      out_parents.push_back(parents[i] < 0 ? -1 : holed_of[static_cast<size_t>(parents[i])]);
      drawn_node.push_back(i);
      copy_row(b, i + 1, holed_of[static_cast<size_t>(i)] + 1);
    }
    std::copy(out_tokens.begin(), out_tokens.end(), f.tokens.begin() + static_cast<size_t>(b) * f.width);
    std::copy(out_parents.begin(), out_parents.end(), f.parents.begin() + static_cast<size_t>(b) * f.width);
    VerifyRowParams r = c.rows[b];
    r.num_draft = static_cast<int32_t>(out_tokens.size());
    r.flags |= kVerifyRowHoles;
    f.rows.push_back(r);
  }
  return h;
}

// A kernel's result on the holed trees with its paths at the drawn trees' nodes (a hole on a path becomes -2), for
// compare_with_reference against h.drawn.
inline VerifyResult at_drawn_nodes(const HoledTreeCase& h, VerifyResult r) {
  const int32_t B = h.holed.batch(), W = h.holed.width, N = h.drawn.width;
  std::vector<int32_t> path(static_cast<size_t>(B) * N, -1);
  for (int32_t b = 0; b < B; ++b)
    for (int32_t j = 0; j < W; ++j) {
      const int32_t node = r.path[static_cast<size_t>(b) * W + j];
      if (node < 0) continue;
      const int32_t drawn = node < static_cast<int32_t>(h.drawn_node[b].size()) ? h.drawn_node[b][node] : -2;
      if (j < N) path[static_cast<size_t>(b) * N + j] = drawn < 0 ? -2 : drawn;
    }
  r.path = std::move(path);
  return r;
}

// One-position exact-law case with holes (as law_case, kernel_verify_cases.h): a 4,1 tree whose root's four siblings
// are drawn without replacement from a law of three tokens, so the fourth is a hole, as is its child, and the drawn
// second depth sits after that hole (its keys differ between the shapes). The first emitted token has law p_1.
inline LawCase holed_law_case(int32_t batch, uint64_t seed) {
  constexpr int32_t V = 6, N = 8;
  const float p1[V] = {0.30f, 0.05f, 0.25f, 0.0f, 0.15f, 0.25f};
  const float q1[V] = {0.50f, 0.0f, 0.30f, 0.0f, 0.20f, 0.0f};
  const float p2[V] = {0.10f, 0.30f, 0.20f, 0.10f, 0.20f, 0.10f};
  const float q2[V] = {0.20f, 0.20f, 0.10f, 0.20f, 0.10f, 0.20f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CaseRandom g(seed);
  LawCase out;
  VerifyCase& c = out.c;
  c.kind = VerifyKind::tree;
  c.vocab = V;
  c.width = N;
  c.p.assign(static_cast<size_t>(batch) * (N + 1) * V, nan);
  c.q = c.p;
  c.tokens.resize(static_cast<size_t>(batch) * N);
  c.parents.resize(static_cast<size_t>(batch) * N);
  for (int32_t b = 0; b < batch; ++b) {
    VerifyRowParams r;
    r.seed = 0x401eull;
    r.sequence = static_cast<uint64_t>(b);
    r.step = 5;
    r.num_draft = N;
    r.flags = kVerifyRowHasQ | kVerifyRowHoles;
    r.scheme = static_cast<int32_t>(TreeSiblingScheme::without_replacement);
    c.rows.push_back(r);
    const auto set_row = [&](int32_t row, const float* p, const float* q) {
      std::copy(p, p + V, c.p.begin() + (static_cast<size_t>(b) * (N + 1) + row) * V);
      std::copy(q, q + V, c.q.begin() + (static_cast<size_t>(b) * (N + 1) + row) * V);
    };
    int32_t* tokens = c.tokens.data() + static_cast<size_t>(b) * N;
    int32_t* parents = c.parents.data() + static_cast<size_t>(b) * N;
    // The root's siblings one after another from q_1 with the earlier ones removed, then a hole.
    float left[V];
    std::copy(q1, q1 + V, left);
    set_row(0, p1, q1);
    for (int32_t i = 0; i < 4; ++i) {
      parents[i] = -1;
      tokens[i] = i < 3 ? g.draw(left, V) : -1;
      if (i < 3) left[tokens[i]] = 0.0f;
      parents[4 + i] = i;
      tokens[4 + i] = i < 3 ? g.draw(q2, V) : -1;
      if (i < 3) {
        set_row(1 + i, p2, q2);
        set_row(5 + i, p2, q2);
      }
    }
  }
  double total = 0.0;
  for (float x : p1) total += x;
  for (float x : p1) out.law.push_back(x / total);
  return out;
}

}  // namespace specula::testing
