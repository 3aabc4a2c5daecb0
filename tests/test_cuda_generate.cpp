// The driver on a GPU (ctest label `gpu`, part of specula_gpu_tests): the Generator with --device cuda, every
// step of every sequence sampled and verified in one CUDA launch, against the CPU path and the exact law.
// Skipped with the rest of the GPU tests where no device exists (test_cuda_parity.cpp's main).
#include "kernels/cuda_device.h"

#if defined(SPECULA_HAS_CUDA)

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "draft/model_drafter.h"
#include "kernels/kernel_stream.h"
#include "speculative_fixtures.h"
#include "tests/support/mutant_switch.h"

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

// A table model that, like a target computing on the GPU, writes its rows into GPU memory when asked
// (TreeLogitsCall::out_on_gpu): through a stream of its own, complete when batch_tree_logits returns.
class GpuRowsTable : public TableModel {
 public:
  explicit GpuRowsTable(const TableModel& model) : TableModel(model), stream_(make_kernel_stream(Device::cuda)) {}
  bool batches_forwards() const override { return true; }
  bool writes_gpu_logits() const override { return true; }
  void batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const override {
    for (const TreeLogitsCall& c : calls) {
      if (!c.out_on_gpu) {
        LanguageModel::batch_tree_logits({c});
        continue;
      }
      const size_t V = static_cast<size_t>(vocab_size());
      std::vector<float> rows(static_cast<size_t>(c.tree->size() + 1) * V);
      c.session->tree_logits(*c.context, *c.tree, rows.data());
      stream_->to_device(c.out, rows.data() + c.first_row * V, static_cast<size_t>(c.rows()) * V * sizeof(float));
      ++gpu_calls;
    }
    stream_->synchronize();
  }
  mutable int64_t gpu_calls = 0;

 private:
  std::unique_ptr<KernelStream> stream_;
};

// GpuRowsTable whose writes move to another stream after the first call (LibTorch's current stream changed): its rows
// would be read before they land, so the run is refused at that step. The stream is never used.
class StreamChangingTable : public GpuRowsTable {
 public:
  using GpuRowsTable::GpuRowsTable;
  std::optional<void*> device_stream() const override {
    return gpu_calls > 0 ? std::optional<void*>(reinterpret_cast<void*>(std::uintptr_t{0x1000})) : std::nullopt;
  }
};

// The CPU path's sequences against the device's with a target, and a draft model, that write their rows into the
// kernels' buffer (a draft model's chains and trees are then drawn there from its rows in place, their laws left on the
// GPU; its ranked trees chosen there).
void check_in_place(const TablePair& pair, GenerationConfig c, int64_t sequences) {
  auto drafter = c.method ? std::make_shared<ModelDrafterFactory>(pair.draft, penalties()) : nullptr;
  GenerationMetrics cpu_m, gpu_m;
  const auto cpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, sequences, cpu_m);
  c.device = Device::cuda;
  const auto model = std::make_shared<GpuRowsTable>(*pair.target);
  const auto draft = std::make_shared<GpuRowsTable>(*pair.draft);
  auto gpu_drafter = c.method ? std::make_shared<ModelDrafterFactory>(draft, penalties()) : nullptr;
  const auto gpu = Generator(model, penalties(), gpu_drafter, c).generate_many(kPrompt, 0, sequences, gpu_m);
  INFO((c.method ? verify_method_name(*c.method) : "ar") << " tree size " << c.tree_shape.size());
  int64_t differing = 0;
  for (size_t n = 0; n < cpu.size(); ++n) differing += cpu[n].tokens != gpu[n].tokens;
  CHECK(differing == 0);
  CHECK(gpu_m.accepted == cpu_m.accepted);
  CHECK(model->gpu_calls >= sequences);  // every step's rows went to the GPU
  // And the draft rows of every chain and tree.
  if (c.method) CHECK(draft->gpu_calls >= sequences);
}

}  // namespace

TEST_CASE("generate on cuda reads the rows a model wrote into GPU memory in place, as the CPU path",
          "[gpu][generate]") {
  const TablePair pair = random_pair(2, kV, 37, 1.2, 0.8);
  for (const GenerationConfig& c : {config(std::nullopt, 0), config(VerifyMethod::chain, 3),
                                    config(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::without_replacement),
                                    config(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::iid),
                                    config(VerifyMethod::tree, 0, {3, 1}, SiblingScheme::deterministic)})
    check_in_place(pair, c, 300);
}

TEST_CASE("a target whose writes move to another CUDA stream mid-run is refused at that step", "[gpu][generate]") {
  const TablePair pair = random_pair(2, kV, 37, 1.2, 0.8);
  GenerationConfig c = config(VerifyMethod::chain, 3);
  c.device = Device::cuda;
  GenerationMetrics m;
  const auto model = std::make_shared<StreamChangingTable>(*pair.target);
  const auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, penalties());
  CHECK_THROWS_WITH(Generator(model, penalties(), drafter, c).generate_many(kPrompt, 0, 4, m),
                    Catch::Contains("on another CUDA stream than the one the kernels follow"));
}

TEST_CASE("logits written into GPU memory on a small batch (for compute-sanitizer)", "[gpu][generate][sanitize]") {
  const TablePair pair = random_pair(1, kV, 6, 1.0, 1.0);
  for (GenerationConfig c : {config(std::nullopt, 0), config(VerifyMethod::block, 2)}) {
    c.max_new_tokens = 4;
    check_in_place(pair, c, 6);
  }
}

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
                             config(VerifyMethod::tree, 0, {3, 2}, SiblingScheme::without_replacement),
                             config(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::deterministic)}) {
    c.max_new_tokens = 4;
    auto drafter = c.method ? std::make_shared<ModelDrafterFactory>(pair.draft, penalties()) : nullptr;
    GenerationMetrics cpu_m, gpu_m;
    const auto cpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, 6, cpu_m);
    c.device = Device::cuda;
    const auto gpu = Generator(pair.target, penalties(), drafter, c).generate_many(kPrompt, 0, 6, gpu_m);
    for (size_t n = 0; n < cpu.size(); ++n) CHECK(cpu[n].tokens == gpu[n].tokens);
  }
}

// The law of whole continuations with a draft model whose rows are written into GPU memory, so that its chains are
// drawn from them in place and verified against the laws left there.
stats::GofResult law_with_gpu_draft(const TablePair& pair, GenerationConfig c, int64_t n) {
  c.max_new_tokens = kL;
  c.device = Device::cuda;
  const auto draft = std::make_shared<GpuRowsTable>(*pair.draft);
  const Generator generator(pair.target, penalties(), std::make_shared<ModelDrafterFactory>(draft, penalties()), c);
  const RunResult r = run_generator(generator, kPrompt, n, kV);
  CHECK(draft->gpu_calls > 0);
  return stats::g_test(r.counts, exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, kL));
}

TEST_CASE("a draft model's chains and trees drawn on the GPU from its rows in place keep the target's law (G-test)",
          "[gpu][generate][law]") {
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  for (const GenerationConfig& c : {config(VerifyMethod::chain, 2), config(VerifyMethod::block, 3),
                                    config(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::iid),
                                    config(VerifyMethod::tree, 0, {3, 1}, SiblingScheme::without_replacement)}) {
    const stats::GofResult gof = law_with_gpu_draft(pair, c, 40000);
    INFO(verify_method_name(*c.method) << ": " << gof.detail);
    CHECK(gof.passed(stats::kAlpha));
  }
  const ScopedMutant on(Mutant::device_draft_laws_misplaced);
  for (const GenerationConfig& c : {config(VerifyMethod::chain, 2), config(VerifyMethod::tree, 0, {2, 2})}) {
    const stats::GofResult mutant = law_with_gpu_draft(pair, c, 40000);
    INFO("device_draft_laws_misplaced, " << verify_method_name(*c.method) << ": " << mutant.detail);
    CHECK_FALSE(mutant.passed(stats::kAlpha));
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
