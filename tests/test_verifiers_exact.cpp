// Exact-law tests of speculative decoding (tests/TESTING.md batteries E and G, and M for the verifiers): the
// joint law of whole continuations produced by the real Generator (drafter -> target rows through the
// sampler pipeline -> verifier) is G-tested against the exact autoregressive law, enumerated over all
// V^L continuations. Every goodness-of-fit assertion runs at stats::kAlpha = 1e-6 with a fixed seed (the
// expectation check of the long-sequence test uses 6 standard errors); a failure is a bug.
#include <omp.h>

#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <sstream>

#include "draft/model_drafter.h"
#include "kernels/shared/error.h"
#include "mixed_k_seen.h"
#include "speculative_fixtures.h"
#include "tests/statistics/transition_test.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/batch_verifier.h"
#include "verify/verifiers/verify_methods.h"

using namespace specula;
using namespace specula::testing;

namespace {

constexpr int32_t kV = 6;
constexpr int32_t kL = 3;
const std::vector<Token> kPrompt = {2, 5};

SamplingParams plain() { return SamplingParams{}; }

SamplingParams truncating() {
  SamplingParams s;
  s.temperature = 0.8f;
  s.top_k = 4;
  s.top_p = 0.9f;
  s.min_p = 0.05f;
  return s;
}

// Penalties make the law depend on the whole history, including draft prefixes.
SamplingParams penalties() {
  SamplingParams s;
  s.repetition_penalty = 1.4f;
  s.frequency_penalty = 0.5f;
  s.presence_penalty = 0.4f;
  s.logit_bias = {{1, 0.8f}, {3, -0.6f}};
  s.min_tokens = 2;
  s.stop_tokens = {0};
  return s;
}

SamplingParams full_pipeline() {
  SamplingParams s = penalties();
  s.temperature = 0.9f;
  s.top_k = 5;
  s.top_p = 0.95f;
  s.min_p = 0.02f;
  s.bad_words = {{4, 2}};
  return s;
}

// The stateful and entropy-based stages: dynamic temperature, locally typical, tail-free and mirostat v2
// (whose mu advances with every emitted token, so draft rows must carry it along their path).
SamplingParams exotic_pipeline() {
  SamplingParams s;
  s.repetition_penalty = 1.3f;
  s.dynatemp_range = 0.4f;
  s.typical_p = 0.9f;
  s.tfs_z = 0.97f;
  s.mirostat = 2;
  s.mirostat_tau = 1.3f;
  s.mirostat_eta = 0.4f;
  s.order = {FilterStage::typical_p, FilterStage::tfs_z, FilterStage::mirostat};
  return s;
}

// Two stop tokens and no min_tokens: continuations end at any position, in the middle of a verification
// step's accepted drafts too, so the stop rule's cut is part of the law under test.
SamplingParams stopping() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 5;
  s.repetition_penalty = 1.2f;
  s.stop_tokens = {0, 3};
  return s;
}

struct Named {
  const char* name;
  SamplingParams params;
};
const std::vector<Named> kPipelines = {
    {"plain", plain()},        {"truncating", truncating()},  {"penalties", penalties()},
    {"full", full_pipeline()}, {"exotic", exotic_pipeline()}, {"stopping", stopping()}};

GenerationConfig chain_config(VerifyMethod m, int32_t k) {
  GenerationConfig c;
  c.method = m;
  c.num_draft_tokens = k;
  c.max_new_tokens = kL;
  c.seed = 20261122;
  return c;
}

GenerationConfig tree_config(std::vector<int32_t> shape, SiblingScheme scheme) {
  GenerationConfig c = chain_config(VerifyMethod::tree, 0);
  c.tree_shape = std::move(shape);
  c.tree_sampling = scheme;
  return c;
}

std::string describe(const GenerationConfig& c) {
  std::ostringstream os;
  os << (c.method ? verify_method_name(*c.method) : "ar") << " K=" << c.num_draft_tokens << " tree=";
  for (int32_t b : c.tree_shape) os << b << ",";
  os << " scheme=" << sibling_scheme_name(c.tree_sampling);
  if (c.num_draft_tokens_schedule != DraftSchedule::constant)
    os << " schedule=" << draft_schedule_name(c.num_draft_tokens_schedule);
  return os.str();
}

struct LawCheck {
  stats::GofResult gof;
  RunResult run;
};

LawCheck check_law(const TablePair& pair, const SamplingParams& target, const SamplingParams& draft,
                   const GenerationConfig& config, int64_t n) {
  auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, draft);
  const Generator generator(pair.target, target, drafter, config);
  LawCheck out;
  out.run = run_generator(generator, kPrompt, n, kV);
  const std::vector<double> law =
      exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, config.max_new_tokens);
  out.gof = stats::g_test(out.run.counts, law);
  return out;
}

const std::vector<GenerationConfig>& exact_methods() {
  static const std::vector<GenerationConfig> methods = {
      chain_config(VerifyMethod::chain, 1),
      chain_config(VerifyMethod::chain, 2),
      chain_config(VerifyMethod::chain, 4),
      chain_config(VerifyMethod::block, 2),
      chain_config(VerifyMethod::block, 4),
      tree_config({2, 2}, SiblingScheme::iid),
      tree_config({3, 1}, SiblingScheme::iid),
      tree_config({2, 2}, SiblingScheme::without_replacement),
      tree_config({2, 1, 1}, SiblingScheme::without_replacement),
      tree_config({2, 2}, SiblingScheme::deterministic),
      tree_config({3, 1}, SiblingScheme::deterministic),
  };
  return methods;
}

}  // namespace

// Pinned for the built-in methods only: a method added by one line of SPECULA_VERIFY_METHODS (README, "Where new
// things go") comes after them and leaves this test as it is.
TEST_CASE("the methods' table: the built-in methods sit at their named rows, with their traits", "[verify]") {
  const std::vector<VerifyMethod> all = verify_methods();
  REQUIRE(all.size() >= 5);
  const std::pair<VerifyMethod, const char*> named[] = {{VerifyMethod::greedy, "greedy"},
                                                        {VerifyMethod::chain, "chain"},
                                                        {VerifyMethod::tree, "tree"},
                                                        {VerifyMethod::block, "block"},
                                                        {VerifyMethod::typical, "typical"}};
  for (const auto& [method, name] : named) {
    CHECK(std::string(verify_method_name(method)) == name);
    CHECK(parse_verify_method(name) == method);
  }
  CHECK(verify_method_names().rfind("greedy, chain, tree, block, typical", 0) == 0);
  for (const auto& [m, name] : named) {
    INFO(name);
    CHECK(is_lossy(m) == (m == VerifyMethod::typical));
    CHECK(verifies_trees(m) == (m == VerifyMethod::tree));
    CHECK(verifies_greedily(m) == (m == VerifyMethod::greedy));
    CHECK(has_device_kernel(m) == !is_lossy(m));
  }
  CHECK_THROWS_WITH(parse_verify_method("nope"),
                    Catch::Matchers::Contains("known: greedy, chain, tree, block, typical"));
  CHECK_THROWS_WITH(verify_method_name(VerifyMethod(static_cast<int32_t>(all.size()))),
                    Catch::Matchers::Contains("has no row"));
}

TEST_CASE("every exact verifier reproduces the target's law of whole continuations", "[verify][exact]") {
  // Order-2 tables: rows depend on the last two tokens, so bugs that corrupt older context show up.
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  for (const Named& pipeline : kPipelines) {
    for (const GenerationConfig& config : exact_methods()) {
      INFO(pipeline.name << " / " << describe(config));
      const LawCheck c = check_law(pair, pipeline.params, pipeline.params, config, 40000);
      INFO(c.gof.detail);
      CHECK(c.gof.passed(stats::kAlpha));
      CHECK(c.run.metrics.q_zero_errors == 0);
    }
  }
}

TEST_CASE("exactness holds when the draft samples with its own settings", "[verify][exact]") {
  // The draft truncates hard (top-k 2) and runs hotter; the target uses the full pipeline. Tokens outside
  // the draft's support can only come out through the residual, which must still give the target law.
  const TablePair pair = random_pair(1, kV, 12, 1.5, 0.5);
  SamplingParams draft = plain();
  draft.top_k = 2;
  draft.temperature = 1.3f;
  for (const GenerationConfig& config :
       {chain_config(VerifyMethod::chain, 3), chain_config(VerifyMethod::block, 3),
        tree_config({2, 2}, SiblingScheme::iid), tree_config({3, 1}, SiblingScheme::without_replacement)}) {
    INFO(describe(config));
    const LawCheck c = check_law(pair, full_pipeline(), draft, config, 60000);
    INFO(c.gof.detail);
    CHECK(c.gof.passed(stats::kAlpha));
  }
}

TEST_CASE("the autoregressive baseline samples the same exact law", "[verify][exact]") {
  const TablePair pair = random_pair(2, kV, 13, 1.2, 0.8);
  GenerationConfig ar;
  ar.max_new_tokens = kL;
  ar.seed = 5;
  const Generator generator(pair.target, full_pipeline(), nullptr, ar);
  const RunResult r = run_generator(generator, kPrompt, 60000, kV);
  const stats::GofResult gof =
      stats::g_test(r.counts, exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, kL));
  INFO(gof.detail);
  CHECK(gof.passed(stats::kAlpha));
}

TEST_CASE("at temperature 0 every method outputs exactly what greedy decoding outputs", "[verify][greedy]") {
  const TablePair pair = random_pair(2, 8, 14, 1.0, 1.0);
  SamplingParams greedy = penalties();
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 12;
  const std::vector<Token> prompt = {1, 3};
  GenerationMetrics m;
  const std::vector<Token> expected = Generator(pair.target, greedy, nullptr, ar).generate(prompt, 0, m).tokens;
  std::vector<GenerationConfig> configs = exact_methods();
  configs.push_back(chain_config(VerifyMethod::greedy, 3));
  configs.push_back(chain_config(VerifyMethod::typical, 3));
  for (const VerifyMethod m : {VerifyMethod::chain, VerifyMethod::block, VerifyMethod::greedy}) {
    configs.push_back(chain_config(m, 4));  // K moving between steps (draft_schedule.h)
    configs.back().num_draft_tokens_schedule = DraftSchedule::heuristic;
  }
  for (GenerationConfig config : configs) {
    config.max_new_tokens = 12;
    for (const SamplingParams& draft : {greedy, plain()}) {  // greedy drafts and sampled drafts
      INFO(describe(config) << " draft T=" << draft.temperature);
      auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, draft);
      const Generator generator(pair.target, greedy, drafter, config);
      for (uint64_t seq = 0; seq < 20; ++seq) CHECK(generator.generate(prompt, seq, m).tokens == expected);
    }
  }
}

TEST_CASE("at temperature 0 every method stops where greedy decoding stops", "[verify][greedy]") {
  const TablePair pair = random_pair(2, 8, 14, 1.0, 1.0);
  SamplingParams greedy = penalties();
  greedy.temperature = 0.0f;
  greedy.min_tokens = 0;
  greedy.stop_tokens = {};
  GenerationConfig ar;
  ar.max_new_tokens = 12;
  const std::vector<Token> prompt = {1, 3};
  GenerationMetrics m;
  const std::vector<Token> unstopped = Generator(pair.target, greedy, nullptr, ar).generate(prompt, 0, m).tokens;
  // The stop token: the first token that greedy decoding emits for the first time at position >= 4, so the
  // stopped line ends in the middle of the run (and, for K >= 2, in the middle of a verification step).
  size_t cut = 4;
  while (cut < unstopped.size() &&
         std::find(unstopped.begin(), unstopped.begin() + cut, unstopped[cut]) != unstopped.begin() + cut)
    ++cut;
  REQUIRE(cut < unstopped.size() - 1);
  greedy.stop_tokens = {unstopped[cut]};
  const std::vector<Token> expected(unstopped.begin(), unstopped.begin() + cut + 1);
  const SequenceOutput reference = Generator(pair.target, greedy, nullptr, ar).generate(prompt, 0, m);
  REQUIRE(reference.tokens == expected);
  REQUIRE(reference.stop_reason == StopReason::stop);
  std::vector<GenerationConfig> configs = exact_methods();
  configs.push_back(chain_config(VerifyMethod::greedy, 3));
  configs.push_back(chain_config(VerifyMethod::typical, 3));
  for (const VerifyMethod m : {VerifyMethod::chain, VerifyMethod::block, VerifyMethod::greedy}) {
    configs.push_back(chain_config(m, 4));  // K moving between steps (draft_schedule.h)
    configs.back().num_draft_tokens_schedule = DraftSchedule::heuristic;
  }
  for (GenerationConfig config : configs) {
    config.max_new_tokens = 12;
    INFO(describe(config));
    for (const SamplingParams& draft : {greedy, plain()}) {
      INFO("draft T=" << draft.temperature);
      auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, draft);
      const Generator generator(pair.target, greedy, drafter, config);
      for (uint64_t seq = 0; seq < 20; ++seq) {
        GenerationMetrics metrics;
        const SequenceOutput out = generator.generate(prompt, seq, metrics);
        CHECK(out.tokens == expected);
        CHECK(out.stop_reason == StopReason::stop);
        CHECK(metrics.new_tokens == static_cast<int64_t>(expected.size()));
        CHECK(metrics.emitted == static_cast<int64_t>(expected.size()));
      }
    }
    // The mutant that keeps a step's tokens after the stop token is caught by the same comparison, with a stop
    // token inside a step: the target drafting for itself is accepted everywhere, so each step emits depth + 1
    // tokens, and the stop token is the first new one at a position >= 4 that does not end a step.
    const int64_t depth = draft_depth(config);
    if (depth < 2) continue;
    size_t mid = 4;
    while (mid < unstopped.size() &&
           (std::find(unstopped.begin(), unstopped.begin() + mid, unstopped[mid]) != unstopped.begin() + mid ||
            static_cast<int64_t>(mid) % (depth + 1) == depth))
      ++mid;
    REQUIRE(mid + 1 < unstopped.size());  // a token after the stop that max_new_tokens does not cut
    SamplingParams mid_stop = greedy;
    mid_stop.stop_tokens = {unstopped[mid]};
    const std::vector<Token> mid_expected(unstopped.begin(), unstopped.begin() + mid + 1);
    const Generator itself(pair.target, mid_stop, std::make_shared<ModelDrafterFactory>(pair.target, mid_stop), config);
    const SequenceOutput own = itself.generate(prompt, 0, m);
    CHECK(own.tokens == mid_expected);
    for (int32_t accepted : own.accept_lengths) CHECK(accepted == depth);  // the premise: all accepted
    const ScopedMutant on(Mutant::stop_checked_per_step);
    CHECK(itself.generate(prompt, 0, m).tokens != mid_expected);
  }
}

TEST_CASE("Medusa typical acceptance is lossy and its distance from the target is measured", "[verify][lossy]") {
  const TablePair pair = random_pair(1, kV, 15, 1.5, 1.0);
  const LawCheck c = check_law(pair, plain(), plain(), chain_config(VerifyMethod::typical, 3), 60000);
  const std::vector<double> law = exact_sequence_law(*pair.target, SamplerPipeline(plain(), kV), kPrompt, kL);
  const double tv = total_variation(c.run.counts, law);
  WARN("typical acceptance: TV distance of the 3-token law from the target = " << tv);
  // Not exact, and visibly so: the G-test rejects it and the TV is far above sampling noise (~0.02 here).
  CHECK_FALSE(c.gof.passed(stats::kAlpha));
  CHECK(tv > 0.05);
}

namespace {

// Medusa's threshold (Cai et al. 2024, verify/ALGORITHMS.md §3), written out from the paper's formula:
// min(eps, delta * e^-H) with H = -sum p log(p + 1e-5); `maximum` gives the max(...) of the planted bug.
double typical_threshold(const std::vector<float>& p, bool maximum = false) {
  const TypicalAcceptance t;
  double entropy = 0.0;
  for (const float x : p)
    if (x > 0.0f) entropy -= x * std::log(x + 1e-5);
  const double floor = t.delta * std::exp(-entropy);
  return maximum ? std::max(t.epsilon, floor) : std::min(t.epsilon, floor);
}

// The exact law of L-token continuations of the Generator's typical-acceptance loop, enumerated over draft
// chains: each step draws a K-token chain from q (the draft's processed rows along the chain), keeps the
// longest prefix whose tokens have p above the threshold, then emits one token drawn from p at the first
// refused position, or from the bonus row after K acceptances; the output is cut at L tokens. A refused draft
// token's identity does not matter, only the q mass of the refused tokens.
std::vector<double> exact_typical_law(const TablePair& pair, const SamplerPipeline& target,
                                      const SamplerPipeline& draft, const std::vector<Token>& prompt, int32_t K,
                                      int32_t L, bool maximum = false) {
  const int32_t V = pair.target->vocab_size();
  std::vector<double> law(static_cast<size_t>(std::pow(V, L)), 0.0);
  const TokenHistory history{prompt, {}, std::nan("")};  // the plain pipeline reads no history
  auto row = [&](const TableModel& model, const SamplerPipeline& pipeline, const std::vector<Token>& context) {
    std::vector<float> probs(V);
    pipeline.process(model.row_after(context), history, probs.data());
    return probs;
  };
  std::vector<Token> context = prompt, out;
  std::function<void(int32_t, double)> step = [&](int32_t position, double mass) {
    if (static_cast<int32_t>(out.size()) == L) {
      law[sequence_index(out, V)] += mass;
      return;
    }
    auto emit = [&](Token x, int32_t next_position, double x_mass) {
      context.push_back(x);
      out.push_back(x);
      step(next_position, x_mass);
      context.pop_back();
      out.pop_back();
    };
    const std::vector<float> p = row(*pair.target, target, context);
    double refused = position == K ? 1.0 : 0.0;  // the bonus row draws from p like a refusal
    if (position < K) {
      const std::vector<float> q = row(*pair.draft, draft, context);
      const double threshold = typical_threshold(p, maximum);
      for (Token d = 0; d < V; ++d) {
        if (q[d] == 0.0f) continue;
        if (p[d] > threshold)
          emit(d, position + 1, mass * q[d]);
        else
          refused += q[d];
      }
    }
    for (Token x = 0; x < V; ++x)
      if (refused > 0.0 && p[x] > 0.0f) emit(x, 0, mass * refused * p[x]);
  };
  step(0, 1.0);
  const double total = std::accumulate(law.begin(), law.end(), 0.0);
  for (double& x : law) x /= total;
  return law;
}

TokenTree one_token_chain(Token d) {
  TokenTree chain;
  chain.add(d, -1);
  return chain;
}

}  // namespace

TEST_CASE("Medusa typical acceptance samples its own enumerated law; the max-threshold mutant is caught",
          "[verify][lossy]") {
  // A target whose rows put tokens between eps and delta e^-H (where min and max disagree) in the draft's way:
  // the planted bug moves the law by TV 0.29 (on seed 16 with scale 3 it would not move it at all).
  const TablePair pair = random_pair(1, kV, 26, 2.0, 1.0);
  const GenerationConfig config = chain_config(VerifyMethod::typical, 3);
  const SamplerPipeline pipeline(plain(), kV);
  const std::vector<double> law = exact_typical_law(pair, pipeline, pipeline, kPrompt, 3, kL);
  const std::vector<double> mutant_law = exact_typical_law(pair, pipeline, pipeline, kPrompt, 3, kL, true);
  double tv = 0.0;
  for (size_t i = 0; i < law.size(); ++i) tv += 0.5 * std::abs(law[i] - mutant_law[i]);
  INFO("TV(correct law, max-threshold law) = " << tv);
  REQUIRE(tv > 0.03);  // the planted bug changes the law by far more than 60,000 samples resolve

  auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, plain());
  const Generator generator(pair.target, plain(), drafter, config);
  const RunResult run = run_generator(generator, kPrompt, 60000, kV);
  const stats::GofResult gof = stats::g_test(run.counts, law);
  INFO(gof.detail);
  CHECK(gof.passed(stats::kAlpha));
  CHECK(run.metrics.accepted > 0);

  const ScopedMutant on(Mutant::typical_threshold_max);
  const RunResult broken = run_generator(generator, kPrompt, 60000, kV);
  CHECK_FALSE(stats::g_test(broken.counts, law).passed(stats::kAlpha));
}

TEST_CASE("Medusa typical acceptance on hand rows at the threshold", "[verify][lossy]") {
  // Thresholds worked by hand from min(0.09, 0.3 e^-H), H = -sum p ln(p + 1e-5):
  //   row A = {0.7, 0.0901, 0.0899, 0.12}: H = 0.9375, 0.3 e^-H = 0.1175 > eps, so the threshold is eps = 0.09;
  //   row B = {0.3, 0.25, 0.2, 0.15, 0.06, 0.04}: H = 1.6117, 0.3 e^-H = 0.0599 < eps: threshold 0.0599.
  struct Case {
    std::vector<float> p;
    Token draft;
    bool accepted;
  };
  const std::vector<Case> cases = {
      {{0.7f, 0.0901f, 0.0899f, 0.12f}, 1, true},            // just above eps
      {{0.7f, 0.0901f, 0.0899f, 0.12f}, 2, false},           // just below eps
      {{0.7f, 0.0901f, 0.0899f, 0.12f}, 3, true},            // above both eps and 0.1175
      {{0.3f, 0.25f, 0.2f, 0.15f, 0.06f, 0.04f}, 4, true},   // above 0.0599, below eps
      {{0.3f, 0.25f, 0.2f, 0.15f, 0.06f, 0.04f}, 5, false},  // below 0.0599
  };
  for (const bool mutant : {false, true}) {
    const ScopedMutant on(mutant ? Mutant::typical_threshold_max : Mutant::none);
    int32_t wrong = 0;
    for (const Case& c : cases) {
      const int32_t V = static_cast<int32_t>(c.p.size());
      std::vector<float> rows = c.p;  // the draft position's row, then the bonus row
      rows.insert(rows.end(), c.p.begin(), c.p.end());
      const VerifyOutcome out = verify_typical(rows.data(), one_token_chain(c.draft), V, StepRandom{7, 0, 0});
      wrong += (out.accepted == 1) != c.accepted;
      if (!mutant) {
        INFO("p(" << c.draft << ") = " << c.p[c.draft] << ", threshold " << typical_threshold(c.p));
        CHECK((out.accepted == 1) == c.accepted);
        CHECK(out.emitted.size() == (c.accepted ? 2u : 1u));
        if (c.accepted) CHECK(out.emitted[0] == c.draft);
      }
    }
    if (mutant) CHECK(wrong == 2);  // the max threshold (0.1175, 0.09) refuses 0.0901 in A and 0.06 in B
  }
}

TEST_CASE("Medusa typical acceptance's entropy keeps the reference's +1e-5 inside the log", "[verify][lossy]") {
  // Cai et al. 2024's implementation: H = -sum p log(p + 1e-5). On a row with a long tail of small
  // probabilities the offset moves H by about 0.01 nats (the tail's terms are near 1e-5 each), and delta is
  // chosen to put the draft's p between delta e^-H with and without the offset: only the reference formula
  // rejects it. The entropies are computed here in long double from the float row, independently.
  const int32_t V = 1001;
  std::vector<float> row(V, 0.5f / 1000.0f);
  row[0] = 0.5f;
  long double with_offset = 0.0L, plain = 0.0L;
  for (float p : row) {
    with_offset -= p * std::log(static_cast<long double>(p) + 1e-5L);
    plain -= p * std::log(static_cast<long double>(p));
  }
  REQUIRE(plain - with_offset > 0.005L);  // a window wide enough for float rounding to sit well inside
  TypicalAcceptance params;
  params.epsilon = 1.0;  // the threshold is delta e^-H
  const auto accepted = [&](long double h) {
    params.delta = static_cast<double>(row[0] * std::exp(h));  // threshold = p(draft) * e^(h - H)
    std::vector<float> rows = row;
    rows.insert(rows.end(), row.begin(), row.end());  // the draft position's row, then the bonus row
    return verify_typical(rows.data(), one_token_chain(0), V, StepRandom{7, 0, 0}, params).accepted == 1;
  };
  const long double middle = (with_offset + plain) / 2;
  CHECK_FALSE(accepted(middle));  // threshold p e^((H_plain - H) / 2) > p: rejected
  CHECK(accepted(with_offset - 0.001L));
  CHECK_FALSE(accepted(with_offset + 0.001L));
  const ScopedMutant on(Mutant::typical_entropy_without_offset);
  CHECK(accepted(middle));  // without the offset H = H_plain, and the threshold falls below p
}

TEST_CASE("tree metrics equal the counts derived from each step's accepted path", "[verify][tree]") {
  // A step of a depth-D tree offers D positions (acceptance_rate's denominator), whatever its node count; it
  // reaches position i when its first i positions were accepted (the per-position acceptance the plots show).
  // Both are derived here from the accepted path lengths alone, and the emitted tokens tie those lengths to the
  // output: every step emits its accepted path plus one token.
  const TablePair pair = random_pair(1, 8, 31, 1.5, 0.7);
  const auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, plain());
  GenerationConfig config = tree_config({3, 2, 1}, SiblingScheme::iid);
  config.max_new_tokens = 24;
  const int32_t depth = 3;
  const auto check_against_paths = [&](bool expect_equal) {
    GenerationMetrics m;
    const std::vector<SequenceOutput> outs =
        Generator(pair.target, plain(), drafter, config).generate_many(kPrompt, 0, 200, m);
    int64_t steps = 0, accepted = 0;
    std::vector<int64_t> reached(depth, 0), accepted_at(depth, 0), histogram(depth + 1, 0);
    for (const SequenceOutput& out : outs) {
      int64_t emitted = 0;
      for (int32_t a : out.accept_lengths) {
        ++steps;
        accepted += a;
        ++histogram[a];
        emitted += a + 1;
        for (int32_t i = 0; i < depth; ++i) {
          reached[i] += a >= i;
          accepted_at[i] += a > i;
        }
      }
      CHECK(emitted >= static_cast<int64_t>(out.tokens.size()));  // the last step may be cut at max_new_tokens
      CHECK(emitted - static_cast<int64_t>(out.tokens.size()) <= depth);
    }
    const bool equal = m.steps == steps && m.proposed == steps * depth && m.accepted == accepted &&
                       m.position_reached == reached && m.position_accepted == accepted_at &&
                       m.accepted_histogram == histogram;
    CHECK(equal == expect_equal);
    CHECK(reached[depth - 1] < steps);  // some steps stop early: a wrong "reached" would show
  };
  check_against_paths(true);
  for (Mutant mutant : {Mutant::tree_proposed_counts_nodes, Mutant::tree_reached_counts_every_depth}) {
    const ScopedMutant on(mutant);
    check_against_paths(false);
  }
}

// ---- Mutants: each realistic bug must fail the same law test that the correct code passes -------------

namespace {

struct MutantCase {
  Mutant mutant;
  const char* name;
  SamplingParams target, draft;
  GenerationConfig config;
};

SamplingParams draft_truncated() {
  SamplingParams s = plain();
  s.top_k = 2;
  return s;
}

std::vector<MutantCase> law_changing_mutants() {
  // K = 2 < L = 3, so bonus tokens appear in the output.
  const GenerationConfig chain2 = chain_config(VerifyMethod::chain, 2);
  SamplingParams peaked = plain();  // a cold draft: duplicate i.i.d. siblings are common
  peaked.temperature = 0.5f;
  return {
      {Mutant::accept_q_over_p, "accept with min(1, q/p)", plain(), plain(), chain2},
      {Mutant::residual_not_subtracted, "resample from p instead of the residual", plain(), plain(), chain2},
      {Mutant::residual_zero_draft_token, "residual = p with the draft token zeroed, real q", plain(), plain(), chain2},
      {Mutant::bonus_from_draft, "bonus token from the draft's row", plain(), plain(), chain2},
      {Mutant::penalties_ignore_draft_prefix, "target rows ignore the draft prefix", penalties(), penalties(), chain2},
      {Mutant::uniform_shared_accept_residual, "one uniform for accept and residual", plain(), plain(), chain2},
      {Mutant::uniform_closed_at_zero, "u in [0, 1) accepts forbidden tokens", truncating(), plain(), chain2},
      {Mutant::draft_q_from_raw_logits, "q recorded from raw logits", plain(), draft_truncated(), chain2},
      {Mutant::block_tokenwise_residual, "block verification with the token-wise residual", plain(), plain(),
       chain_config(VerifyMethod::block, 3)},
      {Mutant::tree_merge_duplicate_siblings, "duplicate i.i.d. siblings merged", plain(), peaked,
       tree_config({4, 1}, SiblingScheme::iid)},
      {Mutant::tree_prune_stochastic_by_q, "stochastic siblings pruned by q, tested with p/q", plain(), plain(),
       tree_config({2, 2}, SiblingScheme::iid)},
      {Mutant::penalties_ignore_draft_prefix, "tree rows ignore their path", penalties(), penalties(),
       tree_config({2, 2}, SiblingScheme::without_replacement)},
      {Mutant::stop_checked_per_step, "tokens after a stop token kept to the end of the step", stopping(), stopping(),
       chain2},
  };
}

}  // namespace

TEST_CASE("every law-changing verifier mutant fails the exact-law test", "[verify][mutant]") {
  // A pair with moderate acceptance so that rejections, residuals and bonus tokens all occur often; the
  // draft is flatter than the target so q > p somewhere (min(1, q/p) differs from min(1, p/q)).
  const TablePair pair = random_pair(1, kV, 21, 1.6, 1.2);
  for (const MutantCase& m : law_changing_mutants()) {
    INFO("mutant: " << m.name << " / " << describe(m.config));
    {
      const LawCheck correct = check_law(pair, m.target, m.draft, m.config, 60000);
      INFO("correct code: " << correct.gof.detail);
      REQUIRE(correct.gof.passed(stats::kAlpha));
    }
    const ScopedMutant on(m.mutant);
    const LawCheck broken = check_law(pair, m.target, m.draft, m.config, 60000);
    INFO("mutant: " << broken.gof.detail);
    CHECK_FALSE(broken.gof.passed(stats::kAlpha));
  }
}

// ---- Efficiency: exact expectations on closed-form models --------------------------------------------
// Some bugs leave the law unchanged (a missing bonus token) and are caught only by comparing measured
// counts with their exact expectation (tests/TESTING.md). On an order-1 table with a history-free pipeline the
// processed p(.|a), q(.|a) depend on the last token only, so the number of verification steps needed
// for L tokens follows from a dynamic program over (tokens emitted so far, last token).

namespace {

using Rows = std::vector<std::vector<double>>;  // [V][V]: row a = processed law after token a

Rows processed_rows(const TableModel& model, const SamplingParams& params) {
  const SamplerPipeline pipeline(params, model.vocab_size());
  Rows rows(model.vocab_size());
  for (Token a = 0; a < model.vocab_size(); ++a) {
    const std::vector<float> p =
        pipeline.process(std::vector<float>(model.row_after({a}), model.row_after({a}) + model.vocab_size()), {});
    rows[a].assign(p.begin(), p.end());
  }
  return rows;
}

struct ChainExpectation {
  double steps = 0.0;     // E[verification steps per sequence]
  double accepted = 0.0;  // E[accepted draft tokens per sequence]
};

// Token-wise chain verification with K drafts from `first` until L tokens are out (Leviathan et al. 2023:
// draft x at a position ending in c is accepted with min(p, q)(x); on rejection y ~ (p - q)+).
ChainExpectation expected_chain_run(const Rows& p, const Rows& q, int32_t K, int32_t L, Token first, bool bonus) {
  const int32_t V = static_cast<int32_t>(p.size());
  std::vector<std::vector<double>> mass(L + K + 2, std::vector<double>(V, 0.0));
  mass[0][first] = 1.0;
  ChainExpectation e;
  for (int32_t n = 0; n < L; ++n) {
    for (Token a = 0; a < V; ++a) {
      if (mass[n][a] == 0.0) continue;
      e.steps += mass[n][a];
      // Walk every accepted draft prefix (x_1..x_i) with its probability.
      std::function<void(Token, int32_t, double)> walk = [&](Token c, int32_t i, double prob) {
        if (i == K) {
          e.accepted += prob * K;
          if (bonus)
            for (Token b = 0; b < V; ++b) mass[n + K + 1][b] += prob * p[c][b];
          else
            mass[n + K][c] += prob;
          return;
        }
        for (Token y = 0; y < V; ++y) {
          const double r = std::max(p[c][y] - q[c][y], 0.0);
          mass[n + i + 1][y] += prob * r;
          e.accepted += prob * r * i;
        }
        for (Token x = 0; x < V; ++x) {
          const double a_x = std::min(p[c][x], q[c][x]);
          if (a_x > 0.0) walk(x, i + 1, prob * a_x);
        }
      };
      walk(a, 0, mass[n][a]);
    }
  }
  return e;
}

// E[accepted drafts in one step from context ending in `first`]: token-wise = sum_i E[prod_{j<=i} min(1,
// p_j/q_j)], block = sum_i E[w_i] with w_i = min(1, w_{i-1} p_i/q_i) (Sun et al. 2025, proof of Thm. 2).
std::pair<double, double> expected_first_step(const Rows& p, const Rows& q, int32_t K, Token first) {
  const int32_t V = static_cast<int32_t>(p.size());
  double tokenwise = 0.0, block = 0.0;
  std::function<void(Token, int32_t, double, double, double)> walk = [&](Token c, int32_t i, double prob, double tw,
                                                                         double w) {
    if (i > 0) {
      tokenwise += prob * tw;
      block += prob * w;
    }
    if (i == K) return;
    for (Token x = 0; x < V; ++x)
      if (q[c][x] > 0.0)
        walk(x, i + 1, prob * q[c][x], tw * std::min(1.0, p[c][x] / q[c][x]), std::min(1.0, w * p[c][x] / q[c][x]));
  };
  walk(first, 0, 1.0, 1.0, 1.0);
  return {tokenwise, block};
}

double mean_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double sd_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0.0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (v.size() - 1));
}

}  // namespace

TEST_CASE("target calls and acceptance match their exact expectation", "[verify][theory]") {
  const TablePair pair = random_pair(1, kV, 31, 1.4, 0.9);
  const Rows p = processed_rows(*pair.target, plain());
  const Rows q = processed_rows(*pair.draft, plain());
  const int32_t L = 10;
  const int64_t N = 40000;
  for (int32_t K : {1, 2, 3}) {
    INFO("K = " << K);
    GenerationConfig config = chain_config(VerifyMethod::chain, K);
    config.max_new_tokens = L;
    const Generator generator(pair.target, plain(), std::make_shared<ModelDrafterFactory>(pair.draft, plain()), config);
    auto measure = [&](bool bonus_missing) {
      std::optional<ScopedMutant> mutant;
      if (bonus_missing) mutant.emplace(Mutant::bonus_missing);
      GenerationMetrics metrics;
      const std::vector<SequenceOutput> out = generator.generate_many({kPrompt.back()}, 0, N, metrics);
      std::vector<double> steps, ratio_terms;
      for (const SequenceOutput& s : out) steps.push_back(static_cast<double>(s.accept_lengths.size()));
      return std::make_pair(steps, metrics);
    };
    const ChainExpectation exact = expected_chain_run(p, q, K, L, kPrompt.back(), true);
    const auto [steps, metrics] = measure(false);
    const double z_steps = stats::z_score(mean_of(steps), sd_of(steps), N, exact.steps);
    INFO("steps per sequence: measured " << mean_of(steps) << ", exact " << exact.steps << ", z = " << z_steps);
    CHECK(stats::normal_two_sided_p(z_steps) >= stats::kAlpha);
    // Acceptance rate = accepted / proposed, a ratio of sums: compare with the ratio of expectations
    // using the delta-method standard error.
    const double exact_rate = exact.accepted / (K * exact.steps);
    CHECK(metrics.acceptance_rate() ==
          Approx(exact_rate).margin(6 * std::sqrt(exact_rate * (1 - exact_rate) / metrics.proposed)));

    // The missing-bonus mutant leaves the law intact but needs more target calls.
    const ChainExpectation exact_without_bonus = expected_chain_run(p, q, K, L, kPrompt.back(), false);
    REQUIRE(exact_without_bonus.steps > exact.steps + 0.1);
    const auto [broken_steps, broken_metrics] = measure(true);
    const double z_broken = stats::z_score(mean_of(broken_steps), sd_of(broken_steps), N, exact.steps);
    INFO("with the missing-bonus mutant: measured " << mean_of(broken_steps) << ", z = " << z_broken);
    CHECK(stats::normal_two_sided_p(z_broken) < stats::kAlpha);
  }
}

TEST_CASE("block verification accepts at least as much as token-wise, as theory predicts", "[verify][theory]") {
  const TablePair pair = random_pair(1, kV, 32, 1.4, 1.0);
  const Rows p = processed_rows(*pair.target, plain());
  const Rows q = processed_rows(*pair.draft, plain());
  const int64_t N = 60000;
  for (int32_t K : {2, 3, 4}) {
    const auto [exact_chain, exact_block] = expected_first_step(p, q, K, kPrompt.back());
    INFO("K = " << K << ": exact accepted per step, token-wise " << exact_chain << ", block " << exact_block);
    CHECK(exact_block >= exact_chain);
    for (VerifyMethod method : {VerifyMethod::chain, VerifyMethod::block}) {
      GenerationConfig config = chain_config(method, K);
      config.max_new_tokens = 1;  // one verification step per sequence
      const Generator generator(pair.target, plain(), std::make_shared<ModelDrafterFactory>(pair.draft, plain()),
                                config);
      GenerationMetrics metrics;
      std::vector<double> accepted;
      for (const SequenceOutput& s : generator.generate_many({kPrompt.back()}, 0, N, metrics))
        accepted.push_back(s.accept_lengths.at(0));
      const double exact = method == VerifyMethod::block ? exact_block : exact_chain;
      const double z = stats::z_score(mean_of(accepted), sd_of(accepted), N, exact);
      INFO(verify_method_name(method) << ": measured " << mean_of(accepted) << ", z = " << z);
      CHECK(stats::normal_two_sided_p(z) >= stats::kAlpha);
    }
  }
}

// ---- Long sequences: the martingale transition test (tests/TESTING.md battery F) ------------------------------
// V = 16 and L = 8 are too many continuations to enumerate, so every emitted token is tested against its
// exact conditional law given the emitted prefix, stratified by (position, last two tokens). Only the law
// given the emitted prefix is guaranteed, so nothing verifier-internal enters the strata.

TEST_CASE("long speculative sequences follow the target's conditional laws", "[verify][exact][long]") {
  constexpr int32_t V = 16, L = 8;
  const TablePair pair = random_pair(2, V, 41, 1.5, 0.9);
  const std::vector<Token> prompt = {3, 7};
  struct Case {
    const char* name;
    SamplingParams params;
    GenerationConfig config;
  };
  GenerationConfig chain4 = chain_config(VerifyMethod::chain, 4), block4 = chain_config(VerifyMethod::block, 4),
                   tree = tree_config({3, 2, 1}, SiblingScheme::without_replacement);
  GenerationConfig moving = chain_config(VerifyMethod::chain, 4);  // K from 4 down to 1 and back (draft_schedule.h)
  moving.num_draft_tokens_schedule = DraftSchedule::heuristic;
  GenerationConfig doubting = chain_config(VerifyMethod::chain, 4);  // stops after a draft q gave < 0.3, keeping it
  doubting.confidence_threshold = 0.3;
  GenerationConfig doubting_block = chain_config(VerifyMethod::block, 4);
  doubting_block.confidence_threshold = 0.3;
  const std::vector<Case> cases = {
      {"full pipeline, chain K=4", full_pipeline(), chain4},
      {"full pipeline, block K=4", full_pipeline(), block4},
      {"exotic pipeline, tree 3,2,1", exotic_pipeline(), tree},
      {"full pipeline, chain K=4 under the heuristic schedule", full_pipeline(), moving},
      {"full pipeline, chain K=4 stopping on doubt below 0.3", full_pipeline(), doubting},
      {"full pipeline, block K=4 stopping on doubt below 0.3", full_pipeline(), doubting_block}};
  for (Case c : cases) {
    INFO(c.name);
    c.config.max_new_tokens = L;
    const Generator generator(pair.target, c.params, std::make_shared<ModelDrafterFactory>(pair.draft, c.params),
                              c.config);
    auto transition_test = [&] {
      GenerationMetrics metrics;
      const std::vector<SequenceOutput> out = generator.generate_many(prompt, 0, 30000, metrics);
      stats::TransitionTest test(V);
      std::vector<float> probs(V);
      std::vector<double> law(V);
      for (const SequenceOutput& s : out) {
        std::vector<Token> context = prompt;
        TokenHistory history{prompt, {}, std::nan("")};
        // A sequence ends at its first stop token: each position it reached is one draw from its row.
        REQUIRE((s.tokens.size() == static_cast<size_t>(L) || s.stop_reason == StopReason::stop));
        for (int32_t t = 0; t < static_cast<int32_t>(s.tokens.size()); ++t) {
          generator.target_pipeline().process(pair.target->row_after(context), history, probs.data());
          for (int32_t x = 0; x < V; ++x) law[x] = probs[x];
          double total = 0;
          for (double v : law) total += v;
          for (double& v : law) v /= total;
          const int64_t stratum = (static_cast<int64_t>(t) * V + context[context.size() - 2]) * V + context.back();
          test.add(stratum, s.tokens[t], law);
          history = generator.target_pipeline().advance(history, s.tokens[t], probs.data());
          context.push_back(s.tokens[t]);
        }
      }
      return test.result();
    };
    const stats::GofResult correct = transition_test();
    INFO(correct.detail);
    CHECK(correct.passed(stats::kAlpha));
    {  // The same test catches penalties that ignore the draft prefix.
      const ScopedMutant on(Mutant::penalties_ignore_draft_prefix);
      const stats::GofResult broken = transition_test();
      INFO("mutant: " << broken.detail);
      CHECK_FALSE(broken.passed(stats::kAlpha));
    }
    if (c.config.num_draft_tokens_schedule != DraftSchedule::constant) {
      // A draft length must be decided before the draws: one read off them (the chain cut before its first token the
      // draft drew with probability < 0.3) is caught.
      const ScopedMutant on(Mutant::draft_cut_at_unlikely_token);
      const stats::GofResult broken = transition_test();
      INFO("mutant draft_cut_at_unlikely_token: " << broken.detail);
      CHECK_FALSE(broken.passed(stats::kAlpha));
    }
    if (c.config.confidence_threshold > 0.0) {
      // The chains did stop early, and not always at their first draft.
      GenerationMetrics m;
      generator.generate_many(prompt, 0, 500, m);
      CHECK(m.proposed < 4 * m.steps);
      CHECK(m.proposed > m.steps);
      // A stop that drops the draft it doubts decides by that draft: caught.
      const ScopedMutant on(Mutant::confidence_stop_drops_draft);
      const stats::GofResult broken = transition_test();
      INFO("mutant confidence_stop_drops_draft: " << broken.detail);
      CHECK_FALSE(broken.passed(stats::kAlpha));
    }
  }
}

// ---- Determinism (tests/TESTING.md battery H) ------------------------------------------------------------------
TEST_CASE("outputs depend only on (seed, sequence): not on threads or batch composition", "[verify][determinism]") {
  const TablePair pair = random_pair(2, 8, 51, 1.2, 0.9);
  GenerationConfig config = tree_config({2, 2}, SiblingScheme::iid);
  config.max_new_tokens = 10;
  const Generator generator(pair.target, full_pipeline(),
                            std::make_shared<ModelDrafterFactory>(pair.draft, full_pipeline()), config);
  GenerationMetrics m;
  omp_set_num_threads(1);
  const std::vector<SequenceOutput> serial = generator.generate_many(kPrompt, 0, 64, m);
  omp_set_num_threads(2);
  const std::vector<SequenceOutput> parallel = generator.generate_many(kPrompt, 0, 64, m);
  const std::vector<SequenceOutput> shifted = generator.generate_many(kPrompt, 32, 32, m);  // a different batch
  for (size_t n = 0; n < 64; ++n) {
    CHECK(serial[n].tokens == parallel[n].tokens);
    CHECK(serial[n].accept_lengths == parallel[n].accept_lengths);
    if (n >= 32) CHECK(shifted[n - 32].tokens == serial[n].tokens);
  }
  // A different seed gives different outputs.
  GenerationConfig reseeded = config;
  reseeded.seed += 1;
  const Generator other(pair.target, full_pipeline(),
                        std::make_shared<ModelDrafterFactory>(pair.draft, full_pipeline()), reseeded);
  int differing = 0;
  for (size_t n = 0; n < 16; ++n) differing += other.generate(kPrompt, n, m).tokens != serial[n].tokens;
  CHECK(differing > 8);
}

// ---- The batched device path (--device cuda-host): the CUDA kernels' row code with block semantics --------
//
// The same Generator, with every step of every sequence sampled (fused sampler) and verified (chain, block,
// tree kernels) in one emulated launch per step over the whole batch: buffer layouts, row offsets, per-row
// q, dispatch widths. The law of whole continuations is G-tested against the enumerated target law, and the
// same seeds give the CPU path's sequences token for token (the draws are the same Philox keys; only float64
// summation order differs, which moves a draw with probability ~1e-11).

namespace {

GenerationConfig on_device(GenerationConfig c, int threads = 8, FiberSchedule schedule = FiberSchedule::forward,
                           int ctas = 1, RowExchange exchange = RowExchange::automatic) {
  c.device = Device::cuda_host;
  c.emulation = EmulationOptions{threads, schedule, ctas, exchange};
  return c;
}

// The pipelines the fused sampler implements: masks, bias, penalties, temperature, min-p, top-k, top-p, stops.
const std::vector<Named> kDevicePipelines = {
    {"truncating", truncating()}, {"penalties", penalties()}, {"stopping", stopping()}};

const std::vector<GenerationConfig>& device_methods() {
  static const std::vector<GenerationConfig> methods = {
      chain_config(VerifyMethod::chain, 2),
      chain_config(VerifyMethod::block, 3),
      tree_config({2, 2}, SiblingScheme::iid),
      tree_config({2, 1, 1}, SiblingScheme::without_replacement),
      tree_config({3, 1}, SiblingScheme::deterministic),
  };
  return methods;
}

}  // namespace

TEST_CASE("on cuda-host every exact verifier reproduces the target's law of whole continuations",
          "[verify][exact][device]") {
  // Block emulation costs ~20 us per row, so the battery here is one pipeline that uses every stage the
  // fused sampler has (top-k, penalties over the draft prefix, stop tokens) with each method; the other
  // pipelines are covered by the token-for-token comparison with the CPU path below.
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  for (const Named& pipeline : {Named{"stopping", stopping()}})
    for (const GenerationConfig& config : device_methods()) {
      INFO(pipeline.name << " / cuda-host " << describe(config));
      const LawCheck c = check_law(pair, pipeline.params, pipeline.params, on_device(config, 4), 20000);
      INFO(c.gof.detail);
      CHECK(c.gof.passed(stats::kAlpha));
      CHECK(c.run.metrics.q_zero_errors == 0);
    }
}

// A chain that may stop on the draft's doubt, drawn on the device at K and cut there by its drafts' probabilities under
// the laws the device keeps (ModelDrafterFactory::draws_on_device): the target's law of whole continuations, chain and
// block, every step drawn on the device; a cut that drops the doubted draft is caught.
TEST_CASE("on cuda-host a chain cut after the draft's doubt keeps the target's law", "[verify][exact][device]") {
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  for (const VerifyMethod method : {VerifyMethod::chain, VerifyMethod::block}) {
    GenerationConfig config = on_device(chain_config(method, 3), 4);
    config.confidence_threshold = 0.45;
    INFO("cuda-host " << describe(config) << " stopping on doubt below 0.45");
    const auto law_check = [&](GenerationMetrics* metrics = nullptr) {
      const auto drafter = std::make_shared<MixedKSeen>(pair.draft, stopping());
      const Generator generator(pair.target, stopping(), drafter, config);
      const RunResult run = run_generator(generator, kPrompt, 20000, kV);
      // (a table model does not batch its forwards: its proposals reach propose_batch only when drawn on the device)
      REQUIRE(drafter->counts.steps > 0);
      CHECK(drafter->counts.steps_on_device == drafter->counts.steps);
      if (metrics) *metrics = run.metrics;
      return stats::g_test(
          run.counts, exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, config.max_new_tokens));
    };
    GenerationMetrics m;
    const stats::GofResult correct = law_check(&m);
    INFO(correct.detail);
    CHECK(correct.passed(stats::kAlpha));
    CHECK(m.proposed < 3 * m.steps);  // the chains stopped on their doubt
    CHECK(m.proposed > m.steps);      // and not always at their first draft
    const ScopedMutant on(Mutant::confidence_stop_drops_draft);
    const stats::GofResult broken = law_check();
    INFO("mutant confidence_stop_drops_draft: " << broken.detail);
    CHECK_FALSE(broken.passed(stats::kAlpha));
  }
}

TEST_CASE("on cuda-host with every row split over a cluster, the verifiers keep the target's law",
          "[verify][exact][device][cluster]") {
  // The fused sampler and the verification kernels with each row over 3 emulated blocks (slices of 2 tokens), through
  // a cluster's shared memory and through global memory.
  const TablePair pair = random_pair(2, kV, 17, 1.2, 0.8);
  // A tree: the fused sampler and the tree kernel (the emulated kernel batteries cover chain and block).
  for (const GenerationConfig& config : {tree_config({2, 2}, SiblingScheme::iid)})
    for (RowExchange exchange : {RowExchange::automatic, RowExchange::global_memory}) {
      INFO("cuda-host, 3 blocks per row, " << row_exchange_name(exchange) << ", " << describe(config));
      const LawCheck c =
          check_law(pair, stopping(), stopping(), on_device(config, 4, FiberSchedule::rotating, 3, exchange), 20000);
      INFO(c.gof.detail);
      CHECK(c.gof.passed(stats::kAlpha));
    }
}

namespace {

// A table model whose sessions claim `bytes` each, on the host or on the device: what the batch bounds read.
class HeavySessions : public TableModel {
 public:
  HeavySessions(const TableModel& model, int64_t bytes, bool on_device)
      : TableModel(model), bytes_(bytes), on_device_(on_device) {}
  int64_t session_bytes() const override { return bytes_; }
  bool sessions_in_device_memory() const override { return on_device_; }

 private:
  int64_t bytes_;
  bool on_device_;
};

}  // namespace

TEST_CASE("a lockstep batch whose sessions cannot fit is refused before any step, naming the memory",
          "[verify][device]") {
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  const int64_t huge = int64_t{1} << 50;  // a PiB per session
  GenerationConfig config = chain_config(VerifyMethod::chain, 2);
  config.lockstep = true;
  const auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, stopping());
  const auto run = [&](bool on_device_memory, const GenerationConfig& c) {
    const Generator g(std::make_shared<HeavySessions>(*pair.target, huge, on_device_memory), stopping(), drafter, c);
    GenerationMetrics m;
    return g.generate_many(kPrompt, 0, 4, m);
  };
  // On the host (the CPU, or a device whose model stays on the host): MemAvailable bounds them.
  CHECK_THROWS_WITH(run(false, config), Catch::Contains("MiB of target sessions") && Catch::Contains("MemAvailable"));
  CHECK_THROWS_WITH(run(false, on_device(config)), Catch::Contains("MemAvailable"));
  // On the device: its free memory bounds them with the step buffers.
  CHECK_THROWS_WITH(run(true, on_device(config)),
                    Catch::Contains("bytes of model sessions (KV caches)") && Catch::Contains("are free"));
  // Sessions that fit are no obstacle.
  const Generator fits(std::make_shared<HeavySessions>(*pair.target, 1 << 20, true), stopping(), drafter,
                       on_device(config));
  GenerationMetrics m;
  CHECK(fits.generate_many(kPrompt, 0, 4, m).size() == 4);
}

namespace {

// Chains as long as the prompt less one (at most K), of point masses: prompts of different lengths give the sequences
// of a lockstep batch calls of different rows at every step.
class PromptLengthDrafter : public Drafter {
 public:
  std::string name() const override { return "prompt-length"; }
  void begin(const std::vector<Token>& prompt) override { length_ = static_cast<int32_t>(prompt.size()) - 1; }
  TokenTree propose(const DraftRequest& r) override {
    return TokenTree::chain(std::vector<Token>(static_cast<size_t>(std::min(length_, r.num_draft_tokens)), 1));
  }

 private:
  int32_t length_ = 0;
};

class PromptLengthDrafterFactory : public DrafterFactory {
 public:
  std::unique_ptr<Drafter> create() const override { return std::make_unique<PromptLengthDrafter>(); }
  int32_t vocab_size() const override { return kV; }
  std::string description() const override { return "prompt-length"; }
};

}  // namespace

TEST_CASE("a lockstep step counts, for every sequence in it, the rows of its widest call", "[verify][device]") {
  const TablePair pair = random_pair(2, kV, 19, 1.2, 0.8);
  GenerationConfig config = chain_config(VerifyMethod::chain, 3);
  config.max_new_tokens = 12;
  // Rows a call: 2, 3 and 4 (K = 3).
  const std::vector<std::vector<Token>> prompts = {{1, 2}, {1, 2, 3}, {1, 2, 3, 4, 5}};
  const std::vector<int64_t> own_rows = {2, 3, 4};
  std::vector<const std::vector<Token>*> pointers;
  for (const auto& p : prompts) pointers.push_back(&p);
  const auto drafter = std::make_shared<PromptLengthDrafterFactory>();
  for (const bool device : {false, true}) {
    GenerationConfig c = config;
    c.lockstep = true;
    if (device) c = on_device(c);
    std::vector<GenerationMetrics> metrics(prompts.size());
    Generator(pair.target, plain(), drafter, c).generate_batch(pointers, {0, 1, 2}, metrics);
    // Every sequence is active from the first step until its last, so at step t the widest call is the widest of the
    // sequences that take more than t steps.
    for (size_t i = 0; i < prompts.size(); ++i) {
      INFO((device ? "cuda-host" : "cpu") << ", sequence " << i << ": " << metrics[i].steps << " steps");
      std::vector<int64_t> own(own_rows[i] + 1, 0), widest(5, 0);
      own[own_rows[i]] = metrics[i].steps;
      for (int64_t t = 0; t < metrics[i].steps; ++t) {
        int64_t w = 0;
        for (size_t j = 0; j < prompts.size(); ++j)
          if (metrics[j].steps > t) w = std::max(w, own_rows[j]);
        ++widest[w];
      }
      while (widest.back() == 0) widest.pop_back();
      CHECK(metrics[i].verify_rows_histogram == own);
      CHECK(metrics[i].lockstep_rows_histogram == widest);
    }
    CHECK(metrics[0].lockstep_rows_histogram != metrics[0].verify_rows_histogram);  // the test has padding to see
  }
  // Decoded one by one: no lockstep steps.
  std::vector<GenerationMetrics> alone(prompts.size());
  Generator(pair.target, plain(), drafter, config).generate_batch(pointers, {0, 1, 2}, alone);
  for (const GenerationMetrics& m : alone) CHECK(m.lockstep_rows_histogram.empty());
}

namespace {

// A table model that takes a step's calls together and records where each call's rows were to go.
class RecordsOuts : public TableModel {
 public:
  struct Out {
    const float* out = nullptr;
    bool on_gpu = false;
    int64_t rows = 0;
    int64_t deepest = 0;  // the call's nodes at its tree's greatest depth (1, row 0, for no tree)
  };
  explicit RecordsOuts(const TableModel& model) : TableModel(model) {}
  bool batches_forwards() const override { return true; }
  void batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const override {
    std::vector<Out>& batch = batches.emplace_back();
    for (const TreeLogitsCall& c : calls) {
      const TokenTree& t = *c.tree;
      int64_t deepest = t.size() == 0;
      for (int32_t j = 0; j < t.size(); ++j) deepest += t.depth(j) == t.max_depth();
      batch.push_back(Out{c.out, c.out_on_gpu, c.rows(), deepest});
    }
    LanguageModel::batch_tree_logits(calls);  // each call's rows as its session writes them
  }
  mutable std::vector<std::vector<Out>> batches;  // every batch_tree_logits call (one thread calls them)
};

}  // namespace

TEST_CASE("on cuda-host a step's target rows go straight into the verifier's buffer, deciding as on the CPU",
          "[verify][device]") {
  const TablePair pair = random_pair(2, kV, 23, 1.2, 0.8);
  std::vector<GenerationConfig> configs = {chain_config(VerifyMethod::chain, 3),
                                           tree_config({2, 2}, SiblingScheme::without_replacement), GenerationConfig{}};
  for (GenerationConfig config : configs) {
    config.max_new_tokens = 8;
    INFO(describe(config));
    const auto drafter = config.method ? std::make_shared<ModelDrafterFactory>(pair.draft, stopping()) : nullptr;
    const auto model = std::make_shared<RecordsOuts>(*pair.target);
    GenerationMetrics m1, m2;
    const std::vector<SequenceOutput> cpu =
        Generator(pair.target, stopping(), drafter, config).generate_many(kPrompt, 0, 16, m1);
    const std::vector<SequenceOutput> device =
        Generator(model, stopping(), drafter, on_device(config)).generate_many(kPrompt, 0, 16, m2);
    REQUIRE(cpu.size() == device.size());
    for (size_t n = 0; n < cpu.size(); ++n) {
      CHECK(cpu[n].tokens == device[n].tokens);
      CHECK(cpu[n].accept_lengths == device[n].accept_lengths);
    }
    // Every step's calls write consecutive rows of one buffer, the kernels' (host memory on cuda-host, so never
    // "on the GPU"); the prompts' prefill of a speculative method is the first batch, into the host's vectors.
    REQUIRE(model->batches.size() >= 3);
    for (size_t b = config.method ? 1 : 0; b < model->batches.size(); ++b) {
      const std::vector<RecordsOuts::Out>& batch = model->batches[b];
      for (size_t k = 0; k < batch.size(); ++k) {
        CHECK_FALSE(batch[k].on_gpu);
        if (k + 1 < batch.size()) CHECK(batch[k + 1].out == batch[k].out + batch[k].rows * kV);
      }
    }
  }
}

TEST_CASE("on cuda-host the baseline samples the target's law", "[verify][exact][device]") {
  const TablePair pair = random_pair(2, kV, 13, 1.2, 0.8);
  GenerationConfig ar;
  ar.max_new_tokens = kL;
  ar.seed = 5;
  const Generator generator(pair.target, penalties(), nullptr, on_device(ar));
  const RunResult r = run_generator(generator, kPrompt, 30000, kV);
  const stats::GofResult gof =
      stats::g_test(r.counts, exact_sequence_law(*pair.target, generator.target_pipeline(), kPrompt, kL));
  INFO(gof.detail);
  CHECK(gof.passed(stats::kAlpha));
}

TEST_CASE("on cuda-host the same seeds give the CPU path's sequences and counters", "[verify][device]") {
  const TablePair pair = random_pair(2, kV, 21, 1.2, 0.8);
  std::vector<GenerationConfig> configs = device_methods();
  configs.push_back(chain_config(VerifyMethod::chain, 4));
  configs.push_back(tree_config({2, 2}, SiblingScheme::without_replacement));
  configs.push_back(tree_config({2, 2}, SiblingScheme::deterministic));
  // i.i.d. trees drawn on the device whose later children's scratch rows are rewritten by a depth of one child, or
  // left as leaves' rows.
  configs.push_back(tree_config({3, 1}, SiblingScheme::iid));
  configs.push_back(tree_config({1, 2, 2}, SiblingScheme::iid));
  configs.push_back(GenerationConfig{});  // ar
  configs.back().max_new_tokens = kL;
  int32_t case_number = 0;
  for (const Named& pipeline : kDevicePipelines)
    for (GenerationConfig config : configs) {
      config.max_new_tokens = 8;
      const int threads = ++case_number % 2 ? 4 : 32;  // both block sizes, alternating over the cases
      const int ctas = case_number % 3 == 0 ? 3 : 1;   // and every third case's rows over a cluster of 3 blocks,
      // every other one of those exchanging through global memory
      const RowExchange exchange = case_number % 6 == 0 ? RowExchange::global_memory : RowExchange::automatic;
      auto drafter = config.method ? std::make_shared<ModelDrafterFactory>(pair.draft, pipeline.params) : nullptr;
      GenerationMetrics cpu_metrics, device_metrics;
      const std::vector<SequenceOutput> cpu =
          Generator(pair.target, pipeline.params, drafter, config).generate_many(kPrompt, 0, 200, cpu_metrics);
      const Generator device(pair.target, pipeline.params, drafter,
                             on_device(config, threads, FiberSchedule::rotating, ctas, exchange));
      const std::vector<SequenceOutput> out = device.generate_many(kPrompt, 0, 200, device_metrics);
      INFO(pipeline.name << " / " << describe(config) << " / " << threads << " threads, " << ctas << " blocks, "
                         << row_exchange_name(exchange));
      int64_t differing = 0;
      for (size_t n = 0; n < out.size(); ++n)
        differing += out[n].tokens != cpu[n].tokens || out[n].stop_reason != cpu[n].stop_reason ||
                     out[n].accept_lengths != cpu[n].accept_lengths;
      CHECK(differing == 0);
      CHECK(device_metrics.steps == cpu_metrics.steps);
      CHECK(device_metrics.accepted == cpu_metrics.accepted);
      CHECK(device_metrics.position_reached == cpu_metrics.position_reached);
      CHECK(device_metrics.expected_acceptance_count == cpu_metrics.expected_acceptance_count);
      // sum_x min(p, q) over the device's processed rows, whose softmax (expf, float64 normaliser) is within
      // ~4e-7 of the CPU pipeline's per probability (README, "When do CPU and device draws differ?").
      CHECK(device_metrics.expected_acceptance_sum == Approx(cpu_metrics.expected_acceptance_sum).epsilon(1e-6));
    }
}

// A draft model's ranked trees are chosen on the device (BatchVerifier::rank_drafts), not on the host: the kernel's
// mutant, which skips the tokens tied with the child before, changes what cuda-host generates. Ranked candidates are
// verified as point masses, so no law test can see the ranking; the CPU's sequences can. Truncation leaves a row fewer
// positive tokens than children, so its later children are zeros, tied.
TEST_CASE("on cuda-host a draft model's ranked trees are chosen by the device's kernel", "[verify][device][mutant]") {
  const TablePair pair = random_pair(2, kV, 21, 1.2, 0.8);
  GenerationConfig config = tree_config({3, 1}, SiblingScheme::deterministic);
  config.max_new_tokens = 8;
  auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, truncating());
  GenerationMetrics cpu_metrics;
  const std::vector<SequenceOutput> cpu =
      Generator(pair.target, truncating(), drafter, config).generate_many(kPrompt, 0, 50, cpu_metrics);
  // A node asking for more children than V has (the CPU ranks all V) is ranked on the host, as before.
  GenerationConfig wide = tree_config({kV + 2, 1}, SiblingScheme::deterministic);
  wide.max_new_tokens = 6;
  GenerationMetrics m1, m2;
  const auto wide_cpu = Generator(pair.target, truncating(), drafter, wide).generate_many(kPrompt, 0, 20, m1);
  const auto wide_device =
      Generator(pair.target, truncating(), drafter, on_device(wide)).generate_many(kPrompt, 0, 20, m2);
  for (size_t n = 0; n < wide_cpu.size(); ++n) CHECK(wide_device[n].tokens == wide_cpu[n].tokens);
  const ScopedMutant on(Mutant::ranked_children_skip_ties);
  bool caught = false;
  try {
    GenerationMetrics metrics;
    const std::vector<SequenceOutput> out =
        Generator(pair.target, truncating(), drafter, on_device(config)).generate_many(kPrompt, 0, 50, metrics);
    for (size_t n = 0; n < out.size(); ++n) caught = caught || out[n].tokens != cpu[n].tokens;
  } catch (const Error& e) {
    INFO(e.what());
    CHECK_THAT(e.what(), Catch::Contains("not a token"));
    caught = true;
  }
  CHECK(caught);
}

// One proposal of a draft model's trees for several sequences, drawn on cuda-host in one batch and on the CPU one by
// one: the same trees, node for node. Truncation (top-k 4, top-p 0.9, min-p) leaves many rows fewer positive tokens
// than 3 siblings, so trees drawn without replacement come out smaller than full, differently in each sequence, and a
// row's spent draw moves the keys of the rows and the depth after it.
TEST_CASE("a draft model's trees drawn on cuda-host are the CPU's, node for node, short ones included",
          "[verify][device]") {
  const TablePair pair = random_pair(2, kV, 29, 1.2, 0.8);
  const SamplerPipeline target(truncating(), kV);
  const auto draft = std::make_shared<RecordsOuts>(*pair.draft);
  const ModelDrafterFactory factory(draft, truncating());
  int64_t short_trees = 0;
  for (SiblingScheme scheme : {SiblingScheme::without_replacement, SiblingScheme::iid, SiblingScheme::deterministic}) {
    BatchVerifier device(Device::cuda_host, target, VerifyMethod::tree);
    const std::vector<int32_t> shape = {3, 2, 1};
    const size_t full = tree_shape_nodes(shape);
    for (uint64_t step = 0; step < 6; ++step) {
      std::vector<std::vector<Token>> contexts;
      std::vector<TokenHistory> histories;
      for (Token a = 0; a < kV; ++a) {
        contexts.push_back({static_cast<Token>((a + step) % kV), a, static_cast<Token>((2 * a + 1) % kV)});
        histories.push_back(TokenHistory{contexts.back(), {}});
      }
      std::vector<std::unique_ptr<Drafter>> owned;
      std::vector<Drafter*> drafters;
      std::vector<DraftRequest> on_device, on_cpu;
      for (size_t i = 0; i < contexts.size(); ++i) {
        owned.push_back(factory.create());
        drafters.push_back(owned.back().get());
        DraftRequest r;
        r.context = &contexts[i];
        r.history = &histories[i];
        r.tree_shape = shape;
        r.scheme = scheme;
        r.rng = StepRandom{41, i, step};
        on_cpu.push_back(r);
        r.device = &device;
        on_device.push_back(r);
      }
      REQUIRE(factory.draws_on_device(on_device));
      draft->batches.clear();
      const std::vector<TokenTree> trees = factory.propose_batch(drafters, on_device);
      // Each depth's forward wrote the rows its draws read, the frontier's (the nodes the depth before added), side by
      // side, and no more.
      CHECK(draft->batches.size() == shape.size());
      for (const std::vector<RecordsOuts::Out>& batch : draft->batches)
        for (size_t k = 0; k < batch.size(); ++k) {
          CHECK(batch[k].rows == batch[k].deepest);
          if (k + 1 < batch.size()) CHECK(batch[k + 1].out == batch[k].out + batch[k].rows * kV);
        }
      for (size_t i = 0; i < contexts.size(); ++i) {
        const TokenTree cpu = owned[i]->propose(on_cpu[i]);
        INFO(sibling_scheme_name(scheme) << ", step " << step << ", sequence " << i);
        CHECK(trees[i].tokens == cpu.tokens);
        CHECK(trees[i].parent == cpu.parent);
        short_trees += trees[i].tokens.size() < full;
      }
    }
  }
  CHECK(short_trees > 0);  // the case the test is for happened
}

TEST_CASE("on cuda-host a 256-node tree gives the CPU path's sequences", "[verify][device]") {
  // 16 children of the root and 15 under each: 256 nodes, the kernels' limit, per step (i.i.d. siblings drawn on the
  // device; without replacement, more siblings than V = 6 tokens, on the host).
  const TablePair pair = random_pair(1, kV, 23, 1.0, 1.0);
  for (SiblingScheme scheme : {SiblingScheme::iid, SiblingScheme::without_replacement}) {
    GenerationConfig config = tree_config({16, 15}, scheme);
    config.max_new_tokens = 5;
    auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, truncating());
    GenerationMetrics m1, m2;
    const auto cpu = Generator(pair.target, truncating(), drafter, config).generate_many(kPrompt, 0, 60, m1);
    const auto dev = Generator(pair.target, truncating(), drafter, on_device(config)).generate_many(kPrompt, 0, 60, m2);
    INFO(sibling_scheme_name(scheme));
    for (size_t n = 0; n < cpu.size(); ++n) CHECK(dev[n].tokens == cpu[n].tokens);
  }
  GenerationConfig too_big = tree_config({16, 16}, SiblingScheme::iid);  // 272 nodes
  CHECK_THROWS_WITH(
      Generator(pair.target, plain(), std::make_shared<ModelDrafterFactory>(pair.draft, plain()), on_device(too_big)),
      Catch::Contains("at most 256"));
}

TEST_CASE("at temperature 0 every method on cuda-host outputs greedy decoding and stops where it stops",
          "[verify][greedy][device]") {
  const TablePair pair = random_pair(2, 8, 14, 1.0, 1.0);
  SamplingParams greedy = penalties();
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 12;
  const std::vector<Token> prompt = {1, 3};
  GenerationMetrics m;
  const SequenceOutput expected = Generator(pair.target, greedy, nullptr, ar).generate(prompt, 0, m);
  std::vector<GenerationConfig> configs = device_methods();
  configs.push_back(chain_config(VerifyMethod::greedy, 3));
  configs.push_back(ar);
  for (GenerationConfig config : configs) {
    config.max_new_tokens = 12;
    for (const SamplingParams& draft : {greedy, plain()}) {
      INFO(describe(config) << " draft T=" << draft.temperature);
      auto drafter = config.method ? std::make_shared<ModelDrafterFactory>(pair.draft, draft) : nullptr;
      const Generator generator(pair.target, greedy, drafter, on_device(config));
      GenerationMetrics metrics;
      for (const SequenceOutput& out : generator.generate_many(prompt, 0, 20, metrics)) {
        CHECK(out.tokens == expected.tokens);
        CHECK(out.stop_reason == expected.stop_reason);
      }
    }
  }
}

TEST_CASE(
    "the law test on cuda-host catches a kernel mutant, a history mutant, misplaced draft laws, shared keys and "
    "siblings drawn with replacement",
    "[verify][mutant][device]") {
  const TablePair pair = random_pair(2, kV, 11, 1.2, 0.8);
  struct Case {
    Mutant mutant;
    SamplingParams params;
    GenerationConfig config;
  };
  for (const Case& c :
       {Case{Mutant::residual_not_subtracted, truncating(), chain_config(VerifyMethod::chain, 2)},
        Case{Mutant::residual_not_subtracted, plain(), tree_config({2, 2}, SiblingScheme::iid)},
        Case{Mutant::penalties_ignore_draft_prefix, penalties(), chain_config(VerifyMethod::block, 3)},
        Case{Mutant::device_draft_laws_misplaced, truncating(), chain_config(VerifyMethod::chain, 2)},
        Case{Mutant::device_draft_laws_misplaced, truncating(), tree_config({2, 2}, SiblingScheme::iid)},
        Case{Mutant::device_siblings_share_key, truncating(), tree_config({2, 2}, SiblingScheme::iid)},
        Case{Mutant::device_siblings_replaced, plain(), tree_config({3, 1}, SiblingScheme::without_replacement)}}) {
    INFO(describe(c.config) << ", mutant " << static_cast<int>(c.mutant));
    const ScopedMutant on(c.mutant);
    const LawCheck check = check_law(pair, c.params, c.params, on_device(c.config), 20000);
    INFO(check.gof.detail);
    CHECK_FALSE(check.gof.passed(stats::kAlpha));
  }
}

TEST_CASE("the device path refuses what its kernels cannot do, by name", "[verify][device]") {
  const TablePair pair = random_pair(1, kV, 3, 1.0, 1.0);
  const auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, plain());
  const auto refuses = [&](const SamplingParams& params, GenerationConfig config, const std::string& name) {
    try {
      Generator(pair.target, params, drafter, on_device(config));
      FAIL("not refused: " << name);
    } catch (const ParameterError& e) {
      CHECK(e.parameter() == name);
    }
  };
  SamplingParams s = plain();
  s.typical_p = 0.9f;
  refuses(s, chain_config(VerifyMethod::chain, 2), "typical_p");
  s = plain();
  s.mirostat = 2;
  refuses(s, chain_config(VerifyMethod::chain, 2), "mirostat");
  s = plain();
  s.tfs_z = 0.9f;
  refuses(s, chain_config(VerifyMethod::chain, 2), "tfs_z");
  s = plain();
  s.dynatemp_range = 0.3f;
  refuses(s, chain_config(VerifyMethod::chain, 2), "dynatemp_range");
  s = plain();
  s.bad_words = {{1, 2}};
  refuses(s, chain_config(VerifyMethod::chain, 2), "bad_words");
  refuses(plain(), chain_config(VerifyMethod::typical, 2), "method");
  refuses(plain(), chain_config(VerifyMethod::chain, 65), "num_draft_tokens");
  GenerationConfig logprobs = chain_config(VerifyMethod::chain, 2);
  logprobs.logprobs = 2;
  refuses(plain(), logprobs, "logprobs");
}
