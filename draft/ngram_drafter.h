// A drafter backed by an n-gram language model (draft/ngram_model.h, `specula train-ngram`): every
// candidate is drawn from q = the draft sampler pipeline applied to log q_KN(. | context + path), and that
// processed q is recorded, so the verifier can test p/q (verify/ALGORITHMS.md §1). With the default pipeline
// (temperature 1, no filters) q is the Kneser-Ney distribution itself. Tree schemes as for model drafters.
#pragma once

#include <memory>

#include "draft/drafter.h"
#include "draft/ngram_model.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula {

class NgramDrafterFactory : public DrafterFactory {
 public:
  NgramDrafterFactory(std::shared_ptr<const NgramModel> model, SamplingParams draft_params, std::string description);
  std::unique_ptr<Drafter> create() const override;
  int32_t vocab_size() const override { return model_->vocab_size(); }
  std::string description() const override { return description_; }
  bool drafts_penalised() const override { return pipeline_.params().penalised(); }
  bool stops_on_confidence() const override { return true; }

 private:
  std::shared_ptr<const NgramModel> model_;
  SamplerPipeline pipeline_;
  SamplerPipeline ranking_pipeline_;  // the draft's settings at temperature 1 when they are greedy
  std::string description_;
};

// `ngram:PATH` (draft/registry/drafter_registry.cpp).
std::shared_ptr<const DrafterFactory> make_ngram_drafter(const DrafterSpec& spec);

}  // namespace specula
