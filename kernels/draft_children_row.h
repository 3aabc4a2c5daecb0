// The per-row code of kernels/draft_children.h over any Block (a CUDA block, or its CPU emulation), plain C++
// with SPECULA_HD.
//
// Ranked children. The order is total — probability descending, then id ascending — so child j is the greatest token
// after child j - 1 in it, and a round needs only the previous child, not the list of those taken: each thread keeps
// the best of its tokens after that child (its tokens ascend, so the first of equal probabilities stays), and the block
// takes the greatest probability, then the least id holding it. count rounds read the row count times; a ranked node
// has a handful of children.
#pragma once

#include <cstdint>

#include "kernels/draft_children.h"
#include "kernels/fused_sampler_row.h"
#include "kernels/shared/host_device.h"
#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"

namespace specula {
namespace ranked_children {

// A probability's rank key: non-negative floats order as their bits do. Zeros of either sign (and anything not
// positive, which a processed row holds no other of) share key 0, where draw_children's comparison finds them equal.
SPECULA_HD int32_t rank_key(float x) { return x > 0.0f ? static_cast<int32_t>(float_bits(x)) : 0; }

template <class Block>
SPECULA_HD void rank_row(Block& b, const RankedChildrenParams& p, int32_t row) {
  constexpr int VEC = Block::kVec;
  const float* q = p.probs + static_cast<int64_t>(row) * p.vocab;
  int32_t* out = p.tokens + static_cast<int64_t>(row) * p.count;
  bool ties_taken_at_once = false;
#if !defined(__CUDA_ARCH__)
  ties_taken_at_once = mutant_on(Mutant::ranked_children_skip_ties);
#endif
  int32_t previous_key = 0x7fffffff, previous_id = -1;  // before every token
  for (int32_t j = 0; j < p.count; ++j) {
    int32_t best_key = -1, best_id = fused_sampler::kNoIndex;
    b.for_each_vec([&](int32_t base) {
      float x[VEC];
      fused_sampler::load_vec<VEC>(q + base, x);
      for (int k = 0; k < VEC; ++k) {
        const int32_t key = rank_key(x[k]), id = base + k;
        const bool after = key < previous_key || (!ties_taken_at_once && key == previous_key && id > previous_id);
        if (after && key > best_key) {
          best_key = key;
          best_id = id;
        }
      }
    });
    const int32_t top = b.max_i32(best_key);
    const int32_t id = b.min_i32(best_key == top ? best_id : fused_sampler::kNoIndex);
    if (b.leader()) out[j] = id;
    previous_key = top;
    previous_id = id;
  }
}

}  // namespace ranked_children

namespace sibling_draws {

// Siblings without replacement, one block a row, in two launches. A row's draws take its sequence's uniforms in turn
// from where the rows before it stopped, so each row first needs what the rows before it spent: count_draws (the first
// launch) writes every row's number of draws to `spent`, and draw_row (the second) sums its sequence's earlier rows'.
// A draw takes a positive token not taken before (a drawn sibling weighs zero; inverse_cdf picks positive weights
// only), so a row of s positive weights draws min(count, s) siblings, and one more draw, which finds no mass left
// (-1), when s < count; a row holding a NaN has no positive total, and stops at its first draw. The laws are processed
// rows, which hold no negative weight (SiblingDrawParams::probs).
// A row whose own node was never drawn (SiblingDrawParams::row_tokens) draws nothing.
SPECULA_HD bool row_dead(const SiblingDrawParams& p, int32_t r) {
  bool dead = p.row_tokens && p.row_tokens[r] < 0;
#if !defined(__CUDA_ARCH__)
  dead = dead && !mutant_on(Mutant::device_siblings_dead_rows_draw);
#endif
  return dead;
}

template <class Block>
SPECULA_HD void count_draws(Block& b, const SiblingDrawParams& p, int32_t r) {
  constexpr int VEC = Block::kVec;
  if (row_dead(p, r)) {  // the whole block takes the branch: no barrier is skipped by some threads only
    if (b.leader()) p.spent[r] = 0;
    return;
  }
  const float* q = p.probs + static_cast<int64_t>(p.rows[r]) * p.vocab;
  double positive = 0.0;
  int32_t nan = 0;
  b.for_each_vec([&](int32_t base) {
    float x[VEC];
    fused_sampler::load_vec<VEC>(q + base, x);
    for (int k = 0; k < VEC; ++k) {
      positive += x[k] > 0.0f ? 1.0 : 0.0;
      nan |= x[k] == x[k] ? 0 : 1;
    }
  });
  const double support = b.sum_f64(positive);  // an integer below 2^31: exact
  const int32_t has_nan = b.max_i32(nan);
  if (b.leader()) p.spent[r] = has_nan ? 1 : support < p.count ? static_cast<int32_t>(support) + 1 : p.count;
}

// Draw j of row r is fused_sampler::sample_weights (the fused sampler's and the verifiers' inverse-CDF rule over
// float64 weights, sample_from_weights on the CPU) over the row's law with the j siblings drawn before it weighing
// zero, as draw_children zeroes them; the row's children are kept in the Block's i32 scratch (shared memory), which
// each draw reads after the barrier that follows its write. A draw that finds no mass left (-1) ends the row, its
// uniform spent.
template <class Block>
SPECULA_HD void draw_row(Block& b, const SiblingDrawParams& p, int32_t r) {
  constexpr int VEC = Block::kVec;
  int32_t* drawn = b.i32();
  bool keep_drawn = true, spend_all = false;
#if !defined(__CUDA_ARCH__)
  keep_drawn = !mutant_on(Mutant::device_siblings_replaced);
  spend_all = mutant_on(Mutant::device_siblings_skip_spent);
#endif
  // The row's sequence: the last s with first[s] <= r.
  int32_t lo = 0, hi = p.sequences - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (p.first[mid] <= r)
      lo = mid;
    else
      hi = mid - 1;
  }
  int32_t attempt = 0;
  for (int32_t e = p.first[lo]; e < r; ++e) attempt += spend_all ? p.count : p.spent[e];
  // Across depths: the sequence's uniforms from those its rows at the depths before spent; its last row hands the
  // next depth the count (read there, after this launch).
  int32_t spent_before = p.uniforms_per_sequence > 0 ? p.spent_before[lo] : 0;
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::device_siblings_carry_dropped)) spent_before = 0;
#endif
  const double* uniforms =
      p.uniforms_per_sequence > 0
          ? p.uniforms + static_cast<int64_t>(lo) * p.uniforms_per_sequence + spent_before + attempt
          : p.uniforms + static_cast<int64_t>(p.first[lo]) * p.count + attempt;
  if (p.uniforms_per_sequence > 0 && r == p.first[lo + 1] - 1 && b.leader())
    p.spent_after[lo] = spent_before + attempt + p.spent[r];
  const float* q = p.probs + static_cast<int64_t>(p.rows[r]) * p.vocab;
  int32_t* out = p.tokens + static_cast<int64_t>(r) * p.count;
  const bool dead = row_dead(p, r);
  int32_t j = dead ? p.count : 0;  // a row that draws nothing: every child -1 below
  // The low six bits of every sibling drawn so far, as a 64-bit set: a token whose bit is clear was not drawn, so only
  // the tokens whose bit is set (about count / 64 of them) compare against the list.
  uint64_t maybe_drawn = 0;
  for (; j < p.count; ++j) {
    const int32_t before = keep_drawn ? j : 0;
    const auto weight = [&](int32_t base, double(&w)[VEC]) {
      float x[VEC];
      fused_sampler::load_vec<VEC>(q + base, x);
      for (int k = 0; k < VEC; ++k) {
        bool taken = false;
        if ((maybe_drawn >> ((base + k) & 63)) & 1u)
          for (int32_t i = 0; i < before; ++i) taken = taken || drawn[i] == base + k;
        w[k] = taken ? 0.0 : static_cast<double>(x[k]);
      }
    };
    const int32_t t = fused_sampler::sample_weights(b, p.vocab, weight, uniforms[j]);
    if (b.leader()) out[j] = t;
    if (t < 0) break;
    if (b.leader()) drawn[j] = t;
    maybe_drawn |= uint64_t{1} << (t & 63);  // t is the block's: every thread keeps the same set
    b.sync();                                // the next draw reads it
  }
  if (b.leader())
    for (int32_t i = dead ? 0 : j + 1; i < p.count; ++i) out[i] = -1;
}

}  // namespace sibling_draws
}  // namespace specula
