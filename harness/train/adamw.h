// The optimiser `specula train` and `train-medusa` / `train-eagle` share: AdamW with decoupled weight decay on
// the matrices only (not on norm gains or biases), from OptimizerOptions. LibTorch.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "harness/train/optimizer_options.h"

namespace specula {

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& module, const OptimizerOptions& o);

}  // namespace specula
