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

class MixedKSeen : public ModelDrafterFactory {
 public:
  using ModelDrafterFactory::ModelDrafterFactory;
  std::vector<TokenTree> propose_batch(const std::vector<Drafter*>& drafters,
                                       const std::vector<DraftRequest>& requests) const override {
    const auto [shortest, longest] = std::minmax_element(
        requests.begin(), requests.end(),
        [](const DraftRequest& a, const DraftRequest& b) { return a.num_draft_tokens < b.num_draft_tokens; });
    ++steps;
    steps_on_device += draws_on_device(requests);
    if (shortest->num_draft_tokens != longest->num_draft_tokens) {
      ++mixed;
      on_device += draws_on_device(requests);
      widest_spread = std::max(widest_spread, longest->num_draft_tokens - shortest->num_draft_tokens);
    }
    return ModelDrafterFactory::propose_batch(drafters, requests);
  }
  mutable int64_t steps = 0, steps_on_device = 0, mixed = 0, on_device = 0;
  mutable int32_t widest_spread = 0;
};

}  // namespace specula
