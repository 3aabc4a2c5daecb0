#include "harness/train/adamw.h"

#include <vector>

namespace specula {

std::unique_ptr<torch::optim::AdamW> make_adamw(torch::nn::Module& module, const OptimizerOptions& o) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : module.named_parameters()) (p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  auto adamw = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr.peak).betas({o.beta1, o.beta2}).eps(1e-8).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, adamw(o.weight_decay));
  groups.emplace_back(no_decay, adamw(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(o.lr.peak));
}

}  // namespace specula
