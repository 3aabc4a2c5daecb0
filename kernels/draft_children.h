// The children of a draft tree's nodes chosen on the device from their processed laws, as draw_children
// (draft/candidate_sampling.cpp) chooses them on the CPU, so that a draft model whose logits and laws stay on the GPU
// sends back token ids only (i.i.d. siblings are the fused sampler's own draws):
//   - ranked (SiblingScheme::deterministic: top-k by the draft's law, as EAGLE-2's and Medusa's static trees take
//     them): each row's `count` most probable tokens, best first, the lowest id on ties; one block per row;
//   - without replacement (SiblingScheme::without_replacement, RSD / Sequoia): each row's children drawn one after
//     another, each by the inverse-CDF rule from the law less the siblings drawn before it, until `count` or until the
//     row has no mass left. A draw whose row has no mass still takes its uniform (a slot), so a row's draws shift the
//     next row's slots. How many draws a row takes follows from its count of positive weights, so one launch counts
//     them, a block a row, and the next draws every row at once, a block a row, from where its sequence's earlier
//     rows left its uniforms.
// The row code (kernels/draft_children_row.h) is shared with the CPU emulation behind --device cuda-host.
//
// Plain C++: no CUDA headers.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace specula {

// A tree the verification kernels take has at most kMaxVerifyTreeNodes (256) nodes, so no node has more children.
constexpr int32_t kMaxRankedChildren = 256;

struct RankedChildrenParams {
  const float* probs = nullptr;  // [B, V] processed rows (non-negative, as SamplerPipeline::process leaves them)
  int32_t* tokens = nullptr;     // [B, count] out: row b's children, best first
  int32_t batch = 0;             // B >= 1
  int32_t vocab = 0;             // V in [1, 2^30]
  int32_t count = 0;             // children per row, in [1, min(V, kMaxRankedChildren)]

  // Throws Error naming the first invalid field.
  void check() const;
};

// The vector width of the launch (and of its emulation): 4 when V % 4 == 0 and probs is 16-byte aligned, else 1.
int ranked_children_vec(const RankedChildrenParams& p);

struct SiblingDrawParams {
  const float* probs = nullptr;      // [*, V] processed laws (non-negative)
  const int32_t* rows = nullptr;     // [R] the row of probs each drawing row draws from, a sequence's rows together
  const int32_t* first = nullptr;    // [S + 1] sequence s draws for rows first[s] .. first[s + 1] - 1, in order
  const double* uniforms = nullptr;  // [R * count] sequence s's a-th draw takes uniforms[first[s] * count + a]
  int32_t* tokens = nullptr;         // [R * count] out: row r's children in order, then -1 once its mass ran out
  int32_t* spent = nullptr;          // [R] scratch: the draws row r takes (its uniforms), between the two launches
  int32_t sequences = 0;             // S >= 1
  int32_t rows_total = 0;            // R = first[S] >= 1
  int32_t vocab = 0;                 // V in [1, 2^30]
  int32_t count = 0;                 // children per row, in [1, min(V, kMaxRankedChildren)]
  // A depth of a tree drawn at a fixed shape, one launch a depth, each sequence's uniforms taken in turn across the
  // depths (all optional; 0 and null: the layout above, every row drawing):
  //   - uniforms_per_sequence U > 0: sequence s's a-th draw of the launch takes uniforms[s * U + spent_before[s] + a]
  //     (every sequence has rows, s from 0), and its last row writes spent_after[s] = spent_before[s] + the draws of
  //     its rows (the next depth's spent_before);
  //   - row_tokens [R]: each row's own node's token (the depth before's children); a row whose token is -1 (its
  //     node was never drawn) draws nothing, its children all -1.
  int32_t uniforms_per_sequence = 0;
  const int32_t* spent_before = nullptr;  // [S]
  int32_t* spent_after = nullptr;         // [S]
  const int32_t* row_tokens = nullptr;    // [R] or null

  // Throws Error naming the first invalid field (the arrays' contents are the caller's).
  void check() const;
};
int sibling_draw_vec(const SiblingDrawParams& p);

// Enqueues one block per row on `stream`; throws Error ("no CUDA device: ..." without one, or in a build without
// CUDA). Asynchronous.
void launch_ranked_children(const RankedChildrenParams& p, CUstream_st* stream = nullptr);
// Two launches of one block per row (the draws each row takes, then the draws); the same.
void launch_sibling_draws(const SiblingDrawParams& p, CUstream_st* stream = nullptr);

}  // namespace specula
