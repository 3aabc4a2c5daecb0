// The histories of draft and verifier rows (SamplerPipeline::trimmed, row_history, path_history, pending_history):
// a row whose pipeline counts no ids holds only the output's last tokens that a bad word reads, so a step's rows cost
// nothing that grows with the output; and every row's processed law is, bit for bit, the law of the whole history.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "draft/candidate_sampling.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/sampling/token_history.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/token_tree.h"

using namespace specula;
using Catch::Contains;

namespace {

constexpr int32_t kV = 10;
constexpr int32_t kOutput = 5000;

// A long committed history whose output ends ... 4 5 6 (a bad word's prefix reaches back three tokens there).
TokenHistory long_history() {
  TokenHistory h;
  for (int32_t i = 0; i < 40; ++i) h.prompt.push_back((i * 7) % kV);
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
  return out;
}

// The whole history of row `row`: every committed token, advanced along the path with its parents' laws.
TokenHistory whole_history(const SamplerPipeline& pipeline, const TokenHistory& committed, const TokenTree& tree,
                           const std::vector<float>& probs, int32_t row) {
  TokenHistory h = committed;
  if (row == 0) return h;
  for (int32_t n : tree.path_nodes(row - 1))
    h = pipeline.advance(h, tree.tokens[n], probs.data() + static_cast<size_t>(tree.parent[n] + 1) * kV);
  return h;
}

}  // namespace

TEST_CASE("a row's history holds what its pipeline reads, and its law is the whole history's, bit for bit",
          "[sampler]") {
  const TokenHistory committed = long_history();
  const TokenTree tree = tree_of_paths();
  const int32_t rows = tree.size() + 1;
  const std::vector<float> logits = row_logits(rows);
  for (const Case& c : cases()) {
    INFO(c.name);
    const SamplerPipeline pipeline(c.params, kV);
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
        if (c.params.penalised()) {
          CHECK(h->output_dropped == 0);  // a penalty counts every id
          CHECK(h->prompt == committed.prompt);
        } else {
          CHECK(h->output.size() <= 3 + static_cast<size_t>(depth));  // the longest bad word's prefix, and the path
          CHECK(h->prompt.empty());
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
  // A history with ids still in device memory is kept whole: its placeholders are its last tokens.
  TokenHistory pending = committed;
  pending.output.push_back(0);
  pending.pending_ids = {3};
  CHECK(short_tail.trimmed(pending).output.size() == pending.output.size());
  CHECK(pending_history(short_tail, committed, {3, 4}).output.size() == 3);
}
