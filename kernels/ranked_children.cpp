// Host side of the ranked-children kernel: its parameter checks and vector width.
#include "kernels/ranked_children.h"

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

}  // namespace specula
