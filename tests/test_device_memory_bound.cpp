// The bound a device run checks against free memory before its first step (BatchVerifier::check_fits, from
// device_step_bytes) covers every byte its step buffers are asked for over the run: autoregressive draws, chains,
// i.i.d. and ranked trees, greedy verification, with the draft drawn on the device (its plans stage buffers of their
// own) and the settings that add buffers (penalties on the target and on the draft, masks, a bias). On cuda-host, with
// the bundled draft transformer as both models. LibTorch before Catch: glog's CHECK (through LibTorch's headers) must
// not replace Catch's.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "draft/model_drafter.h"
#include "harness/generation/generator.h"
#include "harness/models/registry/model_registry.h"
#include "verify/device/batch_verifier.h"
#include "verify/verifiers/verify_methods.h"

using namespace specula;

namespace {

const std::string kDraft = std::string("transformer:") + SPECULA_SOURCE_DIR + "/results/models/draft";

SamplingParams sampled() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 40;
  return s;
}

// Every setting that stages a buffer of its own: penalties (prompt mask and output counts, and the pending ids'
// entries), masks and a bias.
SamplingParams with_every_buffer(SamplingParams s) {
  s.repetition_penalty = 1.2f;
  s.frequency_penalty = 0.1f;
  s.banned_tokens = {3};
  s.min_tokens = 2;
  s.stop_tokens = {' '};
  s.logit_bias = {{5, 0.5f}};
  return s;
}

}  // namespace

TEST_CASE("a device run's step buffers stay within the bound checked before its first step", "[device]") {
  const auto model = load_language_model(kDraft, "draft", "auto", "cpu");
  const int32_t V = model->vocab_size();
  struct Case {
    std::optional<VerifyMethod> method;
    std::vector<int32_t> shape;
    SiblingScheme scheme;
  };
  const std::vector<Case> cases = {
      Case{std::nullopt, {}, SiblingScheme::iid}, Case{VerifyMethod::chain, {}, SiblingScheme::iid},
      Case{VerifyMethod::greedy, {}, SiblingScheme::iid}, Case{VerifyMethod::tree, {2, 2, 1}, SiblingScheme::iid},
      Case{VerifyMethod::tree, {3, 2}, SiblingScheme::deterministic}};
  const int64_t sequences = 4;
  for (const Case& c : cases)
    for (const bool target_buffers : {false, true})
      for (const bool draft_buffers : {false, true}) {
        if (!c.method && draft_buffers) continue;
        SamplingParams target = target_buffers ? with_every_buffer(sampled()) : sampled();
        if (c.method == VerifyMethod::greedy) target.temperature = 0.0f;
        const SamplingParams draft = draft_buffers ? with_every_buffer(sampled()) : sampled();
        INFO((c.method ? verify_method_name(*c.method) : "ar")
             << ", " << c.shape.size() << " depths, target buffers " << target_buffers << ", draft buffers "
             << draft_buffers);
        GenerationConfig config;
        config.method = c.method;
        config.num_draft_tokens = 4;
        config.tree_shape = c.shape;
        config.tree_sampling = c.scheme;
        config.max_new_tokens = 10;
        config.seed = 3;
        config.device = Device::cuda_host;
        const auto drafter = c.method ? std::make_shared<ModelDrafterFactory>(model, draft) : nullptr;
        GenerationMetrics metrics;
        Generator(model, target, drafter, config).generate_many({10, 20, 30}, 0, sequences, metrics);
        REQUIRE(metrics.steps > 0);
        const int64_t bound =
            device_step_bytes(V, target, c.method, sequences, draft_nodes(config) + 1, c.method ? &draft : nullptr);
        CHECK(metrics.device_buffer_bytes > 0);
        CHECK(metrics.device_buffer_bytes <= bound);
        // Not a bound by excess: within a few times what the run asked for.
        CHECK(bound <= 4 * metrics.device_buffer_bytes);
        CHECK(metrics.staging_waits == 0);
      }
}
