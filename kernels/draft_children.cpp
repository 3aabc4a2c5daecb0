// Host side of the draft-children kernels: their parameter checks and vector width.
#include "kernels/draft_children.h"

#include <algorithm>
#include <cstdint>

#include "kernels/shared/error.h"
#include "kernels/verify_kernels.h"

namespace specula {

static_assert(kMaxRankedChildren == kMaxVerifyTreeNodes, "a ranked node has at most as many children as a tree nodes");

namespace {

// The vocabulary and the children a row, as both kernels take them; `what` names the kernel.
void check_vocab_and_count(const char* what, int32_t vocab, int32_t count) {
  if (vocab < 1 || vocab > (1 << 30)) fail(what, ": vocab must be in [1, 2^30], got ", vocab);
  if (count < 1 || count > std::min(vocab, kMaxRankedChildren))
    fail(what, ": count must be in [1, min(V, ", kMaxRankedChildren, ")] (V = ", vocab, "), got ", count);
}

// 4-wide accesses where every row of probs starts 16-byte aligned.
int vec_width(int32_t vocab, const float* probs) {
  return vocab % 4 == 0 && reinterpret_cast<uintptr_t>(probs) % 16 == 0 ? 4 : 1;
}

}  // namespace

void RankedChildrenParams::check() const {
  if (batch < 1) fail("ranked children: batch must be >= 1, got ", batch);
  check_vocab_and_count("ranked children", vocab, count);
  if (!probs) fail("ranked children: probs [B, V] is null");
  if (!tokens) fail("ranked children: tokens [B, count] is null");
}

int ranked_children_vec(const RankedChildrenParams& p) { return vec_width(p.vocab, p.probs); }

void SiblingDrawParams::check() const {
  if (sequences < 1) fail("sibling draws: sequences must be >= 1, got ", sequences);
  if (rows_total < 1) fail("sibling draws: rows_total must be >= 1, got ", rows_total);
  check_vocab_and_count("sibling draws", vocab, count);
  if (!probs) fail("sibling draws: probs [*, V] is null");
  if (!rows) fail("sibling draws: rows [R] is null");
  if (!first) fail("sibling draws: first [S + 1] is null");
  if (!uniforms) fail("sibling draws: uniforms [R * count] is null");
  if (!tokens) fail("sibling draws: tokens [R * count] is null");
  if (!spent) fail("sibling draws: spent [R] is null");
  if (uniforms_per_sequence < 0) fail("sibling draws: uniforms_per_sequence must be >= 0, got ", uniforms_per_sequence);
  if (uniforms_per_sequence > 0 && (!spent_before || !spent_after))
    fail("sibling draws: uniforms_per_sequence ", uniforms_per_sequence, " needs spent_before and spent_after [S]");
}

int sibling_draw_vec(const SiblingDrawParams& p) { return vec_width(p.vocab, p.probs); }

}  // namespace specula
