// The driver on a GPU (ctest label `gpu`, part of specula_gpu_tests): the Generator with --device cuda, every
// step of every sequence sampled and verified in one CUDA launch, against the CPU path and the exact law.
// Skipped with the rest of the GPU tests where no device exists (test_cuda_parity.cpp's main).
#include "kernels/cuda_device.h"

#if defined(SPECULA_HAS_CUDA)

#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "draft/model_drafter.h"
#include "speculative_fixtures.h"

using namespace specula;
using namespace specula::testing;

namespace {

constexpr int32_t kV = 6, kL = 3;
const std::vector<Token> kPrompt = {2, 5};

SamplingParams penalties() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 5;
  s.top_p = 0.95f;
  s.repetition_penalty = 1.3f;
  s.frequency_penalty = 0.4f;
  s.logit_bias = {{1, 0.8f}};
  s.stop_tokens = {0};
  s.min_tokens = 1;
  return s;
}

GenerationConfig config(std::optional<VerifyMethod> method, int32_t k, std::vector<int32_t> tree = {},
                        SiblingScheme scheme = SiblingScheme::iid) {
  GenerationConfig c;
  c.method = method;
  c.num_draft_tokens = k;
  c.tree_shape = std::move(tree);
  c.tree_sampling = scheme;
  c.max_new_tokens = 8;
  c.seed = 777;
  return c;
}

}  // namespace

TEST_CASE("generate on cuda gives the CPU path's sequences for every method", "[gpu][generate]") {
  const TablePair pair = random_pair(2, kV, 31, 1.2, 0.8);
  for (GenerationConfig c : {config(std::nullopt, 0), config(VerifyMethod::chain, 3), config(VerifyMethod::block, 3),
                             config(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::iid),
                             config(VerifyMethod::tree, 0, {2, 1, 1}, SiblingScheme::without_replacement),
                             config(VerifyMethod::tree, 0, {16, 15}, SiblingScheme::iid),
                             config(VerifyMethod::tree, 0, {3, 1}, SiblingScheme::deterministic)}) {
    auto drafter = c.method ? std::make_shared<ModelDrafterFactory>(pair.draft, penalties()) : nullptr;
    GenerationMetrics cpu_m, gpu_m;
    const auto cpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, 500, cpu_m);
    c.device = Device::cuda;
    const auto gpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, 500, gpu_m);
    int64_t differing = 0;
    for (size_t n = 0; n < cpu.size(); ++n) differing += cpu[n].tokens != gpu[n].tokens;
    INFO((c.method ? verify_method_name(*c.method) : "ar") << " tree size " << c.tree_shape.size());
    CHECK(differing == 0);
    CHECK(gpu_m.accepted == cpu_m.accepted);
    // The device's processed rows differ from the CPU pipeline's by the softmax's expf (~4e-7 per probability).
    CHECK(gpu_m.expected_acceptance_sum == Approx(cpu_m.expected_acceptance_sum).epsilon(1e-6));
  }
}

TEST_CASE("the driver's device path on a small batch (for compute-sanitizer)", "[gpu][generate][sanitize]") {
  const TablePair pair = random_pair(1, kV, 5, 1.0, 1.0);
  for (GenerationConfig c : {config(std::nullopt, 0), config(VerifyMethod::block, 2),
                             config(VerifyMethod::tree, 0, {3, 2}, SiblingScheme::without_replacement)}) {
    c.max_new_tokens = 4;
    auto drafter = c.method ? std::make_shared<ModelDrafterFactory>(pair.draft, penalties()) : nullptr;
    GenerationMetrics cpu_m, gpu_m;
    const auto cpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, 6, cpu_m);
    c.device = Device::cuda;
    const auto gpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, 6, gpu_m);
    for (size_t n = 0; n < cpu.size(); ++n) CHECK(cpu[n].tokens == gpu[n].tokens);
  }
}

TEST_CASE("generate on cuda samples the target's law of whole continuations (G-test)", "[gpu][generate][law]") {
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  for (GenerationConfig c : {config(VerifyMethod::chain, 2), config(VerifyMethod::block, 2),
                             config(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::without_replacement)}) {
    c.max_new_tokens = kL;
    c.device = Device::cuda;
    auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, penalties());
    const Generator generator(pair.target, penalties(), drafter, c);
    const RunResult r = run_generator(generator, kPrompt, 40000, kV);
    const stats::GofResult gof =
        stats::g_test(r.counts, exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, kL));
    INFO(verify_method_name(*c.method) << ": " << gof.detail);
    CHECK(gof.passed(stats::kAlpha));
  }
}

#endif  // SPECULA_HAS_CUDA
