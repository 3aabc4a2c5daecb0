// Exactness with a real target (the models issue): the bundled byte-level transformer target, sampled at
// T = 0.8 with top-p and penalties, through every drafter (the bundled draft transformer, prompt lookup,
// the bundled n-gram model) and every verifier (chain, block, trees with each sibling scheme). The exact
// law of a 2-token continuation needs V + 1 = 257 target forwards; each method's samples are G-tested
// against it at stats::kAlpha. Also: greedy speculation equals greedy decoding for every drafter. Both again
// on --device cuda-host (the kernels' code under block emulation), which must also give the CPU's tokens.
// LibTorch before Catch: glog's CHECK (through LibTorch's headers) must not replace Catch's.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "draft/registry/drafter_registry.h"
#include "harness/generation/generator.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "harness/models/transformer/transformer_model.h"
#include "tests/statistics/goodness_of_fit.h"

using namespace specula;

namespace {

const std::string kModels = std::string(SPECULA_SOURCE_DIR) + "/results/models/";

SamplingParams sampled() {
  SamplingParams s;
  s.temperature = 0.8f;
  s.top_p = 0.9f;
  s.repetition_penalty = 1.2f;
  s.frequency_penalty = 0.3f;
  s.presence_penalty = 0.2f;
  return s;
}

// P(x1, x2) = p1(x1) p2(x2 | x1), each through the pipeline with its own history.
std::vector<double> exact_two_token_law(const LanguageModel& target, const SamplerPipeline& pipeline,
                                        const std::vector<Token>& prompt) {
  const int32_t V = target.vocab_size();
  auto session = target.new_session();
  std::vector<float> logits(V), p1(V), p2(V);
  TokenHistory history;
  history.prompt = prompt;
  session->next_logits(prompt, logits.data());
  pipeline.process(logits.data(), history, p1.data());
  std::vector<double> law(static_cast<size_t>(V) * V, 0.0);
  double total = 0.0;
  for (Token x1 = 0; x1 < V; ++x1) {
    if (p1[x1] == 0.0f) continue;
    std::vector<Token> context = prompt;
    context.push_back(x1);
    session->next_logits(context, logits.data());
    pipeline.process(logits.data(), pipeline.advance(history, x1, p1.data()), p2.data());
    for (Token x2 = 0; x2 < V; ++x2) total += law[x1 * V + x2] = static_cast<double>(p1[x1]) * p2[x2];
  }
  for (double& v : law) v /= total;
  return law;
}

// A short prompt with a repeat (so prompt lookup proposes something): each sequence's prefill is most of these
// tests' time.
const std::string kShortPrompt = "the king? the k";

struct Combo {
  std::string drafter;
  VerifyMethod method;
  std::vector<int32_t> tree;
  SiblingScheme scheme = SiblingScheme::iid;
};

// Each combination's 2-token continuations on `device`, G-tested against the exact law (`samples` > 0); with a
// device other than the CPU also the CPU path's continuations for 200 sequences, token for token.
// model_device, weights_dtype: where the target computes and in what (model_registry.h).
// lockstep: on the CPU, the sequences in lockstep (one target forward per step for all), checked against the
// sequence-by-sequence path's tokens too.
void check_two_token_law(const std::vector<Combo>& combos, Device device, int64_t samples,
                         const std::string& prompt_text, const std::string& model_device = "cpu",
                         const std::string& weights_dtype = "auto", bool lockstep = false) {
  const auto target = load_language_model("transformer:" + kModels + "target", "target", weights_dtype, model_device);
  const auto tokenizer = load_tokenizer_for("transformer:" + kModels + "target");
  const std::vector<Token> prompt = tokenizer->encode(prompt_text);
  const SamplerPipeline pipeline(sampled(), target->vocab_size());
  const std::vector<double> law = exact_two_token_law(*target, pipeline, prompt);
  for (const Combo& c : combos) {
    INFO(c.drafter << " / " << verify_method_name(c.method) << " / " << sibling_scheme_name(c.scheme) << " on "
                   << device_name(device) << ", target on " << model_device << " in " << weights_dtype);
    GenerationConfig config;
    config.method = c.method;
    config.num_draft_tokens = 2;
    config.tree_shape = c.tree;
    config.tree_sampling = c.scheme;
    config.max_new_tokens = 2;
    config.seed = 99;
    config.device = device;
    config.lockstep = lockstep;
    const auto drafter = load_drafter(c.drafter, sampled(), target, sampled());
    const Generator generator(target, sampled(), drafter, config);
    GenerationMetrics metrics;
    std::vector<int64_t> counts(law.size(), 0);
    const std::vector<SequenceOutput> out =
        generator.generate_many(prompt, 0, std::max<int64_t>(samples, 200), metrics);
    CHECK(metrics.q_zero_errors == 0);
    if (samples > 0) {
      for (const SequenceOutput& s : out)
        ++counts[static_cast<size_t>(s.tokens[0]) * target->vocab_size() + s.tokens[1]];
      const stats::GofResult gof = stats::g_test(counts, law);
      INFO(gof.detail);
      CHECK(gof.passed(stats::kAlpha));
    }
    if (device == Device::cpu && !lockstep) continue;
    config.device = Device::cpu;
    config.lockstep = false;
    GenerationMetrics cpu_metrics;
    const std::vector<SequenceOutput> cpu =
        Generator(target, sampled(), drafter, config).generate_many(prompt, 0, 200, cpu_metrics);
    for (size_t n = 0; n < cpu.size(); ++n) CHECK(out[n].tokens == cpu[n].tokens);
  }
}

// Greedy speculation through every drafter and method equals greedy decoding, on `device`.
void check_greedy_equality(Device device, const std::string& model_device = "cpu") {
  const auto target = load_language_model("transformer:" + kModels + "target", "target", "auto", model_device);
  const auto tokenizer = load_tokenizer_for("transformer:" + kModels + "target");
  const std::vector<Token> prompt = tokenizer->encode("ROMEO:\nBut soft, what light through yonder window breaks?\n");
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 48;
  GenerationMetrics m;
  const std::vector<Token> expected = Generator(target, greedy, nullptr, ar).generate(prompt, 0, m).tokens;
  for (const std::string& drafter :
       {"transformer:" + kModels + "draft", std::string("prompt-lookup"), "ngram:" + kModels + "ngram-order4.txt"}) {
    for (VerifyMethod method : {VerifyMethod::greedy, VerifyMethod::chain, VerifyMethod::block, VerifyMethod::tree}) {
      INFO(drafter << " / " << verify_method_name(method) << " on " << device_name(device) << ", target on "
                   << model_device);
      GenerationConfig config;
      config.method = method;
      config.num_draft_tokens = 4;
      if (method == VerifyMethod::tree) config.tree_shape = {2, 2, 1};
      config.max_new_tokens = 48;
      config.device = device;
      const Generator generator(target, greedy, load_drafter(drafter, greedy, target, greedy), config);
      // Exact equality is with respect to the verification pass's logits; multi-token forwards may flip
      // near-ties against 1-token decoding (verify/ALGORITHMS.md §1). The bundled models show no such tie here.
      CHECK(generator.generate(prompt, 0, m).tokens == expected);
    }
  }
}

}  // namespace

TEST_CASE("bundled target: every drafter and verifier samples the exact 2-token law", "[transformer][bundled]") {
  check_two_token_law(
      {{"transformer:" + kModels + "draft", VerifyMethod::chain, {}},
       {"transformer:" + kModels + "draft", VerifyMethod::block, {}},
       {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::iid},
       {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::without_replacement},
       {"transformer:" + kModels + "draft", VerifyMethod::tree, {3, 1}, SiblingScheme::deterministic},
       {"prompt-lookup", VerifyMethod::chain, {}},
       {"ngram:" + kModels + "ngram-order4.txt", VerifyMethod::chain, {}}},
      Device::cpu, 3000, kShortPrompt);
}

// Batched lockstep decoding on the CPU: every step runs the target once for all unfinished sequences (each at its own
// length), then samples / verifies each on the CPU. The law holds, and every sequence's tokens are those it gets alone:
// the decoding step computes each row independently of the rows beside it.
TEST_CASE("bundled target in lockstep on the CPU: the exact 2-token law, and each sequence's tokens alone",
          "[transformer][bundled]") {
  check_two_token_law({{"transformer:" + kModels + "draft", VerifyMethod::chain, {}},
                       {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::iid},
                       {"prompt-lookup", VerifyMethod::block, {}}},
                      Device::cpu, 2000, kShortPrompt, "cpu", "auto", /*lockstep=*/true);
  // Prompts of different lengths, longer generations (sequences that end apart), every method and `ar`, sampled:
  // lockstep gives every sequence the tokens and acceptance it has alone.
  const auto target = load_language_model("transformer:" + kModels + "target", "target");
  const auto tokenizer = load_tokenizer_for("transformer:" + kModels + "target");
  std::vector<std::vector<Token>> prompts;
  for (const char* text :
       {"ROMEO:\n", "the king? the k", "First Citizen:\nBefore we proceed any further, hear me", "O"})
    prompts.push_back(tokenizer->encode(text));
  std::vector<const std::vector<Token>*> each;
  for (const auto& p : prompts) each.push_back(&p);
  const std::vector<uint64_t> ids = {0, 1, 2, 3};
  SamplingParams params = sampled();
  params.stop_tokens = {static_cast<Token>('\n')};  // sequences stop at different steps
  for (const std::optional<VerifyMethod> method :
       {std::optional<VerifyMethod>(), std::optional<VerifyMethod>(VerifyMethod::chain),
        std::optional<VerifyMethod>(VerifyMethod::tree)}) {
    INFO((method ? verify_method_name(*method) : "ar"));
    GenerationConfig config;
    config.method = method;
    if (method == VerifyMethod::tree) config.tree_shape = {2, 2, 1};
    config.max_new_tokens = 40;
    config.seed = 5;
    const auto drafter = method ? load_drafter("transformer:" + kModels + "draft", params, target, params) : nullptr;
    std::vector<GenerationMetrics> m1(4), m2(4);
    const std::vector<SequenceOutput> alone = Generator(target, params, drafter, config).generate_batch(each, ids, m1);
    config.lockstep = true;
    const std::vector<SequenceOutput> together =
        Generator(target, params, drafter, config).generate_batch(each, ids, m2);
    for (size_t i = 0; i < alone.size(); ++i) {
      CHECK(together[i].tokens == alone[i].tokens);
      CHECK(together[i].accept_lengths == alone[i].accept_lengths);
      CHECK(m2[i].target_calls == m1[i].target_calls);
    }
  }
}

TEST_CASE("bundled target: greedy speculation equals greedy decoding for every drafter", "[transformer][bundled]") {
  check_greedy_equality(Device::cpu);
}

// The same on --device cuda-host: the transformer's rows go through the kernels' code (block emulation), point-
// mass drafts (prompt lookup) and recorded q rows (the draft model, the n-gram model) alike.
TEST_CASE("bundled target on cuda-host: drafters and verifiers sample the exact 2-token law, the CPU's tokens",
          "[transformer][device]") {
  // Chain, block and tree each G-tested (recorded q rows from the draft model), and point-mass drafts (prompt
  // lookup) through the chain kernel; the n-gram model's tree against the CPU's tokens.
  const std::string prompt = kShortPrompt;
  check_two_token_law(
      {{"transformer:" + kModels + "draft", VerifyMethod::chain, {}},
       {"transformer:" + kModels + "draft", VerifyMethod::block, {}},
       {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::without_replacement},
       {"prompt-lookup", VerifyMethod::chain, {}}},
      Device::cuda_host, 2000, prompt);
  check_two_token_law({{"ngram:" + kModels + "ngram-order4.txt", VerifyMethod::tree, {2, 1}, SiblingScheme::iid}},
                      Device::cuda_host, 0, prompt);
}

TEST_CASE("bundled target on cuda-host: greedy speculation equals greedy decoding for every drafter",
          "[transformer][device]") {
  check_greedy_equality(Device::cuda_host);
}

// The target through the device-agnostic path a GPU runs (every forward LibTorch's operations, the session's logits
// kept where it computes and written from there into the caller's buffer), here on the CPU: the law holds and greedy
// speculation equals greedy decoding on that path, as the README promises for one device; on cuda-host its rows go
// straight into the kernels' buffer, as a GPU's go device to device.
TEST_CASE("bundled target through LibTorch's device path: the exact 2-token law, greedy equality",
          "[transformer][bundled]") {
  const auto placed = load_language_model("transformer:" + kModels + "target", "target", "auto", "libtorch");
  const auto* model = dynamic_cast<const TransformerLanguageModel*>(placed.get());
  REQUIRE(model);
  c10::InferenceMode inference;  // the decoding step serves inference only
  Transformer module = transformer_module(*model);
  KVCache cache = module->new_cache(1);
  const torch::Tensor one = torch::zeros({1, 1}, torch::kInt64);
  CHECK_FALSE(module->decode_path_applies(one, &cache));  // the path under test is LibTorch's, not the step's
  CHECK(transformer_module(*dynamic_cast<const TransformerLanguageModel*>(
                               load_language_model("transformer:" + kModels + "target", "target").get()))
            ->decode_path_applies(one, &cache));
  check_two_token_law({{"transformer:" + kModels + "draft", VerifyMethod::chain, {}},
                       {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::iid},
                       {"prompt-lookup", VerifyMethod::chain, {}}},
                      Device::cpu, 2000, kShortPrompt, "libtorch");
  // bfloat16 matrices: the 16-bit GEMMs a GPU runs, here LibTorch's on the CPU.
  check_two_token_law({{"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::iid}},
                      Device::cpu, 2000, kShortPrompt, "libtorch", "bfloat16");
  check_greedy_equality(Device::cpu, "libtorch");
  CHECK_FALSE(model->writes_gpu_logits());  // it computes on the CPU
  check_greedy_equality(Device::cuda_host, "libtorch");
  // GPU memory is refused by name from a model that does not compute there.
  const std::unique_ptr<ModelSession> session = model->new_session();
  const std::vector<Token> context = {10, 20, 30};
  const TokenTree no_tree;
  std::vector<float> out(static_cast<size_t>(model->vocab_size()));
  CHECK_THROWS_WITH(
      model->batch_tree_logits({TreeLogitsCall{session.get(), &context, &no_tree, out.data(), /*out_on_gpu=*/true}}),
      Catch::Matchers::Contains("logits asked in GPU memory, but the model does not compute on a GPU"));
}

// A batch on LibTorch's device path, as a GPU decodes one: greedy speculation in lockstep (one batched forward per
// step, lone sequences' steps through step graphs once the others stopped, the rows straight into the kernels'
// buffer on cuda-host) gives each sequence the greedy decoding of the same device, with stops ending sequences at
// different steps.
TEST_CASE("bundled target through LibTorch's device path in a batch: greedy speculation equals greedy decoding",
          "[transformer][bundled]") {
  const auto target = load_language_model("transformer:" + kModels + "target", "target", "auto", "libtorch");
  const auto tokenizer = load_tokenizer_for("transformer:" + kModels + "target");
  std::vector<std::vector<Token>> prompts;
  for (const char* text : {"ROMEO:\n", "the king? the k", "First Citizen:\nBefore we proceed any further, hear me"})
    prompts.push_back(tokenizer->encode(text));
  std::vector<const std::vector<Token>*> each;
  for (const auto& p : prompts) each.push_back(&p);
  const std::vector<uint64_t> ids = {0, 1, 2};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  greedy.stop_tokens = {static_cast<Token>('\n')};
  for (const Device device : {Device::cpu, Device::cuda_host}) {
    GenerationConfig ar;
    ar.max_new_tokens = 40;
    ar.device = device;
    ar.lockstep = true;
    std::vector<GenerationMetrics> m0(3);
    const std::vector<SequenceOutput> expected = Generator(target, greedy, nullptr, ar).generate_batch(each, ids, m0);
    for (const std::string& drafter : {"transformer:" + kModels + "draft", std::string("prompt-lookup")})
      for (VerifyMethod method : {VerifyMethod::chain, VerifyMethod::tree}) {
        INFO(drafter << " / " << verify_method_name(method) << " on " << device_name(device));
        GenerationConfig config = ar;
        config.method = method;
        config.num_draft_tokens = 4;
        if (method == VerifyMethod::tree) config.tree_shape = {2, 2, 1};
        std::vector<GenerationMetrics> m(3);
        const std::vector<SequenceOutput> out =
            Generator(target, greedy, load_drafter(drafter, greedy, target, greedy), config)
                .generate_batch(each, ids, m);
        for (size_t i = 0; i < out.size(); ++i) CHECK(out[i].tokens == expected[i].tokens);
      }
  }
}

TEST_CASE("a target on cuda without a CUDA LibTorch is refused before its weights are read", "[transformer]") {
  if (torch::cuda::is_available()) return;  // a GPU machine's CUDA LibTorch places it (gpu-check covers that)
  CHECK_THROWS_WITH(load_language_model("transformer:" + kModels + "target", "target", "auto", "cuda"),
                    Catch::Matchers::Contains("device 'cuda': this LibTorch cannot use CUDA"));
}
