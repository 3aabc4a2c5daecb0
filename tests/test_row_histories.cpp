// The histories of draft and verifier rows (SamplerPipeline::trimmed, row_history, path_history, pending_history):
// a row holds only the output's last tokens that a bad word reads or that the penalty counts (penalty_counts.h) have
// not counted, so a step's rows cost nothing that grows with the output; and every row's processed law is, bit for
// bit, the law of the whole history walked.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "draft/candidate_sampling.h"
#include "draft/model_drafter.h"
#include "harness/generation/generator.h"
#include "harness/models/table_model.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/filter_stages.h"
#include "verify/sampling/penalty_counts.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/sampling/token_constraint.h"
#include "verify/sampling/token_history.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/token_tree.h"

using namespace specula;
using Catch::Contains;

namespace {

constexpr int32_t kV = 10;
constexpr int32_t kOutput = 5000;

// A long committed history whose output ends ... 4 5 6 (a bad word's prefix reaches back three tokens there). The
// prompt holds 0-4, the output 0, 4, 8, 5 and 6: the paths' 7 is in neither, their 1, 2 and 3 in the prompt alone.
TokenHistory long_history() {
  TokenHistory h;
  for (int32_t i = 0; i < 40; ++i) h.prompt.push_back((i * 7) % 5);
  for (int32_t i = 0; i < kOutput - 3; ++i) h.output.push_back((i * i + 3 * i) % kV);
  for (Token t : {4, 5, 6}) h.output.push_back(t);
  h.mirostat_mu = 9.0;  // started: mirostat's rows read it
  return h;
}

// Depth 1: 7, 8 and 1; depth 2: 2 under 7, 3 under 8; depth 3: 8 under 7 2. Bad words' prefixes match along it, and
// no path token is one its parent's row bans (mirostat's mu reads the law of each).
TokenTree tree_of_paths() {
  TokenTree t;
  t.add(7, -1);  // node 0
  t.add(8, -1);  // node 1
  t.add(1, -1);  // node 2
  t.add(2, 0);   // node 3: 7 2
  t.add(3, 1);   // node 4: 8 3
  t.add(8, 3);   // node 5: 7 2 8
  return t;
}

std::vector<float> row_logits(int32_t rows) {
  std::vector<float> logits(static_cast<size_t>(rows) * kV);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(1.7 * static_cast<double>(i)));
  return logits;
}

struct Case {
  std::string name;
  SamplingParams params;
  bool counted = false;  // the committed history keeps penalty counts
};

std::vector<Case> cases() {
  std::vector<Case> out;
  SamplingParams plain;
  plain.temperature = 0.8f;
  out.push_back({"plain", plain});
  SamplingParams masks = plain;
  // {4 5 6 9}: its prefix is the committed output's last three tokens (the root's row bans 9); {6 7 2 0} spans the
  // committed output and a path; {8 3 5} lies on a path. min_tokens = the output's length + 2: rows at depth 0 and 1
  // ban the stop token, deeper ones do not, which only the produced length, not the held tail, tells.
  masks.bad_words = {{4, 5, 6, 9}, {6, 7, 2, 0}, {8, 3, 5}};
  masks.min_tokens = kOutput + 2;
  masks.stop_tokens = {5};
  out.push_back({"bad words and min_tokens", masks});
  SamplingParams mirostat = masks;
  mirostat.mirostat = 2;
  mirostat.mirostat_tau = 5.0f;  // keeps every token of these rows: no path token's surprise is infinite
  out.push_back({"mirostat", mirostat});
  SamplingParams penalised = masks;
  penalised.repetition_penalty = 1.3f;
  penalised.frequency_penalty = 0.002f;  // the counts run to hundreds: no token's law underflows
  out.push_back({"penalties", penalised});
  out.push_back({"penalties, counted", penalised, true});
  SamplingParams only_repetition;
  only_repetition.temperature = 0.8f;
  only_repetition.repetition_penalty = 0.7f;
  out.push_back({"repetition alone, counted", only_repetition, true});
  return out;
}

// The whole history of row `row`: every committed token, advanced along the path with its parents' laws, and no counts.
TokenHistory whole_history(const SamplerPipeline& pipeline, const TokenHistory& committed, const TokenTree& tree,
                           const std::vector<float>& probs, int32_t row) {
  TokenHistory h = committed;
  h.counts = nullptr;
  if (row == 0) return h;
  for (int32_t n : tree.path_nodes(row - 1))
    h = pipeline.advance(h, tree.tokens[n], probs.data() + static_cast<size_t>(tree.parent[n] + 1) * kV);
  return h;
}

}  // namespace

TEST_CASE("a row's history holds what its pipeline reads, and its law is the whole history's, bit for bit",
          "[sampler]") {
  const TokenTree tree = tree_of_paths();
  const int32_t rows = tree.size() + 1;
  const std::vector<float> logits = row_logits(rows);
  for (const Case& c : cases()) {
    INFO(c.name);
    const SamplerPipeline pipeline(c.params, kV);
    TokenHistory committed = long_history();
    if (c.counted) pipeline.keep_counts(committed);
    REQUIRE((committed.counts != nullptr) == c.counted);
    // The reference: each row processed with its whole history, in topological order.
    std::vector<float> whole(logits.size());
    for (int32_t row = 0; row < rows; ++row) {
      const TokenHistory h = whole_history(pipeline, committed, tree, whole, row);
      pipeline.process(logits.data() + static_cast<size_t>(row) * kV, h, whole.data() + static_cast<size_t>(row) * kV);
    }
    std::vector<float> probs(logits.size());
    process_tree_rows(pipeline, logits.data(), committed, tree, probs.data());
    CHECK(probs == whole);
    for (int32_t row = 0; row < rows; ++row) {
      INFO("row " << row);
      const int32_t depth = row == 0 ? 0 : tree.depth(row - 1);
      const TokenHistory verifier_row = row_history(pipeline, committed, tree, probs.data(), row);
      const TokenHistory draft_row = path_history(
          pipeline, committed, tree, row, [&](int32_t r) { return probs.data() + static_cast<size_t>(r) * kV; });
      for (const TokenHistory* h : {&verifier_row, &draft_row}) {
        CHECK(h->produced() == kOutput + depth);
        if (c.params.penalised() && !c.counted) {
          CHECK(h->output_dropped == 0);  // a penalty walks every id
          CHECK(h->prompt == committed.prompt);
        } else {
          // The longest bad word's prefix, or the path the counts have not counted.
          CHECK(h->output.size() <= 3 + static_cast<size_t>(depth));
          CHECK(h->prompt.empty());
          CHECK(h->counts == committed.counts);
        }
        std::vector<float> law(kV);
        pipeline.process(logits.data() + static_cast<size_t>(row) * kV, *h, law.data());
        CHECK(std::vector<float>(whole.begin() + row * kV, whole.begin() + (row + 1) * kV) == law);
        CHECK(h->constraint_state == committed.constraint_state);
        if (c.params.mirostat == 2)
          CHECK(h->mirostat_mu == whole_history(pipeline, committed, tree, whole, row).mirostat_mu);
      }
    }
    // The rows the case is built on: the root's bans 9 (the committed tail) and, under min_tokens, the stop token; the
    // row after 7 2 bans 0 (6 7 2 | 0) but not the stop token (kOutput + 2 produced); the row after 8 3 bans 5.
    if (!c.params.bad_words.empty()) {
      CHECK(probs[9] == 0.0f);
      CHECK(probs[5] == 0.0f);
      CHECK(probs[static_cast<size_t>(tree.row_of(3)) * kV + 5] > 0.0f);
      CHECK(probs[static_cast<size_t>(tree.row_of(3)) * kV + 0] == 0.0f);
      CHECK(probs[static_cast<size_t>(tree.row_of(4)) * kV + 5] == 0.0f);
    }
    for (int32_t n = 0; n < tree.size(); ++n)
      CHECK(probs[static_cast<size_t>(tree.parent[n] + 1) * kV + static_cast<size_t>(tree.tokens[n])] > 0.0f);
  }
}

TEST_CASE("a row's history a pipeline cannot read whole is refused by name", "[sampler]") {
  const TokenHistory committed = long_history();
  SamplingParams masks;
  masks.bad_words = {{1, 2}};
  const SamplerPipeline short_tail(masks, kV);
  const TokenHistory trimmed = short_tail.trimmed(committed);
  REQUIRE(trimmed.output.size() == 1);
  REQUIRE(trimmed.output_dropped == kOutput - 1);
  const std::vector<float> logits(kV, 0.5f);
  // A pipeline whose bad word reaches further back than the tail held.
  SamplingParams longer = masks;
  longer.bad_words = {{1, 2, 3, 4}};
  CHECK_THROWS_WITH(SamplerPipeline(longer, kV).process(logits, trimmed),
                    Contains("history: it holds the last 1 of 5000 output tokens, but a bad word reads the last 3"));
  // A penalty, which counts the ids left out.
  SamplingParams penalised = masks;
  penalised.presence_penalty = 0.5f;
  CHECK_THROWS_WITH(SamplerPipeline(penalised, kV).process(logits, trimmed),
                    Contains("history: its first 4999 output tokens were left out (SamplerPipeline::trimmed), but a "
                             "penalty counts them"));
  // The device's batch makes the same check.
  SamplingParams presence;
  presence.presence_penalty = 0.5f;
  CHECK_THROWS_WITH(SamplerBatch(kV, {SamplerBatchRow{&presence, &trimmed, RandomKey{}}}),
                    Contains("row 0: history: its first 4999 output tokens were left out (SamplerPipeline::trimmed), "
                             "but a penalty counts them"));
  // A history with ids still in device memory is kept whole: its placeholders are its last tokens.
  TokenHistory pending = committed;
  pending.output.push_back(0);
  pending.pending_ids = {3};
  CHECK(short_tail.trimmed(pending).output.size() == pending.output.size());
  CHECK(pending_history(short_tail, committed, {3, 4}).output.size() == 3);
}

TEST_CASE("a sequence's penalty counts are kept up as it grows, and left alone while a step's rows share them",
          "[sampler]") {
  SamplingParams params;
  params.temperature = 0.8f;
  params.repetition_penalty = 1.2f;
  params.frequency_penalty = 0.01f;
  params.presence_penalty = 0.1f;
  const SamplerPipeline pipeline(params, kV);
  TokenHistory sequence = long_history();
  pipeline.keep_counts(sequence);
  const std::vector<float> logits = row_logits(1);
  const auto law_of = [&](const TokenHistory& h) { return pipeline.process(logits, h); };
  const auto walked_law = [&](TokenHistory h) {
    h.counts = nullptr;
    return pipeline.process(logits, h);
  };
  // Grown alone: every token is counted as it comes.
  for (int32_t i = 0; i < 30; ++i) {
    const std::vector<float> probs = law_of(sequence);
    sequence = pipeline.advance(std::move(sequence), static_cast<Token>((i * 3 + 7) % kV), probs.data());
  }
  CHECK(sequence.counts->output_counted == sequence.produced());
  CHECK(law_of(sequence) == walked_law(sequence));
  {
    // A row shares the counts: the sequence's next tokens are left uncounted, and read as such.
    const TokenHistory row = pipeline.trimmed(sequence);
    const std::vector<float> law_then = walked_law(sequence);
    for (Token t : {9, 7, 9}) sequence = pipeline.advance(std::move(sequence), t, law_of(sequence).data());
    CHECK(sequence.counts->output_counted == sequence.produced() - 3);
    CHECK(law_of(sequence) == walked_law(sequence));
    CHECK(law_of(pipeline.trimmed(sequence)) == walked_law(sequence));
    CHECK(law_of(row) == law_then);  // the counts it shares were not moved
  }
  // Alone again: the next token catches them up.
  sequence = pipeline.advance(std::move(sequence), 2, law_of(sequence).data());
  CHECK(sequence.counts->output_counted == sequence.produced());
  CHECK(law_of(sequence) == walked_law(sequence));
  // Counts a history disagrees with are refused by name.
  TokenHistory shorter = sequence;
  shorter.output.pop_back();
  CHECK_THROWS_WITH(law_of(shorter), Contains("penalty counts cover 5034 output tokens, but it has 5033"));
  TokenHistory other_prompt = sequence;
  other_prompt.prompt.pop_back();
  CHECK_THROWS_WITH(law_of(other_prompt), Contains("penalty counts are of a prompt of 40 tokens, not 39"));
  CHECK_THROWS_WITH(SamplerPipeline(params, kV + 1).process(std::vector<float>(kV + 1, 0.0f), sequence),
                    Contains("penalty counts are of a vocabulary of 10, not 11"));
  // The device's batch makes the same checks.
  const auto batch_of = [&](int32_t vocab, const TokenHistory& h) {
    return SamplerBatch(vocab, {SamplerBatchRow{&params, &h, RandomKey{}}});
  };
  CHECK_NOTHROW(batch_of(kV, sequence));
  CHECK_THROWS_WITH(batch_of(kV, shorter), Contains("row 0: history: its penalty counts cover 5034 output tokens"));
  CHECK_THROWS_WITH(batch_of(kV, other_prompt), Contains("row 0: history: its penalty counts are of a prompt of 40"));
  CHECK_THROWS_WITH(batch_of(kV + 1, sequence),
                    Contains("row 0: history: its penalty counts are of a vocabulary of 10"));
  TokenHistory bad_id = long_history();
  bad_id.output.push_back(kV);
  CHECK_THROWS_WITH(pipeline.keep_counts(bad_id), Contains("history: output token id 10 is outside the vocabulary"));
}

TEST_CASE("a trimmed row reads the produced length: a constraint under min_tokens, and the device's batch",
          "[sampler]") {
  // "[a-h]*i?" with stop token j: after i the match must end, which a stop token may do only from min_tokens on. So the
  // root row (kOutput produced) cannot take i, and the row after one more token can.
  std::vector<std::string> letters;
  for (int32_t t = 0; t < kV; ++t) letters.push_back(std::string(1, static_cast<char>('a' + t)));
  SamplingParams params;
  params.temperature = 0.8f;
  params.min_tokens = kOutput + 2;
  params.stop_tokens = {9};
  params.constraint = TokenConstraint::from_regex("[a-h]*i?", letters, {9}, SamplerMasks{{}, params.min_tokens});
  const SamplerPipeline pipeline(params, kV);
  TokenHistory committed;
  for (int32_t i = 0; i < kOutput; ++i) committed.output.push_back(i % 8);
  committed.constraint_state = params.constraint->walk(committed.output);
  const TokenTree chain = TokenTree::chain({0, 8});
  const std::vector<float> logits = row_logits(3);
  std::vector<float> probs(logits.size()), whole(logits.size());
  process_tree_rows(pipeline, logits.data(), committed, chain, probs.data());
  for (int32_t row = 0; row < 3; ++row)
    pipeline.process(logits.data() + row * kV, whole_history(pipeline, committed, chain, whole, row),
                     whole.data() + row * kV);
  CHECK(probs == whole);
  CHECK(probs[8] == 0.0f);
  CHECK(probs[kV + 8] > 0.0f);
  CHECK(probs[2 * kV + 9] == 1.0f);  // after "a i" only the stop token
  CHECK(row_history(pipeline, committed, chain, probs.data(), 2).output.size() ==
        34);  // the error's context, and "a i"

  // The device's batch reads the same of a trimmed row as of a whole one: min_tokens' ban, and a penalty's counts.
  SamplingParams device = params;
  device.constraint = nullptr;
  device.min_tokens = kOutput + 1;
  SamplingParams penalised = device;
  penalised.repetition_penalty = 1.2f;
  penalised.frequency_penalty = 0.1f;
  for (const SamplingParams* s : {&device, &penalised}) {
    INFO((s->penalised() ? "penalised" : "min_tokens alone"));
    const SamplerPipeline p(*s, kV);
    TokenHistory sequence = long_history();
    p.keep_counts(sequence);
    REQUIRE((sequence.counts != nullptr) == s->penalised());
    // Rows at depths 0, 1 and 2 of a path 7 3: min_tokens binds at the first alone.
    std::vector<TokenHistory> trimmed = {p.trimmed(sequence)}, walked = {sequence};
    walked[0].counts = nullptr;
    for (Token t : {7, 3}) {
      trimmed.push_back(trimmed.back().extended(t));
      walked.push_back(walked.back().extended(t));
    }
    for (size_t r = 0; r < trimmed.size(); ++r) CHECK(trimmed[r].output.size() < 10);
    // And the sequence's own row (autoregressive decoding), whole with its counts: every held token is counted.
    trimmed.push_back(sequence);
    walked.push_back(walked[0]);
    std::vector<SamplerBatchRow> trimmed_rows, walked_rows;
    for (size_t r = 0; r < trimmed.size(); ++r) {
      trimmed_rows.push_back(SamplerBatchRow{s, &trimmed[r], RandomKey{}});
      walked_rows.push_back(SamplerBatchRow{s, &walked[r], RandomKey{}});
    }
    const SamplerBatch from_trimmed(kV, trimmed_rows), from_walked(kV, walked_rows);
    CHECK(from_trimmed.banned == from_walked.banned);
    CHECK(from_trimmed.prompt == from_walked.prompt);
    CHECK(from_trimmed.output_counts == from_walked.output_counts);
    for (size_t r = 0; r < trimmed.size(); ++r) CHECK(from_trimmed.rows[r].flags == from_walked.rows[r].flags);
    REQUIRE(from_walked.banned.size() == 4);  // one word a row
    CHECK(from_walked.banned[0] == 1u << 9);
    CHECK(from_walked.banned[1] == 0u);
    CHECK(from_walked.banned[3] == 1u << 9);
    if (s->penalised()) CHECK(from_walked.output_counts[2 * kV + 7] == from_walked.output_counts[7] + 1);
  }
}

TEST_CASE("a row whose filter stage reads the history gets the whole history", "[sampler]") {
  // A stage registered in a child process (the table is the process's): it removes the output's last token, which a
  // trimmed history would not hold.
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      const auto value = [](const SamplingParams& s) { return s.stage_value("no_repeat_last", 0.0); };
      const auto set = [](SamplingParams& s, double v) { s.stage_values["no_repeat_last"] = v; };
      add_filter_stage({"no_repeat_last",
                        {{"no_repeat_last", "drop the output's last token (0 = off)", false, value, set}},
                        0.0,
                        [](const SamplingParams& s) { return s.stage_value("no_repeat_last", 0.0) > 0.0; },
                        [](const SamplingParams&) {},
                        [](Candidates& c, const SamplingParams&, const TokenHistory& h) {
                          if (!h.output.empty()) c.keep_if([&](size_t j) { return c.ids[j] != h.output.back(); });
                        },
                        true,
                        false});
      SamplingParams params;
      params.temperature = 0.8f;
      params.stage_values["no_repeat_last"] = 1.0;
      const SamplerPipeline pipeline(params, kV);
      const TokenHistory committed = long_history();
      const TokenTree tree = tree_of_paths();
      const std::vector<float> logits = row_logits(tree.size() + 1);
      std::vector<float> probs(logits.size()), whole(logits.size());
      process_tree_rows(pipeline, logits.data(), committed, tree, probs.data());
      for (int32_t row = 0; row <= tree.size(); ++row)
        pipeline.process(logits.data() + row * kV, whole_history(pipeline, committed, tree, whole, row),
                         whole.data() + row * kV);
      if (pipeline.trimmed(committed).output_dropped != 0) code = 2;
      if (probs != whole || probs[6] != 0.0f) code = 3;  // the root's row drops 6, the output's last token
      TokenHistory cut = committed;
      cut.output_dropped = 1;
      try {
        pipeline.process(logits.data(), cut, probs.data());
        code = 4;
      } catch (const Error& e) {
        if (std::string(e.what()).find("but a filter stage reads the history") == std::string::npos) code = 5;
      }
    } catch (...) {
      code = 6;
    }
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

// Proposes nothing and notes, at every step, whether the committed history it is given has penalty counts and whether
// they are caught up (the generator's sequence alone holds them between steps).
class CountsProbe : public Drafter {
 public:
  explicit CountsProbe(std::vector<std::string>* seen) : seen_(seen) {}
  std::string name() const override { return "counts-probe"; }
  TokenTree propose(const DraftRequest& r) override {
    const TokenHistory& h = *r.history;
    seen_->push_back(!h.counts ? "none" : h.counts->output_counted == h.produced() ? "current" : "behind");
    return TokenTree::chain({});
  }

 private:
  std::vector<std::string>* seen_;
};

class CountsProbeFactory : public DrafterFactory {
 public:
  CountsProbeFactory(bool penalised, std::vector<std::string>* seen) : penalised_(penalised), seen_(seen) {}
  std::unique_ptr<Drafter> create() const override { return std::make_unique<CountsProbe>(seen_); }
  int32_t vocab_size() const override { return kV; }
  std::string description() const override { return "counts-probe"; }
  bool drafts_penalised() const override { return penalised_; }

 private:
  bool penalised_;
  std::vector<std::string>* seen_;
};

}  // namespace

TEST_CASE("the generator keeps a sequence's penalty counts where the target's or the draft's settings penalise",
          "[sampler]") {
  std::vector<float> logits(static_cast<size_t>(kV) * kV);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(0.9 * static_cast<double>(i)));
  const auto target = std::make_shared<TableModel>(1, kV, logits, "counts table");
  SamplingParams plain;
  plain.temperature = 0.8f;
  SamplingParams penalised = plain;
  penalised.repetition_penalty = 1.2f;
  GenerationConfig config;
  config.method = VerifyMethod::chain;
  config.num_draft_tokens = 2;
  config.max_new_tokens = 20;
  struct Run {
    const SamplingParams* target;
    bool draft_penalised;
    const char* expected;
  };
  for (const Run& run : {Run{&plain, false, "none"}, Run{&penalised, false, "current"}, Run{&plain, true, "current"}}) {
    INFO("target penalised " << run.target->penalised() << ", draft penalised " << run.draft_penalised);
    std::vector<std::string> seen;
    const auto probe = std::make_shared<CountsProbeFactory>(run.draft_penalised, &seen);
    GenerationMetrics metrics;
    Generator(target, *run.target, probe, config).generate({1, 2}, 0, metrics);
    REQUIRE(seen.size() >= 20);  // one step a token: nothing is proposed
    CHECK(std::count(seen.begin(), seen.end(), run.expected) == static_cast<std::ptrdiff_t>(seen.size()));
  }
  // The drafters that process rows say whether their settings penalise.
  CHECK(ModelDrafterFactory(target, penalised).drafts_penalised());
  CHECK_FALSE(ModelDrafterFactory(target, plain).drafts_penalised());
}
