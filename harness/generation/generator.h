// The generation loop: plain autoregressive sampling from the target (`ar`, the baseline) or speculative
// decoding (draft -> one target call over the draft tree -> per-row processed p -> verifier), one
// sequence at a time per session. Sequences are independent: sequence n draws only from Philox streams
// keyed by n, so outputs do not depend on threads or batch composition.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "draft/drafter.h"
#include "harness/generation/generation_metrics.h"
#include "harness/models/language_model.h"
#include "verify/sampler_pipeline.h"
#include "verify/verifiers/verification.h"

namespace specula {

struct GenerationConfig {
  std::optional<VerifyMethod> method;  // nullopt = autoregressive baseline (`ar`)
  int32_t num_draft_tokens = 4;        // chain length K
  std::vector<int32_t> tree_shape;     // for method tree; empty = chain of K with i.i.d. draws
  SiblingScheme tree_sampling = SiblingScheme::iid;
  int32_t max_new_tokens = 16;
  uint64_t seed = 0;
};

struct SequenceOutput {
  std::vector<Token> tokens;          // exactly max_new_tokens generated tokens
  std::vector<int32_t> accept_lengths;  // accepted drafts per step (Spec-Bench's accept_lengths)
  double wall_seconds = 0.0;
};

class Generator {
 public:
  // `drafter` may be null for `ar`. Throws Error when draft and target vocabularies differ.
  Generator(std::shared_ptr<const LanguageModel> target, SamplingParams target_params,
            std::shared_ptr<const DrafterFactory> drafter, GenerationConfig config);

  // Generates sequence number `sequence` from `prompt`, adding its counters to `metrics`.
  SequenceOutput generate(const std::vector<Token>& prompt, uint64_t sequence, GenerationMetrics& metrics) const;

  // Generates sequences first..first+count-1 in parallel over threads.
  std::vector<SequenceOutput> generate_many(const std::vector<Token>& prompt, uint64_t first, int64_t count,
                                            GenerationMetrics& metrics) const;

  const GenerationConfig& config() const { return config_; }
  const SamplerPipeline& target_pipeline() const { return pipeline_; }

 private:
  SequenceOutput generate_autoregressive(ModelSession& target, const std::vector<Token>& prompt, uint64_t sequence,
                                         GenerationMetrics& metrics) const;
  SequenceOutput generate_speculative(ModelSession& target, Drafter& drafter, const std::vector<Token>& prompt,
                                      uint64_t sequence, GenerationMetrics& metrics) const;

  std::shared_ptr<const LanguageModel> target_;
  SamplerPipeline pipeline_;
  std::shared_ptr<const DrafterFactory> drafter_;
  GenerationConfig config_;
};

}  // namespace specula
