// The distilled n-gram drafter's training (draft/target_labels.h, NgramModel::train with labels): which
// context each label is the target's choice after, the law of the labels at T > 0, and the Kneser-Ney counts
// of labelled n-grams, by hand.
#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "draft/ngram_model.h"
#include "draft/target_labels.h"
#include "harness/models/language_model.h"
#include "kernels/shared/error.h"
#include "tests/statistics/goodness_of_fit.h"
#include "tests/support/mutant_switch.h"

using namespace specula;

namespace {

// A model whose logits after a sequence are a function of the whole sequence: with `fixed` empty, one-hot at
// a hash of every token and the length (so a label names the exact context it was computed after); else the
// row `fixed` whatever the context.
class HashModel : public LanguageModel {
 public:
  HashModel(int32_t V, int64_t positions, std::vector<float> fixed = {})
      : V_(V), positions_(positions), fixed_(std::move(fixed)) {}
  mutable std::atomic<int> calls{0};
  int fail_after = -1;  // >= 0: calls after this many throw, as an interruption would stop the run
  static Token hash(const std::vector<Token>& seq, int32_t V) {
    uint64_t h = seq.size();
    for (Token t : seq) h = h * 1000003u + static_cast<uint64_t>(t) + 1;
    return static_cast<Token>(h % static_cast<uint64_t>(V));
  }
  int32_t vocab_size() const override { return V_; }
  std::string description() const override { return "hash-model"; }
  int64_t max_positions() const override { return positions_; }
  std::unique_ptr<ModelSession> new_session() const override { return std::make_unique<Session>(*this); }

 private:
  struct Session : ModelSession {
    explicit Session(const HashModel& m) : m(m) {}
    void tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) override {
      if (static_cast<int64_t>(context.size()) + tree.max_depth() > m.positions_) fail("window overflow");
      if (++m.calls > m.fail_after && m.fail_after >= 0) fail("interrupted");
      for (int32_t row = 0; row <= tree.size(); ++row) {
        float* o = out + static_cast<size_t>(row) * m.V_;
        if (!m.fixed_.empty()) {
          std::copy(m.fixed_.begin(), m.fixed_.end(), o);
          continue;
        }
        std::vector<Token> seq = context;
        if (row > 0)
          for (Token t : tree.path(row - 1)) seq.push_back(t);
        std::fill(o, o + m.V_, 0.0f);
        o[hash(seq, m.V_)] = 1.0f;
      }
    }
    const HashModel& m;
  };
  int32_t V_;
  int64_t positions_;
  std::vector<float> fixed_;
};

std::vector<Token> corpus(size_t n, int32_t V) {
  std::vector<Token> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<Token>((i * 37 + i / 5) % V);
  return out;
}

}  // namespace

TEST_CASE("target labels: each position labelled once, after the longest context its window holds", "[drafters]") {
  const int32_t V = 61, window = 32, overlap = 8, stride = window - overlap;
  const HashModel model(V, window);
  // 297 positions: the window at 264 reaches the last one, so a window after it would label nothing (and the
  // progress check below would see a count that does not grow).
  const std::vector<Token> tokens = corpus(297, V);
  TargetLabelOptions options;
  options.window = window;
  options.overlap = overlap;
  int64_t last_done = 0;
  options.progress = [&](int64_t done, int64_t all) {
    CHECK(all == 296);
    CHECK(done > last_done);
    last_done = done;
  };
  const std::vector<Token> labels = target_labels(model, tokens, options);
  CHECK(last_done == 296);  // every position but the first, once
  REQUIRE(labels.size() == tokens.size());
  CHECK(labels[0] == tokens[0]);
  for (size_t i = 1; i < tokens.size(); ++i) {
    // Position i is labelled by the first window that reaches it: window 0 covers 1..32, window k >= 1 (start
    // k * stride) positions k * stride + overlap + 1 .. k * stride + window.
    const int64_t k = i <= static_cast<size_t>(window) ? 0 : (static_cast<int64_t>(i) - window + stride - 1) / stride;
    const size_t start = static_cast<size_t>(k * stride);
    CHECK(i - start >= (k == 0 ? 1u : static_cast<size_t>(overlap) + 1));  // the context it keeps
    const std::vector<Token> context(tokens.begin() + start, tokens.begin() + i);
    INFO("position " << i << ", window start " << start);
    CHECK(labels[i] == HashModel::hash(context, V));
  }
  // Threads do not change the labels.
  options.threads = 3;
  options.progress = nullptr;
  CHECK(target_labels(model, tokens, options) == labels);
  // A short corpus (one window, shorter than it) and the bounds.
  const std::vector<Token> few = {3, 4, 5};
  TargetLabelOptions short_run;
  short_run.window = window;
  short_run.overlap = overlap;
  const std::vector<Token> few_labels = target_labels(model, few, short_run);
  CHECK(few_labels[2] == HashModel::hash({3, 4}, V));
  options.overlap = window;
  CHECK_THROWS_WITH(target_labels(model, tokens, options), Catch::Matchers::Contains("overlap"));
  options.overlap = overlap;
  options.window = window + 1;
  CHECK_THROWS_WITH(target_labels(model, tokens, options), Catch::Matchers::Contains("more than hash-model holds"));
  options.window = window;
  options.overlap = overlap;
  options.temperature = -1.0;
  CHECK_THROWS_WITH(target_labels(model, tokens, options), Catch::Matchers::Contains("temperature"));
  options.temperature = 0.0;
  CHECK_THROWS_WITH(target_labels(model, {1, V}, options), Catch::Matchers::Contains("outside the vocabulary"));
}

TEST_CASE("target labels: an interrupted run resumes from its checkpoint", "[drafters]") {
  using namespace specula::testing;
  TempDir dir;
  const std::string path = dir.file("labels.checkpoint");
  const int32_t V = 61;
  const std::vector<Token> tokens = corpus(297, V);
  TargetLabelOptions options;
  options.window = 32;
  options.overlap = 8;
  const HashModel plain(V, 32);
  const std::vector<Token> reference = target_labels(plain, tokens, options);
  const int windows = plain.calls;  // 12
  // Stopped after 5 windows, with a record cut short by the interruption.
  HashModel stopping(V, 32);
  stopping.fail_after = 5;
  options.checkpoint = path;
  CHECK_THROWS_WITH(target_labels(stopping, tokens, options), Catch::Matchers::Contains("interrupted"));
  std::ofstream(path, std::ios::app) << "w 7 177 24 5 6";
  // Resumed: only the other windows run, and the labels are those of an uninterrupted run.
  const HashModel resuming(V, 32);
  int64_t resumed = -1, all = -1, last_done = 0;
  options.resumed = [&](int64_t r, int64_t a) { resumed = r, all = a; };
  options.progress = [&](int64_t done, int64_t) { last_done = done; };
  CHECK(target_labels(resuming, tokens, options) == reference);
  CHECK(resumed == 5);
  CHECK(all == windows);
  CHECK(resuming.calls == windows - 5);
  CHECK(last_done == 296);
  // Everything is in the checkpoint now: a third run makes no target call.
  const HashModel idle(V, 32);
  CHECK(target_labels(idle, tokens, options) == reference);
  CHECK(idle.calls == 0);
  // A checkpoint of another run is refused, naming the file and what differs.
  options.temperature = 0.5;
  CHECK_THROWS_WITH(target_labels(idle, tokens, options),
                    Catch::Matchers::Contains(path) && Catch::Matchers::Contains("'temperature'"));
  options.temperature = 0.0;
  std::vector<Token> other = tokens;
  other[100] = (other[100] + 1) % V;
  CHECK_THROWS_WITH(target_labels(idle, other, options), Catch::Matchers::Contains("'fingerprint'"));
  // Interrupted on one of two threads: whichever windows were finished, the resumed run completes the rest.
  const std::string two = dir.file("two-threads.checkpoint");
  options.checkpoint = two;
  options.threads = 2;
  HashModel stopping_two(V, 32);
  stopping_two.fail_after = 6;
  CHECK_THROWS_WITH(target_labels(stopping_two, tokens, options), Catch::Matchers::Contains("interrupted"));
  const HashModel resuming_two(V, 32);
  resumed = -1;
  CHECK(target_labels(resuming_two, tokens, options) == reference);
  CHECK(resumed >= 1);
  CHECK(resuming_two.calls == windows - resumed);
}

TEST_CASE("target labels at T > 0 are draws from softmax(logits / T)", "[drafters]") {
  // Fixed logits, so the 20000 labels are i.i.d. from one exact law (G-test at the suite's alpha); the mutant
  // that ignores T draws from softmax(logits) and fails the same test.
  const std::vector<float> logits = {0.0f, 1.0f, -0.5f, 2.0f, 0.3f};
  const double T = 0.6;
  std::vector<double> law(logits.size());
  double z = 0.0;
  for (size_t x = 0; x < logits.size(); ++x) z += law[x] = std::exp(logits[x] / T);
  for (double& p : law) p /= z;
  const HashModel model(5, 256, logits);
  const std::vector<Token> tokens(20001, 0);
  TargetLabelOptions options;
  options.temperature = T;
  options.seed = 11;
  options.threads = 2;
  auto tally = [&] {
    const std::vector<Token> labels = target_labels(model, tokens, options);
    std::vector<int64_t> counts(logits.size(), 0);
    for (size_t i = 1; i < labels.size(); ++i) ++counts[labels[i]];
    return counts;
  };
  const stats::GofResult ok = stats::g_test(tally(), law);
  INFO(ok.detail);
  CHECK(ok.passed(stats::kAlpha));
  // Keyed by position: the same labels on one thread as on two.
  const std::vector<Token> on_two = target_labels(model, tokens, options);
  options.threads = 1;
  CHECK(target_labels(model, tokens, options) == on_two);
  options.threads = 2;
  const ScopedMutant mutant(Mutant::distill_labels_at_unit_temperature);
  const stats::GofResult bad = stats::g_test(tally(), law);
  CHECK_FALSE(bad.passed(stats::kAlpha));
}

TEST_CASE("Kneser-Ney on labelled n-grams: hand-computed counts", "[drafters]") {
  // Tokens 0 1 0 1 with labels 0 2 2 1 (label i replaces token i as an n-gram's last token), order 2.
  //   bigrams ending at 1, 2, 3: (0 2), (1 2), (0 1), each once
  //   unigram continuation counts: 2 <- {0, 1} = 2; 1 <- {0} = 1; the corpus start's unigram is label 0 = 1
  const NgramModel m = NgramModel::train({0, 1, 0, 1}, {0, 2, 2, 1}, 2, 3);
  CHECK(m.count({0, 2}) == 1);
  CHECK(m.count({1, 2}) == 1);
  CHECK(m.count({0, 1}) == 1);
  CHECK(m.count({1, 0}) == 0);  // the text's bigram, never a label's
  CHECK(m.count({2}) == 2);
  CHECK(m.count({1}) == 1);
  CHECK(m.count({0}) == 1);
  CHECK(m.num_ngrams(2) == 3);
  // (Labels equal to the tokens are the ordinary model: train(tokens, ...) is this call, and its own
  // hand-computed test in test_drafters.cpp guards that path.)
  CHECK_THROWS_WITH(NgramModel::train({0, 1}, {0}, 2, 3), Catch::Matchers::Contains("1 labels for 2 tokens"));
  CHECK_THROWS_WITH(NgramModel::train({0, 1}, {0, 3}, 2, 3), Catch::Matchers::Contains("label 1 has id 3"));
}

TEST_CASE("specula train-ngram --distill-from: n-grams end in the target's greedy choice", "[drafters][cli]") {
  using namespace specula::testing;
  TempDir dir;
  std::string text;
  for (int i = 0; text.size() < 400; ++i) text += i % 3 ? "the king is dead, long live the king. " : "ROMEO:\n";
  const std::string corpus = dir.write("corpus.txt", text.substr(0, 400)), model = dir.file("distilled.ngram");
  const std::string target = "transformer:" + std::string(SPECULA_SOURCE_DIR) + "/results/models/target";
  const CliResult r = run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + model +
                                  " --distill-from " + target + " --threads 2");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("labelled 399 positions") != std::string::npos);
  const size_t at = r.out.find("next token at ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoi(r.out.substr(at + 14)) > 0);                         // the target is not the text
  CHECK_FALSE(std::filesystem::exists(model + ".labels-checkpoint"));  // removed once the model is written
  const NgramModel m = NgramModel::load(model);
  // The labels reach the counts: the same corpus without --distill-from gives other counts.
  const std::string plain_model = dir.file("plain.ngram");
  REQUIRE(run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + plain_model).exit_code == 0);
  CHECK(NgramModel::load(plain_model).num_ngrams(3) != m.num_ngrams(3));
  // The label of position 10 is the target's argmax after the first 10 bytes: what greedy `generate` emits
  // after them, computed by another path (a prompt's prefill, not a chain's rows).
  std::string prompt;
  for (int i = 0; i < 10; ++i) prompt += (i ? "," : "") + std::to_string(static_cast<unsigned char>(text[i]));
  const CliResult g = run_specula("generate --target " + target + " --method ar --temperature 0 --prompt-tokens " +
                                  prompt + " --max-new-tokens 1 --output " + dir.file("next.txt"));
  REQUIRE(g.exit_code == 0);
  const Token next = std::stoi(read_text(dir.file("next.txt")));
  CHECK(m.count({static_cast<unsigned char>(text[8]), static_cast<unsigned char>(text[9]), next}) >= 1);
  // A target whose vocabulary is not the bytes', and a bad temperature, are errors naming the option.
  const std::string table = dir.write("t.txt", kCliTargetTable);
  const CliResult bad = run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + model +
                                    " --distill-from bigram:" + table);
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("--distill-from") != std::string::npos);
  const CliResult cold = run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + model +
                                     " --distill-from " + target + " --distill-temperature -1");
  CHECK(cold.exit_code != 0);
  CHECK(cold.err.find("temperature") != std::string::npos);
  // A labels checkpoint left by another run (here: another seed) is refused, naming it; the run resumes from
  // one of its own (draft/target_labels.h; tested above).
  const CliResult first = run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + model +
                                      " --distill-from " + target + " --distill-temperature 1 --seed 1");
  REQUIRE(first.exit_code == 0);
  std::ofstream(model + ".labels-checkpoint")
      << R"({"format":"specula-target-labels","version":1,"tokens":400,"seed":2})"
      << "\n";
  const CliResult other = run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + model +
                                      " --distill-from " + target + " --distill-temperature 1 --seed 1");
  CHECK(other.exit_code != 0);
  CHECK(other.err.find(".labels-checkpoint") != std::string::npos);
  CHECK(other.err.find("another run") != std::string::npos);
  const CliResult stray = run_specula("train-ngram --corpus " + corpus + " --order 3 --output " + model + " --seed 3");
  CHECK(stray.exit_code != 0);
  CHECK(stray.err.find("--seed is only used with --distill-from") != std::string::npos);
}
