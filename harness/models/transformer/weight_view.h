// The kernel's view (WeightView, skinny_linear.h) of a LibTorch matrix: internal to this folder, defined in
// transformer_matrices.cpp (apply_linear, packing) and read by the decoding step's path in transformer_model.cpp.
#pragma once

#include <torch/torch.h>

#include "harness/models/transformer/skinny_linear.h"

namespace specula {

// The kernel's view of a matrix stored as fp32, fp16 or bf16 (contiguous, CPU), row-major [out, in] or packed
// [out / 16, in, 16]; data null for anything else.
WeightView weight_view(const torch::Tensor& w);

}  // namespace specula
