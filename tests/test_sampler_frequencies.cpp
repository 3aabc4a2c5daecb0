// Battery B (tests/TESTING.md) and the sampler half of battery M: tokens drawn with the library's selectors
// (sample_categorical / sample_rows, Philox keys) from the distribution the code under test produced are
// compared, by a G-test with zero-cell and rare-cell checks, with the law of the independent float64
// reference (tests/reference_pipeline.h). Then every sampler mutant (tests/support/mutant_switch.h) is switched on and
// the very same test must fail: a test that cannot fail proves nothing.
//
// Configs are stage-activating: the stage a mutant corrupts is active and matters (the mutant's law is at
// TV >= 0.02 from the reference, checked as a precondition), so 200k draws detect it with certainty at
// alpha = 1e-6 (tests/TESTING.md: TV 0.01 needs ~200k for K = 16).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/shared/philox.h"
#include "tests/reference_pipeline.h"
#include "tests/statistics/goodness_of_fit.h"
#include "tests/support/mutant_switch.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int64_t kDraws = 200000;

// A decreasing ramp with both logit signs, so penalties hit positive and negative logits.
const std::vector<float> kRamp = {1.8f, 1.5f, 1.1f, 0.8f, 0.6f, 0.3f, 0.0f, -0.3f, -0.7f, -1.0f, -1.4f, -2.0f};

struct Case {
  std::string name;
  std::vector<float> logits;
  SamplingParams params;
  TokenHistory history;
};

// The law the code under test produces (float32 probabilities, as the selectors see them).
std::vector<float> processed(const Case& c) {
  const SamplerPipeline pipeline(c.params, static_cast<int32_t>(c.logits.size()));
  return pipeline.process(c.logits, c.history);
}

std::string show(const std::vector<double>& v) {
  std::ostringstream os;
  os.precision(5);
  for (size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
  return os.str();
}

// The frequency test: n draws from the processed distribution with Philox keys (seed, stream, i), counted
// and compared with the reference law.
stats::GofResult frequency_test(const Case& c, uint64_t seed, int64_t n = kDraws) {
  const std::vector<float> probs = processed(c);
  const int32_t V = static_cast<int32_t>(probs.size());
  std::vector<int64_t> counts(V, 0);
  const uint64_t stream = philox_stream(0, RandomRole::aux);
  for (int64_t i = 0; i < n; ++i)
    ++counts[sample_categorical(probs.data(), V, RandomKey{seed, stream, static_cast<uint64_t>(i)})];
  return stats::g_test(counts, reference::probs(c.logits, c.params, c.history));
}

// How far the code's law is from the reference (0 for correct code, up to float rounding).
double law_distance(const Case& c) {
  const std::vector<float> p = processed(c);
  return reference::total_variation(std::vector<double>(p.begin(), p.end()),
                                    reference::probs(c.logits, c.params, c.history));
}

Case make_case(std::string name, std::vector<float> logits = kRamp) {
  Case c;
  c.name = std::move(name);
  c.logits = std::move(logits);
  return c;
}

struct MutantCase {
  Mutant mutant;
  Case config;
};

// One stage-activating config per pipeline mutant.
std::vector<MutantCase> mutant_cases() {
  std::vector<MutantCase> out;
  auto add = [&](Mutant m, Case c) { out.push_back({m, std::move(c)}); };
  {
    Case c = make_case("top_p = 0.5 (the crossing token carries mass)");
    c.params.top_p = 0.5f;
    add(Mutant::top_p_drops_crossing_token, c);
  }
  {
    Case c = make_case("top_k = 2 with a three-way tie at the boundary",
                       {1.2f, 1.0f, 1.0f, 1.0f, 0.4f, 0.1f, -0.3f, -0.5f, -1.0f, -1.5f, -2.0f, -2.5f});
    c.params.top_k = 2;
    add(Mutant::top_k_breaks_ties_by_index, c);
  }
  {
    Case c = make_case("min_p = 0.25 at T = 2");
    c.params.temperature = 2.0f;
    c.params.min_p = 0.25f;
    add(Mutant::min_p_before_temperature, c);
  }
  {
    Case c = make_case("T = 0.7");
    c.params.temperature = 0.7f;
    add(Mutant::temperature_applied_twice, c);
  }
  {
    Case c = make_case("repetition 2.5 on positive and negative logits");
    c.params.repetition_penalty = 2.5f;
    c.history.prompt = {7, 9, 1};
    c.history.output = {8, 6};
    add(Mutant::repetition_penalty_ignores_sign, c);
  }
  {
    Case c = make_case("frequency 1.0 with prompt tokens");
    c.params.frequency_penalty = 1.0f;
    c.history.prompt = {0, 0, 2};
    c.history.output = {1, 3};
    add(Mutant::frequency_penalty_counts_prompt, c);
  }
  {
    Case c = make_case("presence 1.0 with a token repeated 3 times");
    c.params.presence_penalty = 1.0f;
    c.history.output = {0, 0, 0, 2};
    add(Mutant::presence_penalty_per_occurrence, c);
  }
  {
    Case c = make_case("bias with T = 0.5");
    c.params.temperature = 0.5f;
    c.params.logit_bias = {{5, 1.0f}, {0, -1.0f}};
    add(Mutant::logit_bias_after_temperature, c);
  }
  {
    Case c = make_case("min_tokens 3 after 2 tokens, the mode is the stop token");
    c.params.min_tokens = 3;
    c.params.stop_tokens = {0};
    c.history.output = {4, 5};
    add(Mutant::min_tokens_off_by_one, c);
  }
  {
    Case c = make_case("bad words whose prefix does not match");
    c.params.bad_words = {{6, 0}, {9, 1}, {5, 3}};
    c.history.output = {3, 5};  // ends with 5: token 3 is banned, 0 and 1 are not
    add(Mutant::bad_words_ignore_prefix, c);
  }
  {
    Case c = make_case("typical_p = 0.5");
    c.params.typical_p = 0.5f;
    add(Mutant::typical_signed_score, c);
  }
  {
    // Running sums of the normalised |second differences|: .06 .50 .73 ...; of the mutant's |first
    // differences|: .27 .53 .66 .73 ...; z = 0.7 keeps 2 tokens, the mutant 3.
    Case c = make_case("tfs_z = 0.7");
    c.params.tfs_z = 0.7f;
    add(Mutant::tfs_first_derivative, c);
  }
  {
    Case c = make_case("dynatemp range 1 with half the vocabulary banned");
    c.params.dynatemp_range = 1.0f;
    c.params.banned_tokens = {6, 7, 8, 9, 10, 11};
    add(Mutant::dynatemp_full_vocab_entropy, c);
  }
  {
    Case c = make_case("mirostat v2, tau = 1.5 (mu = 3 bits)");
    c.params.mirostat = 2;
    c.params.mirostat_tau = 1.5f;
    add(Mutant::mirostat_natural_log_surprise, c);
  }
  return out;
}

// Stages without a mutant of their own still get a frequency test.
std::vector<Case> extra_cases() {
  std::vector<Case> out;
  {
    Case c = make_case("allowed_tokens and banned_tokens");
    c.params.allowed_tokens = {0, 2, 3, 5, 8, 11};
    c.params.banned_tokens = {3};
    out.push_back(c);
  }
  {
    Case c = make_case("greedy with a tie at the top (lowest id wins)", {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f});
    c.params.temperature = 0.0f;
    c.params.top_k = 3;
    out.push_back(c);
  }
  {
    Case c = make_case("everything at once, default order");
    c.params.banned_tokens = {0};
    c.params.logit_bias = {{9, 1.5f}};
    c.params.repetition_penalty = 1.3f;
    c.params.frequency_penalty = 0.3f;
    c.params.presence_penalty = 0.2f;
    c.params.temperature = 1.4f;
    c.params.min_p = 0.05f;
    c.params.top_k = 9;
    c.params.top_p = 0.92f;
    c.history.prompt = {1, 8};
    c.history.output = {2, 2, 10};
    out.push_back(c);
  }
  return out;
}

const char* mutant_name(Mutant m) {
  switch (m) {
    case Mutant::top_p_drops_crossing_token:
      return "top_p_drops_crossing_token";
    case Mutant::top_k_breaks_ties_by_index:
      return "top_k_breaks_ties_by_index";
    case Mutant::min_p_before_temperature:
      return "min_p_before_temperature";
    case Mutant::temperature_applied_twice:
      return "temperature_applied_twice";
    case Mutant::repetition_penalty_ignores_sign:
      return "repetition_penalty_ignores_sign";
    case Mutant::frequency_penalty_counts_prompt:
      return "frequency_penalty_counts_prompt";
    case Mutant::presence_penalty_per_occurrence:
      return "presence_penalty_per_occurrence";
    case Mutant::logit_bias_after_temperature:
      return "logit_bias_after_temperature";
    case Mutant::min_tokens_off_by_one:
      return "min_tokens_off_by_one";
    case Mutant::bad_words_ignore_prefix:
      return "bad_words_ignore_prefix";
    case Mutant::typical_signed_score:
      return "typical_signed_score";
    case Mutant::tfs_first_derivative:
      return "tfs_first_derivative";
    case Mutant::dynatemp_full_vocab_entropy:
      return "dynatemp_full_vocab_entropy";
    case Mutant::mirostat_natural_log_surprise:
      return "mirostat_natural_log_surprise";
    case Mutant::uniform_reused_across_rows:
      return "uniform_reused_across_rows";
    default:
      return "(not a sampler mutant)";
  }
}

}  // namespace

TEST_CASE("every stage's sampled frequencies match the reference law", "[sampler][frequency]") {
  uint64_t seed = 1000;
  for (const MutantCase& mc : mutant_cases()) {
    const Case& c = mc.config;
    INFO(c.name << "\nchain " << c.params.describe() << "\nreference "
                << show(reference::probs(c.logits, c.params, c.history)));
    CHECK(law_distance(c) < 1e-6);
    const stats::GofResult r = frequency_test(c, ++seed);
    INFO(r.detail);
    CHECK(r.passed(stats::kAlpha));
  }
  for (const Case& c : extra_cases()) {
    INFO(c.name << "\nchain " << c.params.describe() << "\nreference "
                << show(reference::probs(c.logits, c.params, c.history)));
    CHECK(law_distance(c) < 1e-6);
    const stats::GofResult r = frequency_test(c, ++seed);
    INFO(r.detail);
    CHECK(r.passed(stats::kAlpha));
  }
}

TEST_CASE("every sampler-pipeline mutant fails the frequency test of its stage", "[sampler][mutant]") {
  uint64_t seed = 1000;
  for (const MutantCase& mc : mutant_cases()) {
    const Case& c = mc.config;
    ++seed;  // the same seed as the passing run above
    ScopedMutant on(mc.mutant);
    INFO("mutant " << mutant_name(mc.mutant) << " on " << c.name);
    // Precondition: the config activates the stage, so the mutant moves the law by a detectable amount.
    const double tv = law_distance(c);
    INFO("TV(mutant law, reference) = " << tv);
    REQUIRE(tv >= 0.02);
    const stats::GofResult r = frequency_test(c, seed);
    INFO(r.detail);
    CHECK_FALSE(r.passed(stats::kAlpha));
  }
}

// ---- Whole sequences: history-dependent stages across steps ---------------------------------------------
// tests/TESTING.md: "test whole sequences, not one position". A three-token sequence from an order-1 logits table
// with penalties, bad words, min_tokens and mirostat (whose mu moves after every token through advance()).
// The joint law of the 6^3 sequences is enumerated with the reference; the code under test is walked token
// by token with the library's selector, exactly as a generation loop would.

namespace {

constexpr int kSeqV = 6, kSeqL = 3;

struct SequenceSetup {
  std::vector<std::vector<float>> table;  // [previous token] -> logits of the next one
  SamplingParams params;
  TokenHistory start;
};

SequenceSetup sequence_setup() {
  SequenceSetup q;
  q.table = {
      {0.9f, -0.4f, 0.6f, 1.2f, -0.8f, 1.0f},  // after 0 (the first step: the output starts 0 0)
      {0.2f, 1.9f, -0.6f, 1.5f, 0.4f, 0.9f},   // after 1: 3 is the favourite, and a bad word
      {1.1f, 0.8f, -0.3f, -0.5f, 0.5f, 1.3f},  // after 2
      {-0.2f, 1.2f, 0.9f, 0.1f, -0.7f, 0.8f},  // after 3
      {0.6f, 1.4f, -0.9f, 0.7f, 0.3f, 1.1f},   // after 4
      {0.5f, 0.1f, 1.0f, -0.4f, 0.9f, 0.2f},   // after 5
  };
  SamplingParams& s = q.params;
  s.repetition_penalty = 1.6f;  // prompt tokens 2 and 4, output tokens; logits of both signs
  s.frequency_penalty = 0.2f;
  s.presence_penalty = 0.5f;
  s.bad_words = {{1, 3}};
  s.min_tokens = 4;  // stop token 5 banned while the output (2 tokens at the start) is shorter than 4
  s.stop_tokens = {5};
  s.temperature = 0.9f;
  s.mirostat = 2;
  s.mirostat_tau = 1.7f;  // mu starts at 3.4 bits: keeps p >= ~0.095
  s.mirostat_eta = 0.5f;
  q.start.prompt = {2, 4};
  q.start.output = {0, 0};  // a repeated token from the start, so presence != frequency
  return q;
}

Token previous_token(const TokenHistory& h) { return h.output.empty() ? h.prompt.back() : h.output.back(); }

// The reference joint law, by enumeration; also the smallest decision margin met on the way.
void reference_sequences(const SequenceSetup& q, const TokenHistory& h, int depth, int index, double prob,
                         std::vector<double>& law, double& margin) {
  if (depth == kSeqL) {
    law[index] += prob;
    return;
  }
  const reference::Result r = reference::pipeline(q.table[previous_token(h)], q.params, h);
  margin = std::min(margin, r.margin);
  for (Token t = 0; t < kSeqV; ++t) {
    if (r.probs[t] == 0.0) continue;
    TokenHistory next = h;
    next.output.push_back(t);
    next.mirostat_mu =
        reference::mirostat_mu(q.params, h) - q.params.mirostat_eta * (-std::log2(r.probs[t]) - q.params.mirostat_tau);
    reference_sequences(q, next, depth + 1, index * kSeqV + t, prob * r.probs[t], law, margin);
  }
}

int64_t pow_int(int64_t base, int e) {
  int64_t r = 1;
  while (e-- > 0) r *= base;
  return r;
}

// The code under test: pipeline.process + advance along the emitted prefix. Rows are cached by prefix (the
// history, mu included, is a function of the prefix), so each distinct row is processed once.
class CodeSequences {
 public:
  explicit CodeSequences(const SequenceSetup& q) : q_(q), pipeline_(q.params, kSeqV) {}

  struct Row {
    std::vector<float> probs;
    TokenHistory history;
  };
  // Row after `depth` generated tokens encoded as `index` (base kSeqV).
  const Row& row(const TokenHistory& h, int depth, int index) {
    const int64_t key = index * 8 + depth;
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, Row{pipeline_.process(q_.table[previous_token(h)], h), h}).first;
    return it->second;
  }
  TokenHistory advance(const TokenHistory& h, Token t, const Row& r) const {
    return pipeline_.advance(h, t, r.probs.data());
  }

  // Exact law of the code under test (float probabilities), by the same enumeration.
  void law(const TokenHistory& h, int depth, int index, double prob, std::vector<double>& out) {
    if (depth == kSeqL) {
      out[index] += prob;
      return;
    }
    const Row r = row(h, depth, index);
    for (Token t = 0; t < kSeqV; ++t)
      if (r.probs[t] > 0.0f) law(advance(h, t, r), depth + 1, index * kSeqV + t, prob * r.probs[t], out);
  }

  // n sequences; sequence i draws step t with key (seed, stream of sequence i, offset t).
  std::vector<int64_t> sample(int64_t n, uint64_t seed) {
    std::vector<int64_t> counts(pow_int(kSeqV, kSeqL), 0);
    for (int64_t i = 0; i < n; ++i) {
      TokenHistory h = q_.start;
      int index = 0;
      for (int step = 0; step < kSeqL; ++step) {
        const Row& r = row(h, step, index);
        const RandomKey key{seed, philox_stream(static_cast<uint64_t>(i), RandomRole::sample),
                            static_cast<uint64_t>(step)};
        const Token t = sample_categorical(r.probs.data(), kSeqV, key);
        h = advance(h, t, r);
        index = index * kSeqV + t;
      }
      ++counts[index];
    }
    return counts;
  }

 private:
  const SequenceSetup& q_;
  SamplerPipeline pipeline_;
  std::map<int64_t, Row> cache_;
};

std::vector<double> code_sequence_law(const SequenceSetup& q) {
  CodeSequences code(q);
  std::vector<double> law(pow_int(kSeqV, kSeqL), 0.0);
  code.law(q.start, 0, 0, 1.0, law);
  return law;
}

stats::GofResult sequence_test(const SequenceSetup& q, const std::vector<double>& reference_law, uint64_t seed) {
  CodeSequences code(q);
  return stats::g_test(code.sample(300000, seed), reference_law);
}

}  // namespace

TEST_CASE("three-token sequences with history-dependent stages follow the reference joint law",
          "[sampler][frequency][sequence]") {
  const SequenceSetup q = sequence_setup();
  std::vector<double> law(pow_int(kSeqV, kSeqL), 0.0);
  double margin = std::numeric_limits<double>::infinity();
  reference_sequences(q, q.start, 0, 0, 1.0, law, margin);
  REQUIRE(margin > 1e-4);  // no decision sits on a float32-sized knife edge
  // Exact first: every one of the 216 sequence probabilities.
  const std::vector<double> code_law = code_sequence_law(q);
  double max_diff = 0.0;
  for (size_t i = 0; i < law.size(); ++i) max_diff = std::max(max_diff, std::fabs(code_law[i] - law[i]));
  CHECK(max_diff <= 1e-6);
  const stats::GofResult r = sequence_test(q, law, 77);
  INFO(r.detail);
  CHECK(r.passed(stats::kAlpha));

  // The history-dependent mutants move the joint law and fail the same test.
  for (Mutant m : {Mutant::min_tokens_off_by_one, Mutant::bad_words_ignore_prefix,
                   Mutant::frequency_penalty_counts_prompt, Mutant::presence_penalty_per_occurrence,
                   Mutant::repetition_penalty_ignores_sign, Mutant::mirostat_natural_log_surprise}) {
    ScopedMutant on(m);
    const double tv = reference::total_variation(code_sequence_law(q), law);
    INFO("mutant " << mutant_name(m) << ": TV of the joint law " << tv);
    REQUIRE(tv >= 0.02);
    const stats::GofResult bad = sequence_test(q, law, 77);
    INFO(bad.detail);
    CHECK_FALSE(bad.passed(stats::kAlpha));
  }
}

// ---- Batches: per-row pipelines and per-row randomness --------------------------------------------------

namespace {

constexpr int kBatchV = 5, kBatchRows = 3;

struct BatchSetup {
  std::vector<float> logits;  // [rows, V]
  std::vector<SamplingParams> params;
  std::vector<TokenHistory> histories;
};

BatchSetup batch_setup() {
  BatchSetup b;
  b.logits = {0.3f,  1.0f, -0.5f, 0.8f,  0.0f,    // row 0
              1.2f,  0.1f, 0.9f,  -1.0f, 0.4f,    // row 1
              -0.2f, 0.6f, 0.6f,  1.1f,  -0.7f};  // row 2
  b.params.resize(kBatchRows);
  b.histories.resize(kBatchRows);
  b.params[0].temperature = 0.8f;
  b.params[1].top_k = 3;
  b.params[1].repetition_penalty = 1.5f;
  b.histories[1].prompt = {0, 3};
  b.params[2].min_p = 0.3f;
  b.params[2].banned_tokens = {3};
  return b;
}

// Joint cell of one draw per row: t0 + V t1 + V^2 t2. The rows are independent, so the law is a product.
std::vector<double> reference_batch_law(const BatchSetup& b) {
  std::vector<std::vector<double>> rows;
  for (int r = 0; r < kBatchRows; ++r) {
    const std::vector<float> row(b.logits.begin() + r * kBatchV, b.logits.begin() + (r + 1) * kBatchV);
    rows.push_back(reference::probs(row, b.params[r], b.histories[r]));
  }
  std::vector<double> law(pow_int(kBatchV, kBatchRows), 0.0);
  for (size_t cell = 0; cell < law.size(); ++cell) {
    double p = 1.0;
    size_t rest = cell;
    for (int r = 0; r < kBatchRows; ++r, rest /= kBatchV) p *= rows[r][rest % kBatchV];
    law[cell] = p;
  }
  return law;
}

// process_batch once, then n batch draws with sample_rows; draw i of row r uses (seed, stream of row r, i).
stats::GofResult batch_test(const BatchSetup& b, int64_t n, uint64_t seed) {
  std::vector<SamplerPipeline> pipelines;
  for (int r = 0; r < kBatchRows; ++r) pipelines.emplace_back(b.params[r], kBatchV);
  std::vector<const SamplerPipeline*> pipeline_ptrs;
  std::vector<const TokenHistory*> history_ptrs;
  for (int r = 0; r < kBatchRows; ++r) {
    pipeline_ptrs.push_back(&pipelines[r]);
    history_ptrs.push_back(&b.histories[r]);
  }
  std::vector<float> probs(b.logits.size());
  process_batch(b.logits.data(), kBatchRows, kBatchV, pipeline_ptrs.data(), history_ptrs.data(), probs.data());
  std::vector<int64_t> counts(pow_int(kBatchV, kBatchRows), 0);
  std::vector<RandomKey> keys(kBatchRows);
  std::vector<Token> out(kBatchRows);
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < kBatchRows; ++r)
      keys[r] = RandomKey{seed, philox_stream(static_cast<uint64_t>(r), RandomRole::sample), static_cast<uint64_t>(i)};
    sample_rows(probs.data(), kBatchRows, kBatchV, keys.data(), out.data());
    int cell = 0;
    for (int r = kBatchRows - 1; r >= 0; --r) cell = cell * kBatchV + out[r];
    ++counts[cell];
  }
  return stats::g_test(counts, reference_batch_law(b));
}

}  // namespace

TEST_CASE("a batch's rows follow their own pipelines and draw independently", "[sampler][frequency][batch]") {
  const stats::GofResult r = batch_test(batch_setup(), 250000, 31);
  INFO(r.detail);
  CHECK(r.passed(stats::kAlpha));
}

TEST_CASE("mutant uniform_reused_across_rows fails the batch joint test", "[sampler][mutant][batch]") {
  ScopedMutant on(Mutant::uniform_reused_across_rows);
  const stats::GofResult r = batch_test(batch_setup(), 250000, 31);
  INFO(r.detail);
  CHECK_FALSE(r.passed(stats::kAlpha));
}

// ---- The selector on adversarial distributions (battery B) ----------------------------------------------

namespace {

struct Adversarial {
  std::string name;
  std::vector<double> weights;  // unnormalised on purpose: the selectors must not assume a sum of 1
};

std::vector<Adversarial> adversarial_distributions() {
  std::vector<Adversarial> out;
  {
    Adversarial a{"peaked, K = 16", std::vector<double>(16, 0.002)};
    a.weights[5] = 0.97;
    out.push_back(a);
  }
  {
    Adversarial a{"half the cells zero, K = 32", {}};
    for (int i = 0; i < 32; ++i) a.weights.push_back(i % 2 ? 0.0 : 1.0 + (i % 7));
    a.weights.back() = 2.5;  // the last cell non-zero: the inverse-CDF tail is exercised
    out.push_back(a);
  }
  {
    // Two cells at 1e-4 and two at 1e-5 of the total (expected 10 in 1M draws: the exact binomial check).
    Adversarial a{"rare cells at 1e-4 and 1e-5, K = 64", std::vector<double>(64, 1.0)};
    for (int i : {0, 17}) a.weights[i] = 0.0064;
    for (int i : {40, 63}) a.weights[i] = 0.00064;
    out.push_back(a);
  }
  {
    Adversarial a{"flat, K = 64, sum 3.7", std::vector<double>(64, 3.7 / 64)};
    out.push_back(a);
  }
  return out;
}

std::vector<double> normalized_law(const std::vector<double>& w) {
  double z = 0.0;
  for (double v : w) z += v;
  std::vector<double> p;
  for (double v : w) p.push_back(v / z);
  return p;
}

}  // namespace

TEST_CASE("sample_categorical and sample_from_weights follow adversarial laws exactly",
          "[sampler][frequency][selector]") {
  constexpr int64_t n = 1000000;
  uint64_t seed = 500;
  for (const Adversarial& a : adversarial_distributions()) {
    INFO(a.name);
    const int32_t K = static_cast<int32_t>(a.weights.size());
    const std::vector<float> w32(a.weights.begin(), a.weights.end());
    // The law the selector should follow is that of the float32 weights it is given.
    const std::vector<double> law = normalized_law(std::vector<double>(w32.begin(), w32.end()));
    std::vector<int64_t> counts32(K, 0), counts64(K, 0);
    ++seed;
    const uint64_t stream = philox_stream(0, RandomRole::aux);
    for (int64_t i = 0; i < n; ++i) {
      const RandomKey key{seed, stream, static_cast<uint64_t>(i)};
      ++counts32[sample_categorical(w32.data(), K, key)];
      ++counts64[sample_from_weights(a.weights.data(), K, key.uniform())];
    }
    const stats::GofResult r32 = stats::g_test(counts32, law);
    const stats::GofResult r64 = stats::g_test(counts64, normalized_law(a.weights));
    INFO("float32: " << r32.detail);
    INFO("float64: " << r64.detail);
    CHECK(r32.passed(stats::kAlpha));
    CHECK(r64.passed(stats::kAlpha));
  }
}

TEST_CASE("every sampler-pipeline mutant has a frequency test that detects it", "[sampler][mutant]") {
  const std::vector<MutantCase> cases = mutant_cases();
  for (int m = static_cast<int>(Mutant::top_p_drops_crossing_token);
       m <= static_cast<int>(Mutant::uniform_reused_across_rows); ++m) {
    const Mutant mutant = static_cast<Mutant>(m);
    INFO("mutant " << mutant_name(mutant));
    bool covered = mutant == Mutant::uniform_reused_across_rows;  // the batch joint test above
    for (const MutantCase& mc : cases) covered = covered || mc.mutant == mutant;
    CHECK(covered);
  }
}
