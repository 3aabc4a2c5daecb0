// The verification kernels' per-row algorithms, written once for two backends: a CUDA block
// (VerifyCudaBlock in verify_kernels.cu, one block per batch row, CUB primitives) and one CPU "thread"
// (VerifyHostBlock in verify_kernels.cpp). Everything that decides anything is here or in sampler_math.h;
// the Block only supplies collectives, so the CPU run of this file tests the kernels' decisions without a
// GPU, against the reference verifiers (verify/verifiers/*.cpp), whose semantics these functions copy
// draw for draw:
//   - the same Philox keys (StepRandom::key: role, slot = draft index, tree node + 1, or row);
//   - the same accept test (accept_draft_token, u in (0, 1)) and the same residual weights;
//   - the same inverse-CDF draw from unnormalised weights (sample_from_weights: float64 total, first
//     index whose running sum exceeds u * total, else the last positive weight), with the same fallback
//     to p when every residual weight is zero.
// Only the order of float64 sums over the vocabulary differs between backends: index order on the CPU
// (exactly the reference's order), a tree on the GPU (kernels/README.md, "Parity").
//
// Block interface (every call is collective: all threads of the block make it, in the same order):
//   kThreads, kVec                 threads per row, elements per vector access
//   rank(), leader()               this thread's index; true for exactly one thread (global outputs)
//   block_leader()                 true for one thread of each block (its shared scratch); = leader() but in
//                                  a cluster (fused_sampler_row.h, SlicedRow), whose every block keeps a copy
//   for_each_vec(f)                f(base) for this thread's vectors [base, base + kVec) of the vocabulary
//   for_each_index(n, f)           f(i) for this thread's share of [0, n) (in a cluster, every block covers n)
//   sum_f64, min_i32, max_i32      reductions whose result every thread receives
//   sum_weights(WeightsTotal)      a draw's float64 total and last positive index in one (fused_sampler_row.h)
//   inclusive_scan(in, out)        prefix sums of a tile of kThreads * kVec values; returns the tile's total
//   sync()                         barrier: shared scratch written before it is visible after it
//   f64(), i32()                   shared scratch (kTreeF64Scratch, kTreeI32Scratch elements; tree only)
// A cluster's Block (SlicedRow) adds slice_begin() and staged(which): its shared memory for this block's slices of a p
// row (which = 0) and a q row (1), or null where the launch gave it none (see "Rows read once" below).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/fused_sampler_row.h"
#include "kernels/shared/host_device.h"
#include "kernels/shared/mutation_points.h"
#include "kernels/shared/philox.h"
#include "kernels/shared/sampler_math.h"
#include "kernels/verify_kernels.h"

namespace specula {
namespace verify_row {

using fused_sampler::kNoIndex;
using fused_sampler::load_vec;
using fused_sampler::load_vec_once;
using fused_sampler::SlicedRow;
using fused_sampler::store_vec;

// Tree scratch: q_total[N + 1] and r_total[N] (float64); first_child[N + 1], next_sibling[N],
// sibling_token[N] and path[N] (int32).
constexpr int kTreeF64Scratch = 2 * kMaxVerifyTreeNodes + 1;
constexpr int kTreeI32Scratch = 4 * kMaxVerifyTreeNodes + 1;

// The weight rules after a rejection. ExactRules are the only ones the launchers use; the host tests run
// a broken variant to show that the parity checks can fail.
// Their host compilation carries the mutation point of the CPU verifiers' residual (residual_not_subtracted),
// so the law tests of the emulated device path (--device cuda-host) can show they catch it too.
struct ExactRules {
  // Leviathan et al. 2023, eq. 3: norm((p - q)+), also the tree's residual update (SpecInfer Alg. 2).
  static SPECULA_HD double residual(double p, double q) {
#if !defined(__CUDA_ARCH__)
    if (mutant_on(Mutant::residual_not_subtracted)) return p;
#endif
    return residual_weight(p, q);
  }
  // Sun et al. 2025, Alg. 2: norm((w p - q)+).
  static SPECULA_HD double block_residual(double w, double p, double q) {
#if !defined(__CUDA_ARCH__)
    if (mutant_on(Mutant::residual_not_subtracted)) return w * p;
#endif
    return block_residual_weight(w, p, q);
  }
};
struct ResidualNotSubtractedRules {
  static SPECULA_HD double residual(double p, double) { return p; }
  static SPECULA_HD double block_residual(double w, double p, double) { return w * p; }
};

// StepRandom::key(role, slot).uniform() of the CPU verifiers.
SPECULA_HD double step_uniform(const VerifyRowParams& r, RandomRole role, uint32_t slot) {
  return philox_uniform(r.seed, philox_stream(r.sequence, role), step_draw_offset(r.step, slot));
}

// ---- Row layout ----------------------------------------------------------------------------------------

// The first p row and the first q row of batch row `row`: the padded layouts ([B, p_rows, V], [B, q_rows, V])
// or VerifyRowLayout's dense one, where the row's `rows_used` rows must lie in [0, R).
struct RowBase {
  size_t p;
  size_t q;
  bool ok;
};
SPECULA_HD RowBase row_base(const VerifyRowLayout& layout, int32_t row, int32_t p_rows, int32_t q_rows,
                            int32_t rows_used) {
  RowBase base{static_cast<size_t>(row) * p_rows, static_cast<size_t>(row) * q_rows, true};
  if (layout.first_row) {
    const int64_t first = layout.first_row[row];
    if (first < 0 || first > layout.total_rows - rows_used) return {0, 0, false};
    base.p = base.q = static_cast<size_t>(first);
  }
  // q's rows apart from p's (VerifyRowLayout::q_first_row), at most rows_used of them.
  if (layout.q_first_row) {
    const int64_t first = layout.q_first_row[row];
    if (first < 0 || first > layout.q_total_rows - rows_used) return {0, 0, false};
    base.q = static_cast<size_t>(first);
  }
  return base;
}

// Whether q row `q_row` (an index into q's rows) holds a recorded draft law.
SPECULA_HD bool q_recorded(const VerifyRowLayout& layout, size_t q_row) {
  return !layout.q_present || layout.q_present[q_row] != 0;
}

// ---- Rows read once: staging in shared memory -----------------------------------------------------------
// A row's draw reads the same p and q rows in several passes: the residual's total, the inverse-CDF scan, the
// tree's per-sibling totals, the overlap. In a cluster, each block can keep its slices of those two rows in shared
// memory (Block::staged): stage_rows reads them from global memory once, and every later pass reads the copy. A
// block's passes read only its own slice, so block barriers order the copy. Scalar reads at one token (p(d),
// q(d)) stay in global memory. One block per row (and a launch without the memory) reads global memory throughout.

// A p or q row as a pass reads it: this block's staged slice where the row is staged, else global memory.
struct RowView {
  const float* row;     // the whole row in global memory; null where there is none (no q recorded)
  const float* staged;  // this block's slice of it in shared memory, or null
  int32_t begin;        // the slice's first token
  SPECULA_HD explicit operator bool() const { return row != nullptr; }
  template <int VEC>
  SPECULA_HD void load(int32_t base, float (&x)[VEC]) const {
    if (staged)
      load_vec<VEC>(staged + (base - begin), x);
    else
      load_vec<VEC>(row + base, x);
  }
};

// The rows whose slices a block's shared memory holds (every thread keeps the same copy).
struct StagedRows {
  const float* p = nullptr;
  const float* q = nullptr;
};

// The block's shared memory for slices of p (which = 0) or q (1), or null.
template <class Block>
SPECULA_HD float* staged_memory(Block& b, int which) {
  if constexpr (SlicedRow<Block>::value)
    return b.staged(which);
  else
    return nullptr;
}

// Copies this block's slices of p_row and q_row (either may be null) into its shared memory, each unless it is
// already there (collective).
template <class Block>
SPECULA_HD void stage_rows(Block& b, StagedRows& s, const float* p_row, const float* q_row) {
  constexpr int VEC = Block::kVec;
  float* const p_memory = staged_memory(b, 0);
  float* const q_memory = staged_memory(b, 1);
  if (!p_memory) return;
  const bool copy_p = p_row && p_row != s.p;
  const bool copy_q = q_row && q_row != s.q;
  if (!copy_p && !copy_q) return;
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::staged_rows_stale) && (s.p || s.q)) {  // the memory keeps the rows staged first
    if (copy_p) s.p = p_row;
    if (copy_q) s.q = q_row;
    return;
  }
#endif
  if constexpr (SlicedRow<Block>::value) {
    b.sync();  // every pass over the rows staged before has finished
    const int32_t begin = b.slice_begin();
    // A plain copy: the compiler unrolls it, kLoadsInFlight loads in flight a thread (checked in the PTX by
    // cuda_loads_in_flight). Batched explicitly (for_each_loaded_vec), the 4-wide kernels took up to 84 registers
    // more, for loads the compiler already keeps together.
    b.for_each_vec([&](int32_t base) {
      float x[VEC];
      if (copy_p) {
        load_vec_once<VEC>(p_row + base, x);
        store_vec<VEC>(p_memory + (base - begin), x);
      }
      if (copy_q) {
        load_vec_once<VEC>(q_row + base, x);
        store_vec<VEC>(q_memory + (base - begin), x);
      }
    });
    b.sync();  // the slices are complete before any thread reads another's tokens
  }
  if (copy_p) s.p = p_row;
  if (copy_q) s.q = q_row;
}

// How the passes read `row`: from this block's staged slice when it is one of the staged rows.
template <class Block>
SPECULA_HD RowView view_row(Block& b, const StagedRows& s, const float* row) {
  if constexpr (SlicedRow<Block>::value) {
    if (row && row == s.p) return {row, staged_memory(b, 0), b.slice_begin()};
    if (row && row == s.q) return {row, staged_memory(b, 1), b.slice_begin()};
  }
  (void)b;
  (void)s;
  return {row, nullptr, 0};
}

// ---- Inverse-CDF draws (fused_sampler_row.h, shared with the fused sampler's draw) ----------------------

using fused_sampler::inverse_cdf;
using fused_sampler::sample_weights;
using fused_sampler::weights_total;
using fused_sampler::WeightsTotal;

// A row of probabilities (float) as weights: the bonus draw and the residual's fallback.
template <int VEC>
struct ViewWeights {
  RowView row;
  SPECULA_HD void operator()(int32_t base, double (&w)[VEC]) const {
    float x[VEC];
    row.load<VEC>(base, x);
    for (int j = 0; j < VEC; ++j) w[j] = static_cast<double>(x[j]);
  }
};

// sum_x min(p(x), q(x)) of one row (the probability that a draw from q is accepted against p), or p at the
// candidate where the row has no q: the CPU generator's acceptance_probability.
template <class Block>
SPECULA_HD double row_overlap(Block& b, RowView p_row, RowView q_row, int32_t candidate) {
  constexpr int VEC = Block::kVec;
  if (!q_row) return static_cast<double>(p_row.row[candidate]);
  double sum = 0.0;
  b.for_each_vec([&](int32_t base) {
    float px[VEC], qx[VEC];
    p_row.load<VEC>(base, px);
    q_row.load<VEC>(base, qx);
    for (int j = 0; j < VEC; ++j) sum += static_cast<double>(px[j] < qx[j] ? px[j] : qx[j]);
  });
  return b.sum_f64(sum);
}

// The positions the verifier reached: every accepted one, and the first rejected one unless all were
// accepted, within the draft's depth.
SPECULA_HD int32_t tested_positions(int32_t depth, int32_t accepted, bool all_accepted) {
  const int32_t reached = accepted + (all_accepted ? 0 : 1);
  return reached < depth ? reached : depth;
}

// ---- Outputs --------------------------------------------------------------------------------------------

template <class Block>
SPECULA_HD void write_overlap(Block& b, const VerifyOutputs& out, int32_t row, double sum, int32_t count) {
  if (out.overlap_sum && b.leader()) {
    out.overlap_sum[row] = sum;
    out.overlap_count[row] = count;
  }
}

// Writes one row's outputs: emitted = prefix(0 .. accepted), then `last`, then -1 up to `width`. A failed
// row (status != ok) emits nothing.
template <class Block, class Prefix>
SPECULA_HD void write_row(Block& b, const VerifyOutputs& out, int32_t row, int32_t width, VerifyRowStatus status,
                          int32_t accepted, int32_t last, bool bonus, int32_t q_zero, Prefix&& prefix) {
  const bool ok = status == VerifyRowStatus::ok;
  const int32_t count = ok ? accepted + 1 : 0;
  int32_t* emitted = out.emitted + static_cast<size_t>(row) * static_cast<size_t>(width);
  b.for_each_index(width, [&](int32_t j) { emitted[j] = j < count - 1 ? prefix(j) : (j == count - 1 ? last : -1); });
  if (b.leader()) {
    out.num_emitted[row] = count;
    out.num_accepted[row] = ok ? accepted : 0;
    out.bonus[row] = ok && bonus ? 1 : 0;
    out.q_zero_errors[row] = q_zero;
    out.status[row] = static_cast<int32_t>(status);
  }
}

template <class Block>
SPECULA_HD void fail_row(Block& b, const VerifyOutputs& out, int32_t row, int32_t width, VerifyRowStatus status) {
  write_row(b, out, row, width, status, 0, -1, false, 0, [](int32_t) { return -1; });
  write_overlap(b, out, row, 0.0, 0);
}

// The first draft token outside [0, V), or kNoIndex.
template <class Block>
SPECULA_HD int32_t first_bad_token(Block& b, const int32_t* tokens, int32_t count, int32_t vocab) {
  int32_t bad = kNoIndex;
  b.for_each_index(count, [&](int32_t i) {
    if ((tokens[i] < 0 || tokens[i] >= vocab) && i < bad) bad = i;
  });
  return b.min_i32(bad);
}

// ---- Chain: token-wise rejection sampling (Leviathan et al. 2023, Alg. 1; specula::verify_chain) --------

template <class Rules, class Block>
SPECULA_HD void chain_row(Block& b, const ChainVerifyParams& p, int32_t row) {
  constexpr int VEC = Block::kVec;
  const VerifyRowParams rp = p.rows[row];
  const int32_t K = p.max_draft, width = p.max_draft + 1;
  const size_t V = static_cast<size_t>(p.vocab);
  if (rp.num_draft < 0 || rp.num_draft > K) return fail_row(b, p.out, row, width, VerifyRowStatus::bad_row_params);
  const int32_t k = rp.num_draft;
  const int32_t* draft = p.draft + static_cast<size_t>(row) * K;
  if (first_bad_token(b, draft, k, p.vocab) != kNoIndex)
    return fail_row(b, p.out, row, width, VerifyRowStatus::bad_draft_token);
  const RowBase base_row = row_base(p.layout, row, K + 1, K, k + 1);
  if (!base_row.ok) return fail_row(b, p.out, row, width, VerifyRowStatus::bad_row_params);
  const float* p_rows = p.p + base_row.p * V;
  const bool has_q = p.q && (rp.flags & kVerifyRowHasQ);
  // Draft i's law, or null for a point mass at the draft (no q recorded for its row).
  const auto q_of = [&](int32_t i) -> const float* {
    return has_q && q_recorded(p.layout, base_row.q + i) ? p.q + (base_row.q + i) * V : nullptr;
  };
  const auto drafted = [&](int32_t j) { return draft[j]; };
  StagedRows staged;
  const auto view = [&](const float* r) { return view_row(b, staged, r); };
  // The expected acceptance along the reached positions (VerifyOutputs::overlap_sum); the last one's rows are
  // the staged ones.
  const auto overlap = [&](int32_t accepted, bool all_accepted) {
    if (!p.out.overlap_sum) return;
    const int32_t tested = tested_positions(k, accepted, all_accepted);
    double sum = 0.0;
    for (int32_t i = 0; i < tested; ++i) sum += row_overlap(b, view(p_rows + i * V), view(q_of(i)), draft[i]);
    write_overlap(b, p.out, row, sum, tested);
  };

  int32_t q_zero = 0;
  for (int32_t i = 0; i < k; ++i) {
    const float* p_i = p_rows + i * V;
    const float* q_i = q_of(i);
    const int32_t d = draft[i];
    const double q_d = q_i ? static_cast<double>(q_i[d]) : 1.0;
    if (q_d <= 0.0) ++q_zero;  // impossible for a true proposal: rejected with certainty
    if (accept_draft_token(step_uniform(rp, RandomRole::accept, i), p_i[d], q_d)) continue;

    // Rejected: draw from norm((p - q)+), unnormalised, with its own uniform (verify/ALGORITHMS.md §1).
    const double v = step_uniform(rp, RandomRole::residual, i);
    stage_rows(b, staged, p_i, q_i);
    const RowView p_view = view(p_i), q_view = view(q_i);
    const auto residual = [&](int32_t base, double(&w)[VEC]) {
      float px[VEC], qx[VEC] = {};
      p_view.load<VEC>(base, px);
      if (q_view) q_view.load<VEC>(base, qx);
      for (int j = 0; j < VEC; ++j)
        w[j] = Rules::residual(px[j], q_view ? static_cast<double>(qx[j]) : (base + j == d ? 1.0 : 0.0));
    };
    int32_t y = sample_weights(b, p.vocab, residual, v);
    if (y < 0) y = sample_weights(b, p.vocab, ViewWeights<VEC>{p_view}, v);  // every weight 0: O(eps) event
    const VerifyRowStatus status = y >= 0 ? VerifyRowStatus::ok : VerifyRowStatus::empty_distribution;
    if (status != VerifyRowStatus::ok) return fail_row(b, p.out, row, width, status);
    overlap(i, false);
    return write_row(b, p.out, row, width, status, i, y, false, q_zero, drafted);
  }
  // Every draft accepted: the bonus token from p_{k+1}.
  stage_rows(b, staged, p_rows + k * V, nullptr);
  const int32_t y =
      sample_weights(b, p.vocab, ViewWeights<VEC>{view(p_rows + k * V)}, step_uniform(rp, RandomRole::bonus, k));
  const VerifyRowStatus status = y >= 0 ? VerifyRowStatus::ok : VerifyRowStatus::empty_distribution;
  if (status != VerifyRowStatus::ok) return fail_row(b, p.out, row, width, status);
  overlap(k, true);
  write_row(b, p.out, row, width, status, k, y, true, q_zero, drafted);
}

// ---- Block verification (Sun et al., ICLR 2025, Alg. 2; specula::verify_block) ---------------------------

// The weights of norm((w p_{i+1} - q_{i+1})+) on row i.
template <class Rules, int VEC>
struct BlockResidual {
  RowView p_i;
  RowView q_i;
  double w;
  SPECULA_HD void operator()(int32_t base, double (&out)[VEC]) const {
    float px[VEC], qx[VEC];
    p_i.load<VEC>(base, px);
    q_i.load<VEC>(base, qx);
    for (int j = 0; j < VEC; ++j) out[j] = Rules::block_residual(w, px[j], qx[j]);
  }
};

template <class Rules, class Block>
SPECULA_HD void block_row(Block& b, const BlockVerifyParams& p, int32_t row) {
  constexpr int VEC = Block::kVec;
  const VerifyRowParams rp = p.rows[row];
  const int32_t K = p.max_draft, width = p.max_draft + 1;
  const size_t V = static_cast<size_t>(p.vocab);
  if (rp.num_draft < 0 || rp.num_draft > K) return fail_row(b, p.out, row, width, VerifyRowStatus::bad_row_params);
  const int32_t gamma = rp.num_draft;
  const RowBase base_row = row_base(p.layout, row, K + 1, K, gamma + 1);
  if (!base_row.ok) return fail_row(b, p.out, row, width, VerifyRowStatus::bad_row_params);
  // Without q on every row, block verification is token-wise verification (specula::verify_block).
  bool every_q = p.q && (rp.flags & kVerifyRowHasQ);
  for (int32_t i = 0; i < gamma && every_q; ++i) every_q = q_recorded(p.layout, base_row.q + i);
  if (!every_q) return chain_row<Rules>(b, p, row);
  const int32_t* draft = p.draft + static_cast<size_t>(row) * K;
  if (first_bad_token(b, draft, gamma, p.vocab) != kNoIndex)
    return fail_row(b, p.out, row, width, VerifyRowStatus::bad_draft_token);
  const float* p_rows = p.p + base_row.p * V;
  const float* q_rows = p.q + base_row.q * V;
  StagedRows staged;
  const auto view = [&](const float* r) { return view_row(b, staged, r); };
  // The expected acceptance along the reached positions; the last one's rows are the staged ones.
  const auto overlap = [&](int32_t accepted, bool all_accepted) {
    if (!p.out.overlap_sum) return;
    const int32_t tested = tested_positions(gamma, accepted, all_accepted);
    double sum = 0.0;
    for (int32_t i = 0; i < tested; ++i) sum += row_overlap(b, view(p_rows + i * V), view(q_rows + i * V), draft[i]);
    write_overlap(b, p.out, row, sum, tested);
  };

  // w_i = min(1, w_{i-1} p_i(d_i) / q_i(d_i)), recomputed from scalars when needed (O(gamma^2) loads, no
  // per-thread array).
  const auto capped_ratio = [&](int32_t i) {
    double w = 1.0;
    for (int32_t j = 1; j <= i; ++j) {
      const int32_t d = draft[j - 1];
      w = block_capped_ratio(w, p_rows[(j - 1) * V + d], q_rows[(j - 1) * V + d]);
    }
    return w;
  };
  int32_t q_zero = 0;
  for (int32_t i = 0; i < gamma; ++i) q_zero += static_cast<double>(q_rows[i * V + draft[i]]) <= 0.0;

  // Backward scan: the largest i whose stop test u_i <= h_i passes; h_gamma = w_gamma and
  // h_i = r_i / (r_i + 1 - w_i) with r_i = sum_x (w_i p_{i+1}(x) - q_{i+1}(x))+.
  int32_t tau = 0;
  WeightsTotal r_tau{0.0, -1};
  for (int32_t i = gamma; i >= 1; --i) {
    const double w_i = capped_ratio(i);
    WeightsTotal r{0.0, -1};
    double h = w_i;
    if (i < gamma) {
      stage_rows(b, staged, p_rows + i * V, q_rows + i * V);  // the draw at tau = i reads them again
      r = weights_total(b, BlockResidual<Rules, VEC>{view(p_rows + i * V), view(q_rows + i * V), w_i});
      h = block_stop_probability(r.total, w_i);
    }
    if (step_uniform(rp, RandomRole::accept, i) <= h) {
      tau = i;
      r_tau = r;
      break;
    }
  }
  const auto drafted = [&](int32_t j) { return draft[j]; };
  if (tau == gamma) {
    stage_rows(b, staged, p_rows + gamma * V, nullptr);
    const int32_t y = sample_weights(b, p.vocab, ViewWeights<VEC>{view(p_rows + gamma * V)},
                                     step_uniform(rp, RandomRole::bonus, gamma));
    const VerifyRowStatus status = y >= 0 ? VerifyRowStatus::ok : VerifyRowStatus::empty_distribution;
    if (status != VerifyRowStatus::ok) return fail_row(b, p.out, row, width, status);
    overlap(gamma, true);
    return write_row(b, p.out, row, width, status, gamma, y, true, q_zero, drafted);
  }
  // Resample from norm((w_tau p_{tau+1} - q_{tau+1})+). For tau >= 1 its total is r_tau, already reduced in
  // the same order (sample_from_weights would sum the same weights again).
  stage_rows(b, staged, p_rows + tau * V, q_rows + tau * V);  // staged already by the scan when tau >= 1
  const BlockResidual<Rules, VEC> residual{view(p_rows + tau * V), view(q_rows + tau * V), capped_ratio(tau)};
  const WeightsTotal t = tau > 0 ? r_tau : weights_total(b, residual);
  const double v = step_uniform(rp, RandomRole::residual, tau);
  int32_t y = inverse_cdf(b, p.vocab, residual, t, v);
  if (y < 0) y = sample_weights(b, p.vocab, ViewWeights<VEC>{view(p_rows + tau * V)}, v);
  const VerifyRowStatus status = y >= 0 ? VerifyRowStatus::ok : VerifyRowStatus::empty_distribution;
  if (status != VerifyRowStatus::ok) return fail_row(b, p.out, row, width, status);
  overlap(tau, false);
  write_row(b, p.out, row, width, status, tau, y, false, q_zero, drafted);
}

// ---- Tree: recursive rejection sampling (SpecInfer Alg. 2, RSD, EAGLE; specula::verify_tree) -----------

// What the tree's per-token recurrence needs about the siblings already tested at the current row.
struct TreeSiblings {
  const int32_t* token;   // [m] sibling tokens in generation order
  const double* q_total;  // [m + 1] normaliser of sibling l's proposal (not used for point masses)
  const double* r_total;  // [m] residual total after sibling l was rejected
  bool point_mass;        // deterministic scheme or no recorded q: q_l = point mass at sibling l
  bool without_replacement;
};

// Sibling l's proposal at token x (sibling_proposal of the CPU): a point mass, or q with the earlier
// siblings removed (without replacement) divided by its total when that is positive.
SPECULA_HD double tree_proposal(const TreeSiblings& s, int32_t l, int32_t x, float q_x, bool drawn_before) {
  if (s.point_mass) return x == s.token[l] ? 1.0 : 0.0;
  const double raw = s.without_replacement && drawn_before ? 0.0 : static_cast<double>(q_x);
  return s.q_total[l] > 0.0 ? raw / s.q_total[l] : raw;
}

// The current residual p at token x after `steps` rejected siblings, recomputed from p(x), q(x) and the
// per-sibling totals with the CPU's operations in its order (p <- (p - q_l)+ / r_l when r_l > 0). No
// per-token state survives between passes, so the kernel needs no [V] workspace; the price is O(steps)
// work per token per pass (kernels/README.md). With `next`, also sibling `steps`' proposal at x and
// whether x is among siblings 0..steps (for the next normaliser, without replacement).
struct TreeTokenState {
  double p_cur;
  double q_next;
  bool drawn_through_next;
};

template <class Rules>
SPECULA_HD TreeTokenState tree_state_at(const TreeSiblings& s, int32_t x, float p_x, float q_x, int32_t steps,
                                        bool next) {
  double p_cur = static_cast<double>(p_x);
  bool drawn = false;
  for (int32_t l = 0; l < steps; ++l) {
    const double q_l = tree_proposal(s, l, x, q_x, drawn);
    drawn = drawn || x == s.token[l];
    const double updated = Rules::residual(p_cur, q_l);
    if (s.r_total[l] > 0.0) p_cur = updated / s.r_total[l];  // an empty residual (p = q_l) keeps p
  }
  if (!next) return {p_cur, 0.0, drawn};
  return {p_cur, tree_proposal(s, steps, x, q_x, drawn), drawn || x == s.token[steps]};
}

// A tree row's nodes are well formed: parents[i] in [-1, i) (topological order) and tokens in [0, V). With `holes`
// (kVerifyRowHoles) a token may be -1, a hole, where it is a last sibling: no drawn node after it has its parent, and
// none has it as parent. Returns the failure's status, or ok.
template <class Block>
SPECULA_HD VerifyRowStatus check_tree_nodes(Block& b, const int32_t* tokens, const int32_t* parents, int32_t n,
                                            int32_t vocab, bool holes) {
  int32_t bad_parent = kNoIndex, bad_token = kNoIndex;
  b.for_each_index(n, [&](int32_t i) {
    if ((parents[i] < -1 || parents[i] >= i) && i < bad_parent) bad_parent = i;
  });
  bad_parent = b.min_i32(bad_parent);
  if (bad_parent != kNoIndex) return VerifyRowStatus::bad_tree;
  if (!holes) {
    bad_token = first_bad_token(b, tokens, n, vocab);
  } else {
    b.for_each_index(n, [&](int32_t i) {
      const int32_t t = tokens[i], parent = parents[i];
      bool bad = t < -1 || t >= vocab || (t >= 0 && parent >= 0 && tokens[parent] < 0);
      for (int32_t m = 0; m < i && t >= 0 && !bad; ++m) bad = parents[m] == parent && tokens[m] < 0;
      if (bad && i < bad_token) bad_token = i;
    });
    bad_token = b.min_i32(bad_token);
  }
  return bad_token != kNoIndex ? VerifyRowStatus::bad_draft_token : VerifyRowStatus::ok;
}

// Child lists in node order (generation order): the children of row r are the nodes m >= r with
// parents[m] = r - 1, holes (token -1, with `holes`) left out; first_child[r] is the first (-1 for a leaf),
// next_sibling[i] the next with i's parent.
template <class Block>
SPECULA_HD void tree_child_lists(Block& b, const int32_t* parents, const int32_t* tokens, bool holes, int32_t n,
                                 int32_t* first_child, int32_t* next_sibling) {
  const auto listed = [&](int32_t m) { return !holes || tokens[m] >= 0; };
  b.for_each_index(n + 1, [&](int32_t r) {
    int32_t first = -1;
    for (int32_t m = r; m < n && first < 0; ++m)
      if (parents[m] == r - 1 && listed(m)) first = m;
    first_child[r] = first;
  });
  b.for_each_index(n, [&](int32_t i) {
    int32_t next = -1;
    for (int32_t m = i + 1; m < n && next < 0; ++m)
      if (parents[m] == parents[i] && listed(m)) next = m;
    next_sibling[i] = next;
  });
}

// The key of row r (0: the root, node + 1 after a node) among the rows of the tree verified: with `holes`, the tree
// of the drawn nodes alone, whose node is the number of drawn nodes before it (the CPU verifier's keys on that tree).
SPECULA_HD uint32_t tree_row_key(const int32_t* tokens, bool holes, int32_t r) {
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::tree_holes_keyed_by_shape)) holes = false;
#endif
  if (!holes || r == 0) return static_cast<uint32_t>(r);
  int32_t drawn_before = 0;
  for (int32_t m = 0; m < r - 1; ++m) drawn_before += tokens[m] >= 0;
  return static_cast<uint32_t>(drawn_before + 1);
}

// After sibling l was rejected: r_l = sum_x (p_cur - q_l)+ for the residual update, and (without replacement)
// the next sibling's normaliser, in one pass; each block's leader stores them in its scratch.
template <class Rules, class Block>
SPECULA_HD void record_rejection(Block& b, const TreeSiblings& s, RowView p_row, RowView q_row, int32_t l,
                                 double* q_total, double* r_total) {
  constexpr int VEC = Block::kVec;
  double r = 0.0, q_next = 0.0;
  b.for_each_vec([&](int32_t base) {
    float px[VEC], qx[VEC] = {};
    p_row.load<VEC>(base, px);
    if (q_row) q_row.load<VEC>(base, qx);
    SPECULA_UNROLL
    for (int j = 0; j < VEC; ++j) {
      const TreeTokenState at = tree_state_at<Rules>(s, base + j, px[j], qx[j], l, true);
      r += Rules::residual(at.p_cur, at.q_next);
      q_next += at.drawn_through_next ? 0.0 : static_cast<double>(qx[j]);
    }
  });
  r = b.sum_f64(r);
  if (s.without_replacement) q_next = b.sum_f64(q_next);
  if (b.block_leader()) {
    r_total[l] = r;
    q_total[l + 1] = s.without_replacement ? q_next : q_total[0];
  }
  b.sync();
}

// The children of the current row: their tokens into sibling_token (returns how many) and, unless they are
// point masses, the proposals' normaliser sum_x q(x) in index order (sibling_proposal) into q_total[0].
template <class Block>
SPECULA_HD int32_t load_siblings(Block& b, int32_t first, const int32_t* next_sibling, const int32_t* tokens,
                                 RowView q_row, bool point_mass, int32_t* sibling_token, double* q_total) {
  constexpr int VEC = Block::kVec;
  b.sync();  // every thread is done with the previous row's scratch
  int32_t m = 0;
  for (int32_t node = first; node >= 0; node = next_sibling[node], ++m)
    if (b.block_leader()) sibling_token[m] = tokens[node];
  if (!point_mass) {
    double total = 0.0;
    b.for_each_vec([&](int32_t base) {
      float qx[VEC];
      q_row.load<VEC>(base, qx);
      for (int j = 0; j < VEC; ++j) total += static_cast<double>(qx[j]);
    });
    total = b.sum_f64(total);
    if (b.block_leader()) q_total[0] = total;
  }
  b.sync();
  return m;
}

// Every one of the m children rejected: the correction token from the final residual, else (an empty residual)
// from p, with the step's residual uniform v.
template <class Rules, class Block>
SPECULA_HD int32_t correction_token(Block& b, const TreeSiblings& s, RowView p_row, RowView q_row, int32_t m,
                                    int32_t vocab, double v) {
  constexpr int VEC = Block::kVec;
  const auto residual = [&](int32_t base, double(&w)[VEC]) {
    float px[VEC], qx[VEC] = {};
    p_row.load<VEC>(base, px);
    if (q_row) q_row.load<VEC>(base, qx);
    SPECULA_UNROLL
    for (int j = 0; j < VEC; ++j) w[j] = tree_state_at<Rules>(s, base + j, px[j], qx[j], m, false).p_cur;
  };
  const int32_t y = sample_weights(b, vocab, residual, v);
  return y >= 0 ? y : sample_weights(b, vocab, ViewWeights<VEC>{p_row}, v);
}

template <class Rules, class Block>
SPECULA_HD void tree_row(Block& b, const TreeVerifyParams& p, int32_t row) {
  constexpr int VEC = Block::kVec;
  const VerifyRowParams rp = p.rows[row];
  const int32_t N = p.max_nodes, width = p.max_nodes + 1;
  const size_t V = static_cast<size_t>(p.vocab);
  int32_t* path_out = p.path + static_cast<size_t>(row) * N;
  const bool holes = (rp.flags & kVerifyRowHoles) != 0;
  if (rp.num_draft < 0 || rp.num_draft > N || rp.scheme < 0 || rp.scheme > 2 ||
      (holes && rp.scheme != static_cast<int32_t>(TreeSiblingScheme::without_replacement))) {
    b.for_each_index(N, [&](int32_t j) { path_out[j] = -1; });
    return fail_row(b, p.out, row, width, VerifyRowStatus::bad_row_params);
  }
  const int32_t n = rp.num_draft;
  const RowBase base_row = row_base(p.layout, row, N + 1, N + 1, n + 1);
  if (!base_row.ok) {
    b.for_each_index(N, [&](int32_t j) { path_out[j] = -1; });
    return fail_row(b, p.out, row, width, VerifyRowStatus::bad_row_params);
  }
  const int32_t* tokens = p.tokens + static_cast<size_t>(row) * N;
  const int32_t* parents = p.parents + static_cast<size_t>(row) * N;
  const float* p_rows = p.p + base_row.p * V;
  const bool has_q = p.q && (rp.flags & kVerifyRowHasQ);
  // Row r's draft law, or null where its children are point masses (no q recorded for that row).
  const auto q_of = [&](int32_t r) -> const float* {
    return has_q && q_recorded(p.layout, base_row.q + r) ? p.q + (base_row.q + r) * V : nullptr;
  };

  // Shared scratch.
  int32_t* first_child = b.i32();               // [n + 1] first child node of each row, -1 for a leaf
  int32_t* next_sibling = first_child + N + 1;  // [n] next node with the same parent, -1 after the last
  int32_t* sibling_token = next_sibling + N;    // [m] tokens of the current row's children
  int32_t* path = sibling_token + N;            // [accepted] accepted nodes
  double* q_total = b.f64();                    // [m + 1]
  double* r_total = q_total + N + 1;            // [m]

  if (const VerifyRowStatus bad = check_tree_nodes(b, tokens, parents, n, p.vocab, holes); bad != VerifyRowStatus::ok) {
    b.for_each_index(N, [&](int32_t j) { path_out[j] = -1; });
    return fail_row(b, p.out, row, width, bad);
  }
  tree_child_lists(b, parents, tokens, holes, n, first_child, next_sibling);
  b.sync();

  int32_t cur = 0, accepted = 0, q_zero = 0, y = -1;
  bool bonus = false;
  // The expected acceptance (VerifyOutputs::overlap_sum) over the rows visited that have children, taken on
  // arrival, while the rows are staged: row 0, then the row after each accepted node.
  const bool overlap = p.out.overlap_sum != nullptr;
  double overlap_sum = 0.0;
  int32_t overlap_count = 0;
  StagedRows staged;
  for (;;) {
    const float* p_row = p_rows + cur * V;
    const float* q_row = q_of(cur);
    const bool point_mass = !q_row || rp.scheme == static_cast<int32_t>(TreeSiblingScheme::deterministic);
    const bool without_replacement =
        !point_mass && rp.scheme == static_cast<int32_t>(TreeSiblingScheme::without_replacement);
    const TreeSiblings s{sibling_token, q_total, r_total, point_mass, without_replacement};
    const int32_t first = first_child[cur];
    if (first < 0) {  // a leaf (or an empty tree): the bonus token from this row's p
      stage_rows(b, staged, p_row, nullptr);
      y = sample_weights(b, p.vocab, ViewWeights<VEC>{view_row(b, staged, p_row)},
                         step_uniform(rp, RandomRole::bonus, tree_row_key(tokens, holes, cur)));
      bonus = cur > 0;
      break;
    }
    // On arrival: q for the proposals' normaliser, p and q for the overlap (which reads p at one token where the
    // row has no q); p joins them at the first rejection.
    stage_rows(b, staged, overlap && q_row ? p_row : nullptr, overlap || !point_mass ? q_row : nullptr);
    if (overlap) {
      overlap_sum += row_overlap(b, view_row(b, staged, p_row), view_row(b, staged, q_row), tokens[first]);
      ++overlap_count;
    }
    const int32_t m =
        load_siblings(b, first, next_sibling, tokens, view_row(b, staged, q_row), point_mass, sibling_token, q_total);

    bool descended = false;
    int32_t node = first;
    for (int32_t l = 0; l < m; ++l, node = next_sibling[node]) {
      const int32_t c = sibling_token[l];
      const TreeTokenState at_c = tree_state_at<Rules>(s, c, p_row[c], q_row ? q_row[c] : 0.0f, l, true);
      if (at_c.q_next <= 0.0) ++q_zero;
      if (accept_draft_token(step_uniform(rp, RandomRole::accept, tree_row_key(tokens, holes, node + 1)), at_c.p_cur,
                             at_c.q_next)) {
        if (b.block_leader()) path[accepted] = node;
        ++accepted;
        cur = node + 1;
        descended = true;
        break;
      }
      stage_rows(b, staged, p_row, q_row);
      record_rejection<Rules>(b, s, view_row(b, staged, p_row), view_row(b, staged, q_row), l, q_total, r_total);
    }
    if (descended) continue;
    // Every child rejected: the correction token from the final residual, else (empty) from p.
    const double v = step_uniform(rp, RandomRole::residual, tree_row_key(tokens, holes, cur));
    y = correction_token<Rules>(b, s, view_row(b, staged, p_row), view_row(b, staged, q_row), m, p.vocab, v);
    break;
  }
  b.sync();  // path[] written by the block's leader is visible to every thread
  const VerifyRowStatus status = y >= 0 ? VerifyRowStatus::ok : VerifyRowStatus::empty_distribution;
  const int32_t kept = status == VerifyRowStatus::ok ? accepted : 0;
  b.for_each_index(N, [&](int32_t j) { path_out[j] = j < kept ? path[j] : -1; });
  if (status != VerifyRowStatus::ok) return fail_row(b, p.out, row, width, status);
  write_overlap(b, p.out, row, overlap_sum, overlap_count);
  write_row(b, p.out, row, width, status, accepted, y, bonus, q_zero, [&](int32_t j) { return tokens[path[j]]; });
}

}  // namespace verify_row
}  // namespace specula
