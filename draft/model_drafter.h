// A drafter backed by a language model (a table model or a small transformer): samples every candidate
// from the model's processed distribution q (the draft's own sampler pipeline, with each candidate's path
// history) and records exactly that q, so the verifier can test p/q. Ranked (`topk`) candidates at temperature 0
// are the best of the law at temperature 1 (its argmax first), not ids in order behind a point mass.
#pragma once

#include <memory>
#include <optional>

#include "draft/drafter.h"
#include "harness/models/language_model.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula {

class ModelDrafter;  // model_drafter.cpp

class ModelDrafterFactory : public DrafterFactory {
 public:
  ModelDrafterFactory(std::shared_ptr<const LanguageModel> model, SamplingParams draft_params);
  std::unique_ptr<Drafter> create() const override;
  int32_t vocab_size() const override { return model_->vocab_size(); }
  std::string description() const override { return model_->description(); }
  const LanguageModel* draft_model() const override { return model_.get(); }
  bool drafts_penalised() const override { return pipeline_.params().penalised(); }
  // One draft forward per depth for all the drafters, when the model batches its forwards (a transformer).
  std::vector<TokenTree> propose_batch(const std::vector<Drafter*>& drafters,
                                       const std::vector<DraftRequest>& requests) const override;
  bool batches_proposals() const override { return model_->batches_forwards(); }
  bool stops_on_confidence() const override { return true; }
  // Chains (of any lengths: a moving K's, drawn at the longest and each cut to its own; a chain that may stop on the
  // draft's doubt drawn whole and cut by its drafts' probabilities, unless the draft is greedy), and trees of one shape
  // (a ranked node, or one whose siblings are drawn without replacement, asking at most
  // BatchVerifier::most_ranked_children), are drawn on the device when the requests carry its verifier and the draft's
  // settings are within what the fused sampler applies (propose_batch): their laws left there, ranked trees verified as
  // point masses.
  bool draws_on_device(const std::vector<DraftRequest>& requests) const override;
  // The draft's settings (a ranked tree's at temperature 1 take the same buffers), unless the fused sampler cannot
  // apply them (then the draft is drawn on the host).
  std::optional<SamplingParams> device_draw_params() const override;
  // As propose_on_device decides where a depth's rows go.
  bool device_draws_read_host_rows(std::optional<void*> verifier_stream) const override {
    return !model_->writes_gpu_logits() || model_->device_stream() != verifier_stream;
  }

 private:
  std::vector<TokenTree> propose_on_device(const std::vector<ModelDrafter*>& own,
                                           const std::vector<DraftRequest>& requests) const;
  std::vector<TokenTree> propose_fed(const std::vector<ModelDrafter*>& own, const std::vector<DraftRequest>& requests,
                                     bool out_on_gpu) const;

  std::shared_ptr<const LanguageModel> model_;
  SamplerPipeline pipeline_;
  SamplerPipeline ranking_pipeline_;  // the draft's settings at temperature 1 when they are greedy
};

}  // namespace specula
