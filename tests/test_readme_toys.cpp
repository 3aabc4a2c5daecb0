// The README's "Where new things go" examples, compiled from the README itself (tests/CMakeLists.txt) and run
// here: the toy drafter in the generation loop, the toy verification method through the methods' table. Each
// must decode exactly the target's law (a G-test against the enumerated law of a table model), so the recipes
// the README gives are true, not merely compilable.
#include <catch2/catch.hpp>
#include <memory>

#include "draft/drafter.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/generator.h"
#include "speculative_fixtures.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/verifiers/verify_methods.h"

namespace specula {
// From the README's blocks (readme_toy_*.cpp, generated at configure time).
std::shared_ptr<const DrafterFactory> readme_toy_drafter(const DrafterSpec& spec);
VerifyMethod readme_toy_method();
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
