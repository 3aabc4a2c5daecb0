// Host side of the ranked-children kernel: its parameter checks and vector width.
#include "kernels/draft_children.h"

#include <algorithm>
#include <cstdint>

#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"

namespace specula {

static_assert(kMaxRankedChildren == kMaxVerifyTreeNodes, "a ranked node has at most as many children as a tree nodes");

void RankedChildrenParams::check() const {
  if (batch < 1) fail("ranked children: batch must be >= 1, got ", batch);
  if (vocab < 1 || vocab > (1 << 30)) fail("ranked children: vocab must be in [1, 2^30], got ", vocab);
  if (count < 1 || count > std::min(vocab, kMaxRankedChildren))
    fail("ranked children: count must be in [1, min(V, ", kMaxRankedChildren, ")] (V = ", vocab, "), got ", count);
  if (!probs) fail("ranked children: probs [B, V] is null");
  if (!tokens) fail("ranked children: tokens [B, count] is null");
}

int ranked_children_vec(const RankedChildrenParams& p) {
  return p.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(p.probs) % 16 == 0 ? 4 : 1;
}

void SiblingDrawParams::check() const {
  if (sequences < 1) fail("sibling draws: sequences must be >= 1, got ", sequences);
  if (rows_total < 1) fail("sibling draws: rows_total must be >= 1, got ", rows_total);
  if (vocab < 1 || vocab > (1 << 30)) fail("sibling draws: vocab must be in [1, 2^30], got ", vocab);
  if (count < 1 || count > std::min(vocab, kMaxRankedChildren))
    fail("sibling draws: count must be in [1, min(V, ", kMaxRankedChildren, ")] (V = ", vocab, "), got ", count);
  if (!probs) fail("sibling draws: probs [*, V] is null");
  if (!rows) fail("sibling draws: rows [R] is null");
  if (!first) fail("sibling draws: first [S + 1] is null");
  if (!uniforms) fail("sibling draws: uniforms [R * count] is null");
  if (!tokens) fail("sibling draws: tokens [R * count] is null");
}

int sibling_draw_vec(const SiblingDrawParams& p) {
  return p.vocab % 4 == 0 && reinterpret_cast<uintptr_t>(p.probs) % 16 == 0 ? 4 : 1;
}

}  // namespace specula
