// A random transformer whose comparisons mean something, for the LibTorch tests: unit-scale weights
// (N(0, 1/fan_in) matrices, N(0, 1) embeddings, norm gains ~1) so the attention is far from uniform and the
// logits are O(1-10); a random-init model (std 0.02) would have near-constant logits and make any
// comparison vacuous.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>

#include "harness/models/transformer/transformer_model.h"

namespace specula {

inline Transformer scaled_model(const TransformerConfig& c, uint64_t seed) {
  torch::manual_seed(seed);
  Transformer m(c);
  torch::NoGradGuard no_grad;
  for (auto& p : m->named_parameters()) {
    torch::Tensor t = p.value();
    if (t.dim() == 1)
      t.uniform_(0.8, 1.2);
    else if (p.key() == "embedding.weight")
      t.normal_(0.0, 1.0);
    else
      t.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(t.size(1))));
  }
  m->eval();
  return m;
}

}  // namespace specula
