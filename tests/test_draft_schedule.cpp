// The schedule of a chain's draft length (harness/generation/draft_schedule.h): its transitions, the K the generator
// asks each step's drafter for (one sequence alone and in lockstep), its refusals, and greedy equality. Its law is the
// long-sequence law test's (test_verifiers_exact.cpp), which also catches a draft length read off the step's draws.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
#include "draft/ngram_model.h"
#include "draft/registry/drafter_registry.h"
#include "draft/synthetic_drafter.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/draft_schedule.h"
#include "harness/generation/generator.h"
#include "kernels/shared/error.h"
#include "mixed_k_seen.h"
#include "speculative_fixtures.h"
#include "tests/support/mutant_switch.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;

namespace {

// What one step of the scripted drafter proposes: `length` tokens (-1: the K asked for), of which the first `good`
// are the target's greedy continuation and the rest are not (at temperature 0 a chain accepts exactly the good ones).
struct ScriptStep {
  int32_t length;
  int32_t good;
};
using Scripts = std::map<Token, std::vector<ScriptStep>>;  // by the prompt's first token: one script a sequence

// The Ks asked for, per sequence (the prompt's first token names it), shared by the drafters a factory makes.
struct AskedLog {
  std::mutex mutex;
  std::map<Token, std::vector<int32_t>> asked;
};

class ScriptedDrafter : public Drafter {
 public:
  ScriptedDrafter(std::shared_ptr<const TableModel> target, const Scripts* scripts, std::shared_ptr<AskedLog> log)
      : target_(std::move(target)), scripts_(scripts), log_(std::move(log)) {}
  std::string name() const override { return "scripted"; }
  TokenTree propose(const DraftRequest& request) override {
    const Token sequence = request.context->front();
    {
      const std::lock_guard<std::mutex> lock(log_->mutex);
      log_->asked[sequence].push_back(request.num_draft_tokens);
    }
    const std::vector<ScriptStep>& script = scripts_->at(sequence);
    const ScriptStep step = step_ < script.size() ? script[step_] : ScriptStep{-1, 1 << 20};
    ++step_;
    const int32_t n = step.length < 0 ? request.num_draft_tokens : std::min(step.length, request.num_draft_tokens);
    const int32_t V = target_->vocab_size();
    std::vector<Token> context = *request.context, drafts;
    for (int32_t i = 0; i < n; ++i) {
      const float* row = target_->row_after(context);
      const Token best = static_cast<Token>(std::max_element(row, row + V) - row);
      const Token t = i < step.good ? best : (best + 1) % V;
      drafts.push_back(t);
      context.push_back(t);
    }
    return TokenTree::chain(drafts);
  }

 private:
  std::shared_ptr<const TableModel> target_;
  const Scripts* scripts_;
  std::shared_ptr<AskedLog> log_;
  size_t step_ = 0;
};

class ScriptedFactory : public DrafterFactory {
 public:
  ScriptedFactory(std::shared_ptr<const TableModel> target, Scripts scripts)
      : target_(std::move(target)), scripts_(std::move(scripts)), log_(std::make_shared<AskedLog>()) {}
  std::unique_ptr<Drafter> create() const override {
    return std::make_unique<ScriptedDrafter>(target_, &scripts_, log_);
  }
  int32_t vocab_size() const override { return target_->vocab_size(); }
  std::string description() const override { return "scripted"; }
  bool records_draft_laws() const override { return false; }
  std::vector<int32_t> asked(Token sequence) const { return log_->asked.at(sequence); }

 private:
  std::shared_ptr<const TableModel> target_;
  Scripts scripts_;
  std::shared_ptr<AskedLog> log_;
};

SamplingParams greedy() {
  SamplingParams s;
  s.temperature = 0.0f;
  return s;
}

GenerationConfig chain(VerifyMethod method, int32_t k, DraftSchedule schedule) {
  GenerationConfig c;
  c.method = method;
  c.num_draft_tokens = k;
  c.num_draft_tokens_schedule = schedule;
  c.max_new_tokens = 60;
  c.seed = 20261207;
  return c;
}

}  // namespace

TEST_CASE("draft schedule: heuristic moves K by +2 after a whole acceptance, -1 after a rejection, within 1..K",
          "[verify][schedule]") {
  using S = DraftSchedule;
  // (k asked, proposed, accepted, K)
  CHECK(next_num_draft_tokens(S::heuristic, 4, 4, 4, 6) == 6);
  CHECK(next_num_draft_tokens(S::heuristic, 5, 5, 5, 6) == 6);  // capped at K
  CHECK(next_num_draft_tokens(S::heuristic, 6, 6, 6, 6) == 6);
  CHECK(next_num_draft_tokens(S::heuristic, 4, 4, 3, 6) == 3);
  CHECK(next_num_draft_tokens(S::heuristic, 4, 4, 0, 6) == 3);
  CHECK(next_num_draft_tokens(S::heuristic, 1, 1, 0, 6) == 1);  // never below 1
  CHECK(next_num_draft_tokens(S::heuristic, 1, 1, 1, 6) == 3);
  CHECK(next_num_draft_tokens(S::heuristic, 4, 2, 2, 6) == 6);  // every draft proposed accepted: grows from the K asked
  CHECK(next_num_draft_tokens(S::heuristic, 4, 0, 0, 6) == 6);  // nothing proposed, nothing rejected
  CHECK(next_num_draft_tokens(S::heuristic, 4, 2, 1, 6) == 3);
  CHECK(next_num_draft_tokens(S::constant, 2, 2, 0, 6) == 6);
  CHECK(next_num_draft_tokens(S::constant, 6, 6, 6, 6) == 6);
  CHECK(parse_draft_schedule("heuristic") == S::heuristic);
  CHECK(parse_draft_schedule("constant") == S::constant);
  CHECK(std::string(draft_schedule_name(S::heuristic)) == "heuristic");
  CHECK_THROWS_WITH(parse_draft_schedule("adaptive"),
                    Contains("unknown num_draft_tokens_schedule 'adaptive' (known: constant, heuristic)"));
}

TEST_CASE(
    "draft schedule: each step asks its drafter for the K its sequence's earlier steps set, alone and in lockstep",
    "[verify][schedule]") {
  const TablePair pair = random_pair(1, 8, 31, 2.0, 1.0);
  // Sequence 1: rejections from K = 4 down past 1, whole acceptances back up to the cap, a step that accepts some of
  // its drafts, and a proposal shorter than asked, all accepted, which grows K (transformers compares the matches with
  // the candidates made). Sequence 5: acceptances at the cap first, then the same way down and up. Their Ks differ at
  // most steps, so one K for the batch would show.
  const Scripts scripts = {
      {1, {{-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 9}, {-1, 9}, {-1, 9}, {-1, 2}, {1, 9}, {-1, 0}, {-1, 9}}},
      {5,
       {{-1, 9}, {-1, 9}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 0}, {-1, 9}, {-1, 9}, {-1, 9}, {-1, 9}, {-1, 9}}}};
  const std::map<Token, std::vector<int32_t>> asked_for = {{1, {4, 3, 2, 1, 1, 1, 3, 4, 4, 3, 4, 3, 4}},
                                                           {5, {4, 4, 4, 3, 2, 1, 1, 1, 3, 4, 4, 4, 4}}};
  const std::map<Token, std::vector<int32_t>> accepted = {{1, {0, 0, 0, 0, 0, 1, 3, 4, 2, 1, 0, 3}},
                                                          {5, {4, 4, 0, 0, 0, 0, 0, 1, 3, 4, 4, 4}}};
  for (const bool lockstep : {false, true}) {
    for (const VerifyMethod method : {VerifyMethod::chain, VerifyMethod::greedy, VerifyMethod::block}) {
      INFO("method " << verify_method_name(method) << (lockstep ? ", lockstep" : ", alone"));
      const auto drafter = std::make_shared<ScriptedFactory>(pair.target, scripts);
      GenerationConfig config = chain(method, 4, DraftSchedule::heuristic);
      config.lockstep = lockstep;
      const Generator generator(pair.target, greedy(), drafter, config);
      std::vector<std::vector<Token>> prompts = {{1, 2}, {5, 0}};
      std::vector<const std::vector<Token>*> batch = {&prompts[0], &prompts[1]};
      std::vector<GenerationMetrics> metrics(2);
      const std::vector<SequenceOutput> out = generator.generate_batch(batch, {0, 1}, metrics);
      for (size_t i = 0; i < prompts.size(); ++i) {
        const Token sequence = prompts[i][0];
        INFO("sequence " << sequence);
        const std::vector<int32_t> asked = drafter->asked(sequence), &expected = asked_for.at(sequence);
        REQUIRE(asked.size() >= expected.size());
        CHECK(std::vector<int32_t>(asked.begin(), asked.begin() + expected.size()) == expected);
        // The script's acceptances as the verifier saw them.
        const std::vector<int32_t>& lengths = out[i].accept_lengths;
        REQUIRE(lengths.size() >= accepted.at(sequence).size());
        CHECK(std::vector<int32_t>(lengths.begin(), lengths.begin() + accepted.at(sequence).size()) ==
              accepted.at(sequence));
      }
    }
  }
  SECTION("a constant schedule asks for K at every step") {
    const auto drafter = std::make_shared<ScriptedFactory>(pair.target, scripts);
    const Generator generator(pair.target, greedy(), drafter, chain(VerifyMethod::chain, 4, DraftSchedule::constant));
    GenerationMetrics metrics;
    generator.generate({1, 2}, 0, metrics);
    const std::vector<int32_t> asked = drafter->asked(1);
    CHECK(std::all_of(asked.begin(), asked.end(), [](int32_t k) { return k == 4; }));
  }
}

TEST_CASE("draft schedule: a schedule that moves K is refused with a tree, by name", "[verify][schedule]") {
  const TablePair pair = random_pair(1, 8, 31, 2.0, 1.0);
  DraftShape shape;
  shape.num_draft_tokens_schedule = DraftSchedule::heuristic;
  CHECK_THROWS_WITH(generation_config(parse_decoding_method("tree"), shape, 16, 0),
                    Contains("heuristic moves a chain's K; method tree verifies a tree of a fixed shape"));
  CHECK_NOTHROW(generation_config(parse_decoding_method("block"), shape, 16, 0));
  CHECK(generation_config(parse_decoding_method("chain"), shape, 16, 0).num_draft_tokens_schedule ==
        DraftSchedule::heuristic);
  CHECK(generation_config(parse_decoding_method("ar"), shape, 16, 0).num_draft_tokens_schedule ==
        DraftSchedule::constant);  // nothing drafts
  GenerationConfig tree = chain(VerifyMethod::tree, 2, DraftSchedule::heuristic);
  tree.tree_shape = {2, 1};
  CHECK_THROWS_WITH(Generator(pair.target, greedy(), std::make_shared<ScriptedFactory>(pair.target, Scripts{}), tree),
                    Contains("num_draft_tokens_schedule") && Contains("method tree verifies a tree of a fixed shape"));
}

namespace {

// Four sequences of `config` from a table pair at V = 4096 (a q row, 16 KiB, exceeds the reservation's per-row floor,
// so a buffer sized for less would grow), sampled at temperature 1, on `device`: their outputs and metrics, and the
// drafter's count of the steps whose sequences asked for different Ks (MixedKSeen). On a device the run's buffers must
// stay within its reservation.
struct WideBatch {
  std::vector<SequenceOutput> out;
  GenerationMetrics metrics;
  DraftStepCounts drafts;  // the drafter's steps, on the device or not, and its moving K's (MixedKSeen)
};

WideBatch run_wide_batch(GenerationConfig config, Device device, float draft_temperature = 1.0f) {
  static const TablePair pair = random_pair(1, 4096, 77, 2.0, 1.5);
  SamplingParams sampled, draft;
  sampled.temperature = 1.0f;
  draft.temperature = draft_temperature;
  config.device = device;
  const auto factory = std::make_shared<MixedKSeen>(pair.draft, draft);
  const Generator generator(pair.target, sampled, factory, config);
  WideBatch run;
  run.out = generator.generate_many({1, 2}, 0, 4, run.metrics);
  CHECK(run.metrics.q_zero_errors == 0);
  if (device != Device::cpu) {
    CHECK(run.metrics.device_buffer_bytes <= generator.device_step_bytes(4));
    CHECK(run.metrics.growth_waits == 0);
  }
  run.drafts = factory->counts;
  return run;
}

// The sequences of two runs that differ in their tokens or their acceptances.
int64_t differing_sequences(const std::vector<SequenceOutput>& a, const std::vector<SequenceOutput>& b) {
  REQUIRE(a.size() == b.size());
  int64_t differing = 0;
  for (size_t n = 0; n < a.size(); ++n)
    differing += a[n].tokens != b[n].tokens || a[n].accept_lengths != b[n].accept_lengths;
  return differing;
}

}  // namespace

// A batch's chains of different Ks are drawn on the device at the longest K, each cut to its own: the sequences are
// the CPU's (each alone), and the laws fit the buffers reserved for the deepest draft.
TEST_CASE(
    "draft schedule: on cuda-host a batch whose Ks move apart draws its chains on the device, the CPU's sequences",
    "[device][schedule]") {
  GenerationConfig config = chain(VerifyMethod::chain, 6, DraftSchedule::heuristic);
  config.max_new_tokens = 40;
  const WideBatch cpu = run_wide_batch(config, Device::cpu), device = run_wide_batch(config, Device::cuda_host);
  // The sequences' acceptances differ, so their Ks move apart, and those steps drew on the device.
  std::set<std::vector<int32_t>> lengths;
  for (const SequenceOutput& s : cpu.out) lengths.insert(s.accept_lengths);
  REQUIRE(lengths.size() > 1);
  CHECK(device.drafts.mixed > 0);
  CHECK(device.drafts.mixed_on_device == device.drafts.mixed);
  CHECK(device.drafts.widest_spread >= 2);
  CHECK(differing_sequences(device.out, cpu.out) == 0);
  // Every chain left at the batch's longest K: other steps than the CPU's.
  const ScopedMutant on(Mutant::device_chains_not_cut);
  const WideBatch broken = run_wide_batch(config, Device::cuda_host);
  int64_t differing = 0;
  for (size_t n = 0; n < cpu.out.size(); ++n) differing += broken.out[n].accept_lengths != cpu.out[n].accept_lengths;
  CHECK(differing > 0);
}

namespace {

// A chain of K = 6 at threshold 0.3 after the one-token context of `step`, with its own keys.
struct DoubtingRequest {
  explicit DoubtingRequest(uint64_t step) : context{static_cast<Token>(step % 16)}, history{context, {}} {
    request.context = &context;
    request.history = &history;
    request.num_draft_tokens = 6;
    request.confidence_threshold = 0.3f;
    request.rng = StepRandom{3, 0, step};
  }
  DoubtingRequest(const DoubtingRequest&) = delete;
  DoubtingRequest& operator=(const DoubtingRequest&) = delete;
  const std::vector<Token> context;
  const TokenHistory history;
  DraftRequest request;
};

}  // namespace

// A chain's early stop on the draft's doubt (DraftRequest::confidence_threshold, stops_after_doubt): every draft but
// the last was drawn with q >= the threshold, and the last below it unless the chain is whole; the drafts drawn are
// those of the same request without the threshold (the stop changes no draw). A draft model (its own loop) and the
// synthetic drafter (sample_draft_tree's, which the n-gram shares). Its law is battery F's (test_verifiers_exact.cpp).
TEST_CASE("confidence threshold: a chain stops after the first draft its law gave less than it, keeping that draft",
          "[verify][schedule]") {
  const TablePair pair = random_pair(1, 16, 91, 1.5, 1.0);
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  const std::vector<std::shared_ptr<const DrafterFactory>> factories = {
      std::make_shared<ModelDrafterFactory>(pair.draft, sampled),
      std::make_shared<SyntheticDrafterFactory>(pair.target, sampled, 0.5)};
  for (const auto& factory : factories) {
    INFO(factory->description());
    CHECK(factory->stops_on_confidence());
    const auto drafter = factory->create();
    int64_t short_chains = 0, whole = 0;
    for (uint64_t step = 0; step < 200; ++step) {
      const DoubtingRequest doubting(step);
      const DraftRequest& r = doubting.request;
      const TokenTree t = drafter->propose(r);
      REQUIRE(t.size() >= 1);
      for (int32_t i = 0; i < t.size(); ++i) {
        const float q = t.q_at_row(i)[static_cast<size_t>(t.tokens[i])];
        if (i + 1 < t.size())
          CHECK(q >= 0.3f);
        else if (t.size() < 6)
          CHECK(q < 0.3f);
      }
      ++(t.size() < 6 ? short_chains : whole);
      DraftRequest plain = r;
      plain.confidence_threshold = 0.0f;
      const TokenTree u = factory->create()->propose(plain);
      REQUIRE(u.size() == 6);
      CHECK(std::equal(t.tokens.begin(), t.tokens.end(), u.tokens.begin()));
    }
    CHECK(short_chains > 0);
    CHECK(whole > 0);
  }
  // Dropping the doubted draft instead: a chain's last draft then has q >= the threshold while it stops short.
  const ScopedMutant on(Mutant::confidence_stop_drops_draft);
  const auto drafter = factories[0]->create();
  int64_t dropped = 0;
  for (uint64_t step = 0; step < 50; ++step) {
    const TokenTree t = drafter->propose(DoubtingRequest(step).request);
    dropped +=
        t.size() < 6 && (t.size() == 0 || t.q_at_row(t.size() - 1)[static_cast<size_t>(t.tokens.back())] >= 0.3f);
  }
  CHECK(dropped > 0);
}

TEST_CASE("confidence threshold: refused with a tree, outside [0, 1) and for a drafter without a law, by name",
          "[verify][schedule]") {
  const TablePair pair = random_pair(1, 8, 31, 2.0, 1.0);
  DraftShape shape;
  shape.confidence_threshold = 0.4;
  CHECK_THROWS_WITH(generation_config(parse_decoding_method("tree"), shape, 16, 0),
                    Contains("0.4 stops a chain early; method tree verifies a tree of a fixed shape"));
  CHECK(generation_config(parse_decoding_method("chain"), shape, 16, 0).confidence_threshold == 0.4);
  CHECK(generation_config(parse_decoding_method("ar"), shape, 16, 0).confidence_threshold == 0.0);
  shape.confidence_threshold = 1.0;
  CHECK_THROWS_WITH(generation_config(parse_decoding_method("chain"), shape, 16, 0),
                    Contains("confidence_threshold must be in [0, 1)"));
  GenerationConfig config = chain(VerifyMethod::chain, 4, DraftSchedule::constant);
  config.confidence_threshold = 0.4;
  CHECK_THROWS_WITH(Generator(pair.target, greedy(), std::make_shared<ScriptedFactory>(pair.target, Scripts{}), config),
                    Contains("confidence_threshold 0.4: drafter scripted does not stop on its confidence"));
  CHECK_NOTHROW(Generator(pair.target, greedy(), std::make_shared<ModelDrafterFactory>(pair.draft, greedy()), config));
  // Before any model loads, from the spec's kind (the registry's table): kinds without a law are refused.
  for (const char* spec : {"prompt-lookup", "medusa:/heads", "eagle:/heads"})
    CHECK_THROWS_WITH(check_drafter_confidence(spec, 0.4),
                      Contains(std::string("drafter ") + spec + " does not stop on its confidence"));
  for (const char* spec : {"ngram:/m.txt", "synthetic:alpha=0.5", "transformer:/draft", "bigram:/d.txt"})
    CHECK_NOTHROW(check_drafter_confidence(spec, 0.4));
  CHECK_NOTHROW(check_drafter_confidence("prompt-lookup", 0.0));
  CHECK(moves_k(DraftSchedule::constant, 4, 0.4));
  CHECK_FALSE(moves_k(DraftSchedule::constant, 1, 0.4));
  CHECK_FALSE(moves_k(DraftSchedule::constant, 4, 0.0));
}

// On cuda-host a sampled draft that may stop on its doubt is drawn on the device at the batch's longest K and each
// chain cut by its drafts' probabilities under the laws kept there (one gather, one download): the CPU's sequences,
// with the CPU's draft forwards, every step drawn there, no buffer grown. A greedy draft doubts with its law at
// temperature 1, which the device does not keep: drawn on the host, its q rows within the reservation, the CPU's
// sequences too.
TEST_CASE(
    "confidence threshold: on cuda-host a sampled draft's chains are drawn and cut on the device, a greedy "
    "draft's on the host, the CPU's sequences, within bounds",
    "[device][schedule]") {
  GenerationConfig config = chain(VerifyMethod::chain, 6, DraftSchedule::heuristic);
  config.max_new_tokens = 40;
  config.confidence_threshold = 0.3;
  const WideBatch cpu = run_wide_batch(config, Device::cpu), device = run_wide_batch(config, Device::cuda_host);
  for (const WideBatch* run : {&cpu, &device}) CHECK(run->metrics.proposed < 6 * run->metrics.steps);
  CHECK(device.drafts.steps > 0);
  CHECK(device.drafts.steps_on_device == device.drafts.steps);
  CHECK(device.drafts.mixed > 0);
  CHECK(differing_sequences(device.out, cpu.out) == 0);
  CHECK(device.metrics.draft_calls == cpu.metrics.draft_calls);
  CHECK(device.metrics.proposed == cpu.metrics.proposed);
  // Under a constant K the doubt alone cuts: chains left uncut are other steps than the CPU's.
  GenerationConfig constant = config;
  constant.num_draft_tokens_schedule = DraftSchedule::constant;
  const WideBatch constant_cpu = run_wide_batch(constant, Device::cpu);
  CHECK(differing_sequences(run_wide_batch(constant, Device::cuda_host).out, constant_cpu.out) == 0);
  {
    const ScopedMutant on(Mutant::device_chains_not_cut);
    CHECK(differing_sequences(run_wide_batch(constant, Device::cuda_host).out, constant_cpu.out) > 0);
  }
  const WideBatch greedy_cpu = run_wide_batch(config, Device::cpu, 0.0f),
                  greedy_device = run_wide_batch(config, Device::cuda_host, 0.0f);
  CHECK(greedy_device.metrics.proposed < 6 * greedy_device.metrics.steps);
  CHECK(greedy_device.drafts.steps_on_device == 0);
  CHECK(differing_sequences(greedy_device.out, greedy_cpu.out) == 0);
}

// A greedy draft (temperature 0, a point mass) doubts with its law at temperature 1: its chains stop early, and greedy
// speculation still equals greedy decoding (chain and block; a draft model and an n-gram).
TEST_CASE("confidence threshold: a greedy draft doubts at temperature 1, and equals greedy decoding",
          "[verify][schedule]") {
  const TablePair pair = random_pair(1, 16, 53, 1.2, 1.0);
  GenerationConfig ar;
  ar.max_new_tokens = 48;
  GenerationMetrics m;
  const std::vector<Token> prompt = {1, 2};
  const std::vector<Token> expected = Generator(pair.target, greedy(), nullptr, ar).generate(prompt, 0, m).tokens;
  std::vector<int32_t> corpus;
  for (int32_t i = 0; i < 4000; ++i) corpus.push_back(static_cast<int32_t>(philox_uniform(5, 1, i) * 16) % 16);
  const auto ngram = std::make_shared<NgramModel>(NgramModel::train(corpus, 2, 16));
  const std::vector<std::shared_ptr<const DrafterFactory>> drafters = {
      std::make_shared<ModelDrafterFactory>(pair.draft, greedy()),
      std::make_shared<NgramDrafterFactory>(ngram, greedy(), "ngram")};
  for (const auto& drafter : drafters)
    for (const VerifyMethod method : {VerifyMethod::chain, VerifyMethod::block}) {
      INFO(drafter->description() << " / " << verify_method_name(method));
      GenerationConfig config = chain(method, 6, DraftSchedule::constant);
      config.max_new_tokens = 48;
      config.confidence_threshold = 0.5;
      GenerationMetrics metrics;
      CHECK(Generator(pair.target, greedy(), drafter, config).generate(prompt, 0, metrics).tokens == expected);
      CHECK(metrics.proposed < 6 * metrics.steps);  // chains stopped early
    }
}
