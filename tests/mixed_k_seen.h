// A draft model's factory that counts the lockstep steps, how many of them it drew on the device, the steps whose
// sequences asked for different chain lengths (a moving K, harness/generation/draft_schedule.h) and how many of those
// it drew there, and the widest spread of Ks in one step: tests that a moving K, or a chain that may stop on the
// draft's doubt, is drawn on the device read them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "draft/model_drafter.h"

namespace specula {

// What MixedKSeen counted: the steps, those drawn on the device, the steps whose sequences asked for different Ks and
// those of them drawn there, and the widest spread of Ks in one step.
struct DraftStepCounts {
  int64_t steps = 0, steps_on_device = 0, mixed = 0, mixed_on_device = 0;
  int32_t widest_spread = 0;
};

class MixedKSeen : public ModelDrafterFactory {
 public:
  using ModelDrafterFactory::ModelDrafterFactory;
  std::vector<TokenTree> propose_batch(const std::vector<Drafter*>& drafters,
                                       const std::vector<DraftRequest>& requests) const override {
    const auto [shortest, longest] = std::minmax_element(
        requests.begin(), requests.end(),
        [](const DraftRequest& a, const DraftRequest& b) { return a.num_draft_tokens < b.num_draft_tokens; });
    const bool on_device = draws_on_device(requests);
    ++counts.steps;
    counts.steps_on_device += on_device;
    if (shortest->num_draft_tokens != longest->num_draft_tokens) {
      ++counts.mixed;
      counts.mixed_on_device += on_device;
      counts.widest_spread = std::max(counts.widest_spread, longest->num_draft_tokens - shortest->num_draft_tokens);
    }
    return ModelDrafterFactory::propose_batch(drafters, requests);
  }
  mutable DraftStepCounts counts;
};

}  // namespace specula
