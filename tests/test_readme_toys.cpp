// The README's "Where new things go" examples, compiled from the README itself (tests/CMakeLists.txt) and run
// here: the toy drafter in the generation loop and the toy verification method through the methods' table, each
// decoding exactly the target's law (a G-test against the enumerated law of a table model); the toy filter stage
// through the stages' table, the options, sampler_order and the device refusal, its rows against a float64
// reference. So the recipes the README gives are true, not merely compilable.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>

#include "draft/drafter.h"
#include "harness/config/command_options.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/generator.h"
#include "speculative_fixtures.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/filter_stages.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/verify_methods.h"

namespace specula {
// From the README's blocks (readme_toy_*.cpp, generated at configure time).
std::shared_ptr<const DrafterFactory> readme_toy_drafter(const DrafterSpec& spec);
void readme_toy_drafter_check(const DrafterSpec& spec);
VerifyMethod readme_toy_method();
FilterStage readme_toy_stage();
}  // namespace specula

using namespace specula;
using namespace specula::testing;

namespace {

constexpr int32_t kV = 8, kL = 3;
const std::vector<Token> kPrompt = {2, 5};

// Tokens of `generator` against the exact law of its target (plain sampling through the same pipeline).
stats::GofResult law_test(const Generator& generator, const TablePair& pair, RunResult& run) {
  run = run_generator(generator, kPrompt, 40000, kV);
  return stats::g_test(run.counts, exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, kL));
}

}  // namespace

TEST_CASE("README's toy drafter drafts in the real loop, and chain verification keeps the target's law", "[readme]") {
  const TablePair pair = random_pair(1, kV, 41, 1.5, 0.5);
  DrafterSpec spec;
  spec.spec = spec.kind = "repeat-last";
  spec.target = pair.target;
  readme_toy_drafter_check(spec);  // the spec alone, as before a model loads
  DrafterSpec with_options = spec;
  with_options.spec = "repeat-last:x";
  with_options.rest = "x";
  CHECK_THROWS_WITH(readme_toy_drafter_check(with_options), Catch::Matchers::Contains("takes no options"));
  const std::shared_ptr<const DrafterFactory> drafter = readme_toy_drafter(spec);
  GenerationConfig config = generation_config(parse_decoding_method("chain"), DraftShape{}, kL, 77);
  config.num_draft_tokens = 2;
  RunResult run;
  const stats::GofResult gof = law_test(Generator(pair.target, SamplingParams{}, drafter, config), pair, run);
  INFO(gof.detail);
  CHECK(gof.passed(stats::kAlpha));
  CHECK(run.metrics.accepted > 0);  // repeating the last token is sometimes right
  CHECK(run.metrics.draft_calls + run.metrics.proposed > 0);
}

TEST_CASE("README's toy verification method is found by name and decodes the target's law", "[readme]") {
  const VerifyMethod method = readme_toy_method();
  CHECK(parse_verify_method(verify_method_name(method)) == method);
  CHECK(parse_decoding_method(verify_method_name(method)).verify == method);
  CHECK_THAT(decoding_method_names(", "), Catch::Matchers::Contains(verify_method_name(method)));
  CHECK_FALSE(has_device_kernel(method));
  const TablePair pair = random_pair(1, kV, 43, 1.5, 0.5);
  DrafterSpec spec;
  spec.spec = spec.kind = "repeat-last";
  spec.target = pair.target;
  GenerationConfig config = generation_config(parse_decoding_method(verify_method_name(method)), DraftShape{}, kL, 78);
  config.num_draft_tokens = 2;
  RunResult run;
  const stats::GofResult gof =
      law_test(Generator(pair.target, SamplingParams{}, readme_toy_drafter(spec), config), pair, run);
  INFO(gof.detail);
  CHECK(gof.passed(stats::kAlpha));
  CHECK(run.metrics.accepted == 0);  // it rejects every draft: one token a step
  CHECK(run.metrics.steps == run.metrics.new_tokens);
}

TEST_CASE("README's toy filter stage is an option, a sampler_order name, refused on a device, and exact", "[readme]") {
  const FilterStage stage = readme_toy_stage();
  REQUIRE(std::string(filter_stage_name(stage)) == "top_a");
  // The command line (and so [sampling] keys and --draft-*) takes its parameter from the row.
  po::options_description desc;
  add_sampler_options(desc);
  po::variables_map vm;
  po::store(po::command_line_parser(std::vector<std::string>{"--top-a", "0.3", "--sampler-order", "top_a,top_k"})
                .options(desc)
                .run(),
            vm);
  SamplingParams s;
  read_sampler_options(vm, s);
  CHECK(s.stage_value("top_a", 0.0) == Approx(0.3));
  CHECK(s.order == std::vector<FilterStage>{stage, FilterStage::top_k});
  CHECK_THAT(s.describe(), Catch::Matchers::Contains("temperature -> top_a -> top_k"));
  // Validated by its row; refused on the device by name; off in the greedy argmax's row.
  SamplingParams bad = s;
  bad.stage_values["top_a"] = 1.5;
  CHECK_THROWS_WITH(bad.validate(8), Catch::Matchers::Contains("top_a must be in [0, 1], got 1.5"));
  const std::optional<UnsupportedSetting> refused = unsupported_on_cuda(s);
  REQUIRE(refused);
  CHECK(refused->parameter == "top_a");
  SamplingParams greedy = s;
  greedy.temperature = 0.0f;
  CHECK(at_unit_temperature(greedy).stage_value("top_a", 0.0) == 0.0);
  // Rows against a float64 reference: softmax, keep p >= a * max p^2, renormalise.
  s.order = {stage};
  const SamplerPipeline pipeline(s, kV);
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    std::vector<float> logits(kV);
    for (int32_t i = 0; i < kV; ++i) logits[i] = static_cast<float>(2.0 * philox_gaussian(seed, i));
    const std::vector<float> probs = pipeline.process(logits, {});
    std::vector<double> p(kV);
    const double m = *std::max_element(logits.begin(), logits.end());
    double z = 0.0, kept = 0.0;
    for (int32_t i = 0; i < kV; ++i) z += p[i] = std::exp(logits[i] - m);
    for (double& v : p) v /= z;
    const double p_max = *std::max_element(p.begin(), p.end());
    for (int32_t i = 0; i < kV; ++i) kept += p[i] >= 0.3 * p_max * p_max ? p[i] : 0.0;
    for (int32_t i = 0; i < kV; ++i) {
      const double want = p[i] >= 0.3 * p_max * p_max ? p[i] / kept : 0.0;
      CHECK(probs[i] == Approx(want).margin(1e-6));
    }
  }
}
