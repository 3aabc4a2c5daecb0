// The bound a device run checks against free memory before its first step (Generator::device_step_bytes, given to
// BatchVerifier::check_fits) covers every byte its step buffers are asked for over the run: autoregressive draws,
// chains, block verification, i.i.d., ranked and without-replacement trees, greedy verification, with the draft drawn
// on the device (its plans stage buffers of their own) or on the host (its q rows uploaded), and the settings that add
// buffers (penalties on the target and on the draft, masks, a bias). On cuda-host, with the bundled draft transformer
// as both models. LibTorch before Catch: glog's CHECK (through LibTorch's headers) must not replace Catch's.
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
using Catch::Matchers::Contains;

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
SamplingParams with_every_buffer(SamplingParams s, int32_t vocab) {
  s.repetition_penalty = 1.2f;
  s.frequency_penalty = 0.1f;
  s.banned_tokens = {3};
  for (Token t = 0; t < vocab; ++t)
    if (t != 4) s.allowed_tokens.push_back(t);
  s.min_tokens = 2;
  s.stop_tokens = {' '};
  s.logit_bias = {{5, 0.5f}};
  return s;
}

}  // namespace

TEST_CASE("a device run's step buffers stay within the bound checked before its first step", "[device]") {
  const auto model = load_language_model(kDraft, "draft", "auto", "cpu");
  struct Case {
    std::optional<VerifyMethod> method;
    std::vector<int32_t> shape;
    SiblingScheme scheme;
    int32_t draft_tokens = 4;
    DraftSchedule schedule = DraftSchedule::constant;
  };
  const std::vector<Case> cases = {
      Case{std::nullopt, {}, SiblingScheme::iid}, Case{VerifyMethod::chain, {}, SiblingScheme::iid},
      Case{VerifyMethod::block, {}, SiblingScheme::iid}, Case{VerifyMethod::greedy, {}, SiblingScheme::iid},
      Case{VerifyMethod::tree, {2, 2, 1}, SiblingScheme::iid},
      Case{VerifyMethod::tree, {3, 2}, SiblingScheme::deterministic},
      Case{VerifyMethod::tree, {2, 2}, SiblingScheme::without_replacement},
      // Paths longer than the per-row floor's 8 pending ids (a penalised target and
      // draft count a chain's pending ids on the device).
      Case{VerifyMethod::chain, {}, SiblingScheme::iid, 20},
      // A K that moves apart between the sequences: the steps whose Ks differ draft on the host, q rows uploaded.
      Case{VerifyMethod::chain, {}, SiblingScheme::iid, 6, DraftSchedule::heuristic}};
  const int64_t sequences = 4;
  // The draft's settings: plain, with every buffer, or drawn on the host (dynatemp: its q rows are uploaded).
  enum class Draft { plain, every_buffer, on_host };
  for (const Case& c : cases)
    for (const bool target_buffers : {false, true})
      for (const Draft draft_kind : {Draft::plain, Draft::every_buffer, Draft::on_host}) {
        if (!c.method && draft_kind != Draft::plain) continue;
        SamplingParams target = target_buffers ? with_every_buffer(sampled(), model->vocab_size()) : sampled();
        if (c.method == VerifyMethod::greedy) target.temperature = 0.0f;
        SamplingParams draft =
            draft_kind == Draft::every_buffer ? with_every_buffer(sampled(), model->vocab_size()) : sampled();
        if (draft_kind == Draft::on_host) draft.dynatemp_range = 0.3f;
        INFO((c.method ? verify_method_name(*c.method) : "ar")
             << " of " << c.draft_tokens << " drafts, " << c.shape.size() << " depths, target buffers "
             << target_buffers << ", draft " << static_cast<int>(draft_kind));
        GenerationConfig config;
        config.method = c.method;
        config.num_draft_tokens = c.draft_tokens;
        config.num_draft_tokens_schedule = c.schedule;
        config.tree_shape = c.shape;
        config.tree_sampling = c.scheme;
        config.max_new_tokens = c.schedule == DraftSchedule::constant ? 2 * c.draft_tokens + 2 : 40;
        config.seed = 3;
        config.device = Device::cuda_host;
        const auto drafter = c.method ? std::make_shared<ModelDrafterFactory>(model, draft) : nullptr;
        const Generator generator(model, target, drafter, config);
        GenerationMetrics metrics;
        generator.generate_many({10, 20, 30}, 0, sequences, metrics);
        REQUIRE(metrics.steps > 0);
        const int64_t bound = generator.device_step_bytes(sequences);
        CHECK(metrics.device_buffer_bytes > 0);
        CHECK(metrics.device_buffer_bytes <= bound);
        // Not a bound by excess: within a few times what the run asked for.
        CHECK(bound <= 4 * metrics.device_buffer_bytes);
        CHECK(metrics.staging_waits == 0);
        // Reserved before the first step (BatchVerifier::reserve): no buffer grows, so no step drains the stream.
        CHECK(metrics.growth_waits == 0);
      }
}

// The check before the first step refuses, naming the numbers, a batch whose buffers would not fit, counting the room
// the buffers may grow into.
TEST_CASE("a batch whose step buffers would not fit is refused before any work", "[device]") {
  SamplingParams params = sampled();
  const SamplerPipeline pipeline(params, 1000);
  BatchVerifier device(Device::cuda_host, pipeline, VerifyMethod::chain);
  CHECK(held_device_bytes(1000, 1) >= 1500);
  // More than any host's memory: 2^40 sequences of 5 rows.
  const int64_t sequences = int64_t{1} << 40;
  const int64_t step = device_step_bytes(1000, params, VerifyMethod::chain, sequences, 5);
  CHECK_THROWS_WITH(device.check_fits(sequences, 5, step), Contains("generate fewer sequences at once"));
  CHECK_NOTHROW(device.check_fits(1, 5, device_step_bytes(1000, params, VerifyMethod::chain, 1, 5)));
}
