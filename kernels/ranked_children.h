// The children of a ranked draft tree (SiblingScheme::deterministic: top-k by the draft's processed law, as
// EAGLE-2's and Medusa's static trees take them) chosen on the device: for each processed row, its `count` most
// probable tokens, best first, the lowest id on ties — the order of draw_children (draft/candidate_sampling.cpp).
// A draft model whose logits and laws stay on the GPU then sends back token ids only. One block per row; the row
// code (kernels/ranked_children_row.h) is shared with the CPU emulation behind --device cuda-host.
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

// Enqueues one block per row on `stream`; throws Error ("no CUDA device: ..." without one, or in a build without
// CUDA). Asynchronous.
void launch_ranked_children(const RankedChildrenParams& p, CUstream_st* stream = nullptr);

}  // namespace specula
