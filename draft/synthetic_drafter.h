// The synthetic drafter (`synthetic:alpha=A`): a real drafter with a dialled-in acceptance rate, for
// measuring system overheads without a draft model (vLLM's synthetic acceptance mode), but exact. At every
// draft position it computes the target's own processed distribution p (the target model and the
// target's sampler pipeline, with the row's path history) and draws from
//
//   q = alpha p + (1 - alpha) delta_y,   y = argmin_x p(x) (lowest id on ties),
//
// recording that q. A draw from q is accepted with probability sum_x min(p, q) = alpha + (1 - alpha) p(y)
// (verify/ALGORITHMS.md §0), about alpha since p(y) is the smallest probability, and the verifier's p/q test and
// residual keep the output law exactly p. Each depth costs one target forward (counted in n_forward).
#pragma once

#include <memory>

#include "draft/drafter.h"
#include "harness/models/language_model.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula {

// "alpha=0.7" -> 0.7; alpha must be in [0, 1]. Throws Error naming the spec otherwise.
double parse_synthetic_alpha(const std::string& text, const std::string& spec);

class SyntheticDrafterFactory : public DrafterFactory {
 public:
  SyntheticDrafterFactory(std::shared_ptr<const LanguageModel> target, SamplingParams target_params, double alpha);
  std::unique_ptr<Drafter> create() const override;
  int32_t vocab_size() const override { return target_->vocab_size(); }
  std::string description() const override;
  bool stops_on_confidence() const override { return true; }
  double alpha() const { return alpha_; }

 private:
  std::shared_ptr<const LanguageModel> target_;
  SamplerPipeline pipeline_;
  double alpha_;
};

// `synthetic:alpha=A` (draft/registry/drafter_registry.cpp).
std::shared_ptr<const DrafterFactory> make_synthetic_drafter(const DrafterSpec& spec);
void check_synthetic_spec(const DrafterSpec& spec);  // its alpha, nothing loaded

}  // namespace specula
