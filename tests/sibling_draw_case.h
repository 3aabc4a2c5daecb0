// A batch for the sibling-draw kernel (kernels/draft_children.h), shared by its emulation test
// (test_draft_children.cpp) and its GPU parity test (test_cuda_parity.cpp): three sequences drawing from 3, 1 and 4
// of nine laws, and the uniforms of every draw they may make. The laws are of dyadic probabilities, so that every
// float64 sum is exact and the block's summation order cannot move a draw, and many have fewer positive tokens than
// children: rows whose mass runs out, shifting the next rows' uniforms.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/draft_children.h"

namespace specula::testing {

struct SiblingDrawCase {
  int32_t vocab = 0, count = 0;
  std::vector<int32_t> first = {0, 3, 4, 8};  // sequence s draws for rows[first[s] .. first[s + 1])
  std::vector<int32_t> rows = {5, 0, 7, 2, 1, 6, 3, 8};
  std::vector<float> laws;       // [9, V]
  std::vector<double> uniforms;  // [rows * count]

  // The kernel's parameters over these arrays, wherever they are (host or device copies).
  SiblingDrawParams params(const float* laws_at, const int32_t* rows_at, const int32_t* first_at,
                           const double* uniforms_at, int32_t* tokens, int32_t* spent) const {
    SiblingDrawParams p;
    p.probs = laws_at;
    p.rows = rows_at;
    p.first = first_at;
    p.uniforms = uniforms_at;
    p.tokens = tokens;
    p.spent = spent;
    p.sequences = static_cast<int32_t>(first.size()) - 1;
    p.rows_total = static_cast<int32_t>(rows.size());
    p.vocab = vocab;
    p.count = count;
    return p;
  }
};

inline SiblingDrawCase sibling_draw_case(uint64_t seed, int32_t vocab, int32_t count) {
  SiblingDrawCase c;
  c.vocab = vocab;
  c.count = count;
  std::mt19937_64 rng(seed);
  c.laws.assign(9 * static_cast<size_t>(vocab), 0.0f);
  for (size_t r = 0; r < 9; ++r) {
    const int32_t support = 1 + static_cast<int32_t>(rng() % 4);  // 1 to 4 tokens
    float left = 1.0f;
    for (int32_t i = 0; i < support; ++i) {
      const float w = i + 1 == support ? left : left / static_cast<float>(2 << (rng() % 3));
      c.laws[r * static_cast<size_t>(vocab) + rng() % static_cast<uint64_t>(vocab)] += w;
      left -= w;
    }
  }
  c.uniforms.resize(c.rows.size() * static_cast<size_t>(count));
  for (double& u : c.uniforms) u = (static_cast<double>(rng() >> 11) + 0.5) / 9007199254740992.0;  // (0, 1)
  return c;
}

}  // namespace specula::testing
