// Exactness with a real target (the models issue): the bundled byte-level transformer target, sampled at
// T = 0.8 with top-p and penalties, through every drafter (the bundled draft transformer, prompt lookup,
// the bundled n-gram model) and every verifier (chain, block, trees with each sibling scheme). The exact
// law of a 2-token continuation needs V + 1 = 257 target forwards; each method's samples are G-tested
// against it at stats::kAlpha. Also: greedy speculation equals greedy decoding for every drafter.
#include <catch2/catch.hpp>
#include <string>

#include "draft/registry/drafter_registry.h"
#include "harness/generation/generator.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
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

struct Combo {
  std::string drafter;
  VerifyMethod method;
  std::vector<int32_t> tree;
  SiblingScheme scheme = SiblingScheme::iid;
};

}  // namespace

TEST_CASE("bundled target: every drafter and verifier samples the exact 2-token law", "[transformer][bundled]") {
  const auto target = load_language_model("transformer:" + kModels + "target", "target");
  const auto tokenizer = load_tokenizer_for("transformer:" + kModels + "target");
  // A prompt with repeats, so prompt lookup proposes something.
  const std::vector<Token> prompt = tokenizer->encode("KING RICHARD:\nWhat says the king? What says the k");
  const SamplerPipeline pipeline(sampled(), target->vocab_size());
  const std::vector<double> law = exact_two_token_law(*target, pipeline, prompt);
  const std::vector<Combo> combos = {
      {"transformer:" + kModels + "draft", VerifyMethod::chain, {}},
      {"transformer:" + kModels + "draft", VerifyMethod::block, {}},
      {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::iid},
      {"transformer:" + kModels + "draft", VerifyMethod::tree, {2, 2}, SiblingScheme::without_replacement},
      {"transformer:" + kModels + "draft", VerifyMethod::tree, {3, 1}, SiblingScheme::deterministic},
      {"prompt-lookup", VerifyMethod::chain, {}},
      {"ngram:" + kModels + "ngram-order4.txt", VerifyMethod::chain, {}},
  };
  for (const Combo& c : combos) {
    INFO(c.drafter << " / " << verify_method_name(c.method) << " / " << sibling_scheme_name(c.scheme));
    GenerationConfig config;
    config.method = c.method;
    config.num_draft_tokens = 2;
    config.tree_shape = c.tree;
    config.tree_sampling = c.scheme;
    config.max_new_tokens = 2;
    config.seed = 99;
    const Generator generator(target, sampled(), load_drafter(c.drafter, sampled(), target, sampled()), config);
    GenerationMetrics metrics;
    std::vector<int64_t> counts(law.size(), 0);
    for (const SequenceOutput& s : generator.generate_many(prompt, 0, 3000, metrics))
      ++counts[static_cast<size_t>(s.tokens[0]) * target->vocab_size() + s.tokens[1]];
    const stats::GofResult gof = stats::g_test(counts, law);
    INFO(gof.detail);
    CHECK(gof.passed(stats::kAlpha));
    CHECK(metrics.q_zero_errors == 0);
  }
}

TEST_CASE("bundled target: greedy speculation equals greedy decoding for every drafter", "[transformer][bundled]") {
  const auto target = load_language_model("transformer:" + kModels + "target", "target");
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
      INFO(drafter << " / " << verify_method_name(method));
      GenerationConfig config;
      config.method = method;
      config.num_draft_tokens = 4;
      if (method == VerifyMethod::tree) config.tree_shape = {2, 2, 1};
      config.max_new_tokens = 48;
      const Generator generator(target, greedy, load_drafter(drafter, greedy, target, greedy), config);
      // Exact equality is with respect to the verification pass's logits; multi-token forwards may flip
      // near-ties against 1-token decoding (verify/ALGORITHMS.md §1). The bundled models show no such tie here.
      CHECK(generator.generate(prompt, 0, m).tokens == expected);
    }
  }
}
