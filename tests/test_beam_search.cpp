// Beam search (harness/generation/beam_search.h) against exhaustive search on small table models: with a
// width of at least V^L nothing is ever pruned, so the best hypothesis and the n-best list must equal the
// exhaustive optimum over every continuation (stop-ended or full-length), scores included. Also: width 1
// is greedy decoding, constraints and penalties apply to beams, diverse beam search's groups, one batched
// target call per step with a session per beam (rows run bounded, sessions bounded before the search), and
// `specula generate --method beam` end to end.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "cli_runner.h"
#include "harness/generation/beam_search.h"
#include "harness/generation/beam_sessions.h"
#include "kernels/shared/error.h"
#include "kernels/shared/host_memory.h"
#include "speculative_fixtures.h"
#include "verify/sampling/token_constraint.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::EndsWith;
using Catch::Matchers::StartsWith;

namespace {

struct Scored {
  std::vector<Token> tokens;
  double logprob = 0.0;
  double score = 0.0;
};

// Every hypothesis beam search could return: sequences ended by a stop token (stop included) and
// sequences of exactly L tokens without one, with the processed log-probability of each, best first.
std::vector<Scored> exhaustive(const TableModel& model, const SamplerPipeline& pipeline,
                               const std::vector<Token>& prompt, int32_t L, double alpha) {
  const int32_t V = model.vocab_size();
  const std::vector<Token>& stops = pipeline.params().stop_tokens;
  std::vector<Scored> out;
  std::function<void(std::vector<Token>, TokenHistory, double)> walk = [&](std::vector<Token> tokens, TokenHistory h,
                                                                           double lp) {
    std::vector<Token> context = prompt;
    context.insert(context.end(), tokens.begin(), tokens.end());
    std::vector<float> p(V);
    pipeline.process(model.row_after(context), h, p.data());
    for (Token x = 0; x < V; ++x) {
      if (!(p[x] > 0.0f)) continue;
      std::vector<Token> next = tokens;
      next.push_back(x);
      const double next_lp = lp + std::log(static_cast<double>(p[x]));
      const bool stop = std::find(stops.begin(), stops.end(), x) != stops.end();
      if (stop || static_cast<int32_t>(next.size()) == L) {
        out.push_back({next, next_lp, next_lp / std::pow(static_cast<double>(next.size()), alpha)});
      } else {
        walk(next, pipeline.advance(h, x, p.data()), next_lp);
      }
    }
  };
  TokenHistory root;
  root.prompt = prompt;
  walk({}, root, 0.0);
  std::stable_sort(out.begin(), out.end(), [](const Scored& a, const Scored& b) { return a.score > b.score; });
  return out;
}

SamplingParams beam_params(std::vector<Token> stops) {
  SamplingParams s;
  s.repetition_penalty = 1.3f;
  s.frequency_penalty = 0.2f;
  s.stop_tokens = std::move(stops);
  return s;
}

// A table model whose sessions count the rows a caching session runs: the context past the prefix it shares with the
// session's last context (a KV cache keeps that prefix), and the tree's nodes; a fresh session's first call for a
// context alone that another fresh session ran last runs nothing (a transformer's prompt cache).
class RowCounter : public LanguageModel {
 public:
  RowCounter(std::shared_ptr<const TableModel> table, int64_t session_bytes)
      : table_(std::move(table)), session_bytes_(session_bytes) {}
  int32_t vocab_size() const override { return table_->vocab_size(); }
  std::string description() const override { return "row counter"; }
  std::unique_ptr<ModelSession> new_session() const override {
    ++sessions;
    return std::make_unique<Session>(*this);
  }
  void batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const override {
    ++batches;
    LanguageModel::batch_tree_logits(calls);
  }
  int64_t session_bytes() const override { return session_bytes_; }
  mutable int64_t sessions = 0, batches = 0, rows = 0;

 private:
  class Session : public ModelSession {
   public:
    explicit Session(const RowCounter& model) : model_(model), table_(model.table_->new_session()) {}
    void tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) override {
      const size_t n = std::min(last_.size(), context.size());
      const size_t shared =
          static_cast<size_t>(std::mismatch(last_.begin(), last_.begin() + n, context.begin()).first - last_.begin());
      const bool prompt_alone = last_.empty() && tree.size() == 0;
      if (!(prompt_alone && context == model_.last_prompt_))
        model_.rows += static_cast<int64_t>(context.size() - shared) + tree.size();
      if (prompt_alone) model_.last_prompt_ = context;
      last_ = context;
      table_->tree_logits(context, tree, out);
    }

   private:
    const RowCounter& model_;
    std::unique_ptr<ModelSession> table_;
    std::vector<Token> last_;
  };
  std::shared_ptr<const TableModel> table_;
  int64_t session_bytes_;
  mutable std::vector<Token> last_prompt_;
};

}  // namespace

TEST_CASE("beam search runs each beam in its own session, one batched call a step, sessions bounded first", "[beam]") {
  constexpr int32_t V = 16, L = 300;
  const TablePair pair = random_pair(2, V, 76, 1.0, 0.0);
  const std::vector<Token> prompt = {0, 3};
  for (const int32_t groups : {1, 2}) {
    INFO("groups " << groups);
    BeamSearchConfig config;
    config.beam_width = 4;
    config.num_groups = groups;
    config.diversity_penalty = groups > 1 ? 0.5 : 0.0;
    config.max_new_tokens = L;
    const auto counter = std::make_shared<RowCounter>(pair.target, 0);
    GenerationMetrics m;
    const BeamSearchOutput out = BeamSearch(counter, beam_params({}), config).search(prompt, m);
    GenerationMetrics plain;
    CHECK(BeamSearch(pair.target, beam_params({}), config).search(prompt, plain).nbest[0].tokens ==
          out.nbest[0].tokens);
    REQUIRE(m.steps == L);
    CHECK(counter->batches == m.steps);
    CHECK(m.target_calls == m.steps);
    CHECK(counter->sessions <= config.beam_width);
    // A beam that continues in its parent's session runs one row; a sibling reruns its part since its session's beam
    // diverged. One session's tree of every beam's suffix since the beams diverged would run the beams' whole suffixes
    // every step: here thousands of rows a step by the end.
    INFO("rows " << counter->rows);
    CHECK(counter->rows <= 3 * config.beam_width * L);
  }
  // A new session is given the prompt alone first, which the first session's prompt serves: a long prompt runs once.
  {
    std::vector<Token> long_prompt;
    for (int32_t i = 0; i < 60; ++i) long_prompt.push_back((i * 7 + 3) % V);
    BeamSearchConfig config;
    config.max_new_tokens = 3;
    const auto counter = std::make_shared<RowCounter>(pair.target, 0);
    GenerationMetrics m;
    BeamSearch(counter, beam_params({}), config).search(long_prompt, m);
    INFO("rows " << counter->rows);
    CHECK(counter->sessions == config.beam_width);
    CHECK(counter->rows <= 60 + 2 * config.beam_width * config.max_new_tokens);
  }
  // Bounded before any call: a beam a session, in the host's memory (where its size can be read).
  if (mem_available_bytes() < 0) return;
  const auto huge = std::make_shared<RowCounter>(pair.target, int64_t{1} << 56);
  BeamSearchConfig config;
  GenerationMetrics m;
  CHECK_THROWS_WITH(BeamSearch(huge, beam_params({}), config).search(prompt, m),
                    Contains("beam search: 4 beams need") && Contains("use a narrower beam_width"));
  CHECK(huge->sessions == 0);
  // Lockstep decoding's batch is bounded by the same check, in its own words.
  GenerationConfig lockstep;
  lockstep.lockstep = true;
  lockstep.max_new_tokens = 4;
  GenerationMetrics lm;
  CHECK_THROWS_WITH(Generator(huge, beam_params({}), nullptr, lockstep).generate_many(prompt, 0, 3, lm),
                    StartsWith("lockstep: 3 sequences need ") &&
                        EndsWith(" MiB is available (MemAvailable): run fewer sequences together"));
  CHECK(huge->sessions == 0);
}

TEST_CASE("beam sessions: a beam continues in its parent's session, a sibling in the free one sharing most", "[beam]") {
  const TablePair pair = random_pair(2, 16, 77, 1.0, 0.0);
  const auto counter = std::make_shared<RowCounter>(pair.target, 0);
  const std::vector<Token> prompt = {0, 3};
  BeamSessions sessions(*counter);
  double seconds = 0.0;
  // Each row's logits are the table's after the prompt and the row's tokens, whichever session ran it.
  const auto run = [&](const std::vector<std::vector<Token>>& tokens, const std::vector<int32_t>& parents) {
    std::vector<BeamRow> beams;
    for (size_t i = 0; i < tokens.size(); ++i) beams.push_back({&tokens[i], parents[i]});
    const int64_t rows_before = counter->rows;
    BeamStep step = sessions.step(prompt, beams, seconds);
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::vector<Token> context = prompt;
      context.insert(context.end(), tokens[i].begin(), tokens[i].end());
      const float* expected = pair.target->row_after(context);
      CHECK(std::equal(expected, expected + 16, step.logits.begin() + step.row_of[i] * 16));
    }
    return std::make_pair(step, counter->rows - rows_before);
  };
  CHECK(run({{}}, {-1}).first.session_of_row == std::vector<int32_t>{0});
  // New sessions past the prompt are given it alone first, which the first session's prompt serves.
  const auto [second, second_rows] = run({{2, 2}, {1, 1}, {2, 3}}, {-1, -1, -1});
  CHECK(second.session_of_row == std::vector<int32_t>{0, 1, 2});
  CHECK(second_rows == 2 + 2 + 2);
  // {2, 3, 9} continues in its parent's session 2, though {2, 3, 8}, an earlier row, shares more with it than with
  // any other; {2, 3, 8} takes session 0 ({2, 2}, one token shared) over session 1 ({1, 1}, none); identical beams
  // share a row.
  const auto [third, third_rows] = run({{2, 3, 8}, {2, 3, 9}, {2, 2, 7}, {2, 3, 9}}, {-1, 2, -1, 2});
  CHECK(third.row_of == std::vector<int32_t>{0, 1, 2, 1});
  CHECK(third.session_of_row == std::vector<int32_t>{0, 2, 1});
  CHECK(third_rows == 2 + 1 + 3);
  // Two children of one session: the first continues there, the second takes the free session sharing most (session
  // 1's {2, 2, 7}: all three tokens, against session 0's {2, 3, 8}: one), here the higher index.
  const auto [fourth, fourth_rows] = run({{2, 3, 9, 4}, {2, 2, 7, 5}}, {2, 2});
  CHECK(fourth.session_of_row == std::vector<int32_t>{2, 1});
  CHECK(fourth_rows == 1 + 1);
  // A tie (sessions 0 and 1 share nothing with {6, 6, 6, 6, 6}) goes to the lowest index.
  const auto [fifth, fifth_rows] = run({{2, 3, 9, 4, 1}, {6, 6, 6, 6, 6}}, {2, -1});
  CHECK(fifth.session_of_row == std::vector<int32_t>{2, 0});
  CHECK(fifth_rows == 1 + 5);
  // A parent session that does not exist is a caller's error, not "no parent".
  const std::vector<Token> tokens = {1};
  CHECK_THROWS_WITH(sessions.step(prompt, {BeamRow{&tokens, 3}}, seconds),
                    Contains("beam sessions: parent session 3, but there are 3"));
  CHECK(sessions.size() == 3);
  CHECK(counter->batches == 5);
}

TEST_CASE("beam search with width >= V^L finds the exhaustive optimum and its n-best list", "[beam]") {
  constexpr int32_t V = 4, L = 3;
  const TablePair pair = random_pair(2, V, 71, 1.5, 0.0);
  const std::vector<Token> prompt = {1, 2};
  for (const std::vector<Token>& stops : {std::vector<Token>{}, std::vector<Token>{3}}) {
    for (double alpha : {0.0, 0.6, 1.0, 2.0}) {
      for (bool early : {true, false}) {
        INFO("stops " << stops.size() << " alpha " << alpha << " early_stopping " << early);
        BeamSearchConfig config;
        config.beam_width = 64;  // = V^L
        config.length_penalty = alpha;
        config.early_stopping = early;
        config.max_new_tokens = L;
        const BeamSearch search(pair.target, beam_params(stops), config);
        GenerationMetrics metrics;
        const BeamSearchOutput out = search.search(prompt, metrics);
        const std::vector<Scored> all = exhaustive(*pair.target, search.pipeline(), prompt, L, alpha);
        REQUIRE(out.nbest.size() == std::min<size_t>(64, all.size()));
        for (size_t i = 0; i < out.nbest.size(); ++i) {
          INFO("rank " << i);
          CHECK(out.nbest[i].tokens == all[i].tokens);
          CHECK(out.nbest[i].score == Approx(all[i].score).epsilon(1e-12));
          CHECK(out.nbest[i].logprob == Approx(all[i].logprob).epsilon(1e-12));
          CHECK(out.nbest[i].stopped == (!stops.empty() && out.nbest[i].tokens.back() == stops[0]));
        }
        CHECK(metrics.target_calls == metrics.steps);
        CHECK(metrics.steps <= L);
      }
    }
  }
}

TEST_CASE("narrow beams never beat the exhaustive optimum, and width 1 is greedy decoding", "[beam]") {
  constexpr int32_t V = 5, L = 6;
  const TablePair pair = random_pair(2, V, 72, 1.5, 0.0);
  const std::vector<Token> prompt = {0, 3};
  const SamplingParams params = beam_params({});
  BeamSearchConfig config;
  config.max_new_tokens = L;
  config.length_penalty = 0.0;
  const double optimum = exhaustive(*pair.target, SamplerPipeline(params, V), prompt, L, 0.0)[0].score;
  double previous = -INFINITY;
  for (int32_t width : {1, 2, 4, 8}) {
    config.beam_width = width;
    GenerationMetrics m;
    const BeamSearchOutput out = BeamSearch(pair.target, params, config).search(prompt, m);
    INFO("width " << width);
    CHECK(out.nbest[0].score <= optimum + 1e-12);
    CHECK(static_cast<int32_t>(out.nbest[0].tokens.size()) == L);
    if (width == 1) {
      SamplingParams greedy = params;
      greedy.temperature = 0.0f;
      GenerationConfig ar;
      ar.max_new_tokens = L;
      GenerationMetrics gm;
      CHECK(out.nbest[0].tokens == Generator(pair.target, greedy, nullptr, ar).generate(prompt, 0, gm).tokens);
    }
    previous = std::max(previous, out.nbest[0].score);
  }
  CHECK(previous > -INFINITY);
}

TEST_CASE("beam search under a constraint returns only matching hypotheses, the constrained optimum first",
          "[beam][constraints]") {
  constexpr int32_t V = 5, L = 4;
  const TablePair pair = random_pair(1, V, 73, 1.5, 0.0);
  const std::string pattern = "(ab|c)+d?";
  SamplingParams params = beam_params({4});  // 'e' ends a complete match
  params.constraint = TokenConstraint::from_regex(pattern, letter_token_strings(V), {4});
  BeamSearchConfig config;
  config.beam_width = 625;  // = V^L: exhaustive
  config.num_return = 10;
  config.max_new_tokens = L;
  const BeamSearch search(pair.target, params, config);
  GenerationMetrics m;
  const BeamSearchOutput out = search.search({2}, m);
  const std::vector<Scored> all = exhaustive(*pair.target, search.pipeline(), {2}, L, 1.0);
  REQUIRE(out.nbest.size() == 10);
  const std::regex re(pattern);
  for (size_t i = 0; i < out.nbest.size(); ++i) {
    const BeamHypothesis& h = out.nbest[i];
    CHECK(h.tokens == all[i].tokens);
    const std::string text = params.constraint->text(h.tokens);
    INFO(text);
    if (h.stopped) CHECK(std::regex_match(text, re));
    CHECK(params.constraint->walk(h.tokens) != TokenConstraint::kDead);
  }
}

TEST_CASE("diverse beam search: group 0 is plain beam search, later groups avoid earlier groups' tokens", "[beam]") {
  constexpr int32_t V = 6, L = 4;
  const TablePair pair = random_pair(2, V, 74, 1.2, 0.0);
  const std::vector<Token> prompt = {4, 1};
  const SamplingParams params = beam_params({});
  BeamSearchConfig plain;
  plain.beam_width = 2;
  plain.max_new_tokens = L;
  GenerationMetrics m;
  const BeamSearchOutput reference = BeamSearch(pair.target, params, plain).search(prompt, m);

  BeamSearchConfig diverse = plain;
  diverse.beam_width = 6;
  diverse.num_groups = 3;
  for (double lambda : {0.0, 1e9}) {
    INFO("lambda " << lambda);
    diverse.diversity_penalty = lambda;
    const BeamSearchOutput out = BeamSearch(pair.target, params, diverse).search(prompt, m);
    REQUIRE(out.nbest.size() == 6);
    std::vector<std::vector<BeamHypothesis>> groups(3);
    for (const BeamHypothesis& h : out.nbest) groups.at(h.group).push_back(h);
    REQUIRE(groups[0].size() == reference.nbest.size());
    for (size_t i = 0; i < groups[0].size(); ++i) CHECK(groups[0][i].tokens == reference.nbest[i].tokens);
    // Scores are the model's, whatever the penalty: recompute them along each hypothesis.
    for (const BeamHypothesis& h : out.nbest) {
      const SamplerPipeline pipeline(params, V);
      TokenHistory hist;
      hist.prompt = prompt;
      std::vector<Token> context = prompt;
      double lp = 0.0;
      std::vector<float> p(V);
      for (Token t : h.tokens) {
        pipeline.process(pair.target->row_after(context), hist, p.data());
        lp += std::log(static_cast<double>(p[t]));
        hist = pipeline.advance(hist, t, p.data());
        context.push_back(t);
      }
      CHECK(h.logprob == Approx(lp).epsilon(1e-12));
      CHECK(h.score == Approx(lp / L).epsilon(1e-12));
    }
    std::vector<std::set<Token>> first(3);
    for (int g = 0; g < 3; ++g)
      for (const BeamHypothesis& h : groups[g]) first[g].insert(h.tokens[0]);
    if (lambda == 0.0) {
      for (int g = 1; g < 3; ++g)  // without a penalty every group is the same beam search
        for (size_t i = 0; i < groups[g].size(); ++i) CHECK(groups[g][i].tokens == groups[0][i].tokens);
    } else {
      // Hamming diversity at the first step: each group starts from tokens no earlier group chose.
      for (int g = 1; g < 3; ++g)
        for (int e = 0; e < g; ++e)
          for (Token t : first[g]) CHECK(first[e].count(t) == 0);
    }
  }
}

TEST_CASE("beam search options are checked by name", "[beam]") {
  const TablePair pair = random_pair(1, 4, 75, 1.0, 0.0);
  auto bad = [&](auto change) {
    BeamSearchConfig c;
    change(c);
    return BeamSearch(pair.target, SamplingParams{}, c);
  };
  // The parameter is named; the command line turns it into its flag, an experiment into its key.
  auto names = [&](auto change, const std::string& parameter) {
    try {
      bad(change);
      FAIL("no error for " << parameter);
    } catch (const ParameterError& e) {
      CHECK(e.parameter() == parameter);
    }
  };
  names([](BeamSearchConfig& c) { c.beam_width = 0; }, "beam_width");
  names([](BeamSearchConfig& c) { c.num_groups = 3; }, "num_beam_groups");
  names([](BeamSearchConfig& c) { c.diversity_penalty = -1; }, "diversity_penalty");
  names([](BeamSearchConfig& c) { c.num_return = 9; }, "num_return");
  // A diversity penalty with one group would change nothing: refused rather than ignored.
  names([](BeamSearchConfig& c) { c.diversity_penalty = 0.5; }, "diversity_penalty");
  CHECK_THROWS_WITH(bad([](BeamSearchConfig& c) { c.num_groups = 3; }), Contains("num_beam_groups must be >= 1"));
}

TEST_CASE("specula generate --method beam: best line, n-best file, and constraints through the CLI",
          "[beam][constraints][cli]") {
  TempDir dir;
  const std::string target = dir.write("t.txt",
                                       "0.5 1.0 -0.3 0.2 0.1\n"
                                       "1.2 -0.4 0.3 0.0 -0.2\n"
                                       "-0.2 0.8 0.9 -1.0 0.3\n"
                                       "0.1 0.1 1.5 -0.5 0.0\n"
                                       "0.3 0.2 0.1 0.0 -0.1\n");
  const std::string draft = dir.write("d.txt",
                                      "0.4 1.3 -0.1 0.2 0.0\n"
                                      "1.0 -0.2 0.3 0.3 0.1\n"
                                      "-0.5 0.8 1.2 -1.0 0.2\n"
                                      "0.3 0.0 1.1 -0.2 0.0\n"
                                      "0.2 0.1 0.2 0.1 0.0\n");
  CliResult r = run_specula("generate --target bigram:" + target +
                            " --method beam --beam-width 4 --length-penalty 0.5 --prompt-tokens 0 --max-new-tokens 5"
                            " --stop-tokens 4 --output " +
                            dir.file("best.txt") + " --nbest-output " + dir.file("nbest.tsv") + " --metrics-json " +
                            dir.file("m.json"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::istringstream best(read_text(dir.file("best.txt")));
  std::string line;
  REQUIRE(std::getline(best, line));
  std::istringstream nbest(read_text(dir.file("nbest.tsv")));
  std::vector<std::string> rows;
  for (std::string row; std::getline(nbest, row);)
    if (!row.empty() && row[0] != '#') rows.push_back(row);
  REQUIRE(rows.size() == 4);
  // Each row: score, logprob, stop|length, tokens; the first row's tokens are the best line.
  std::istringstream first(rows[0]);
  double score = 0, logprob = 0;
  std::string ended, tokens;
  first >> score >> logprob >> ended;
  std::getline(first, tokens);
  tokens.erase(0, tokens.find_first_not_of(" \t"));
  CHECK(tokens == line);
  CHECK((ended == "stop" || ended == "length"));
  CHECK(score <= 0.0);

  // Constrained sampling and beam search through the CLI: letters a..e, every output matches.
  const auto method_flags = [&](const std::string& method) {
    std::string extra = method == "ar" || method == "beam" ? "" : " --draft bigram:" + draft;
    if (method == "tree") extra += " --tree 2,1";
    if (method == "beam") extra += " --beam-width 3";
    return extra;
  };
  for (const std::string method : {"ar", "chain", "tree", "beam"}) {
    INFO(method);
    const std::string extra = method_flags(method);
    r = run_specula("generate --target bigram:" + target + " --method " + method + extra +
                    " --regex '(ab|c)+' --prompt-tokens 0 --max-new-tokens 6 --num-samples " +
                    (method == "beam" ? "1" : "200") + " --output " + dir.file("c.txt"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(read_text(dir.file("c.txt")));
    const auto c = TokenConstraint::from_regex("(ab|c)+", letter_token_strings(5), {});
    for (std::string l; std::getline(lines, l);) {
      std::istringstream in(l);
      std::vector<Token> out;
      for (Token t; in >> t;) out.push_back(t);
      CHECK(c->walk(out) != TokenConstraint::kDead);
    }
  }
  // A finite pattern with no stop token: every output is a whole match, ended before the length limit.
  for (const std::string method : {"ar", "chain", "tree", "beam"}) {
    INFO(method);
    const std::string extra = method_flags(method);
    r = run_specula("generate --target bigram:" + target + " --method " + method + extra +
                    " --regex 'a(b|cd)e?' --prompt-tokens 0 --max-new-tokens 6 --num-samples " +
                    (method == "beam" ? "1" : "50") + " --output " + dir.file("f.txt") + " --metrics-json " +
                    dir.file("f.json"));
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    std::istringstream lines(read_text(dir.file("f.txt")));
    int lines_read = 0;
    for (std::string l; std::getline(lines, l); ++lines_read) CHECK((l == "0 1 4" || l == "0 2 3 4"));
    CHECK(lines_read == (method == "beam" ? 1 : 50));
    CHECK(nlohmann::json::parse(read_text(dir.file("f.json"))).at("stopped_sequences") == (method == "beam" ? 1 : 50));
  }
  // A banned letter that one branch needs, or a bad word ('b' then 'c'): that branch is never entered ("ab" cannot be
  // finished without 'c', or without 'c' after 'b').
  for (const std::string mask : {"--banned-tokens 2", "--bad-words '1,2'"})
    for (const std::string method : {"ar", "chain", "tree", "beam"}) {
      INFO(method << " " << mask);
      r = run_specula("generate --target bigram:" + target + " --method " + method + method_flags(method) +
                      " --regex 'a(bc|de)' " + mask + " --prompt-tokens 0 --max-new-tokens 6 --num-samples " +
                      (method == "beam" ? "1" : "50") + " --output " + dir.file("f.txt"));
      INFO(r.err);
      REQUIRE(r.exit_code == 0);
      std::istringstream lines(read_text(dir.file("f.txt")));
      int lines_read = 0;
      for (std::string l; std::getline(lines, l); ++lines_read) CHECK(l == "0 3 4");
      CHECK(lines_read == (method == "beam" ? 1 : 50));
    }
  // Where the masks leave no match at all, the run is refused before any sample.
  for (const std::string mask : {"--banned-tokens 2,4", "--bad-words '1,2;3,4'"}) {
    r = run_specula("generate --target bigram:" + target + " --regex 'a(bc|de)' " + mask +
                    " --prompt-tokens 0 --max-new-tokens 6 --output " + dir.file("x.txt"));
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, Contains("regex 'a(bc|de)': no token can begin a match"));
  }
  // Errors name the option.
  r = run_specula("generate --target bigram:" + target +
                  " --regex '(ab' --prompt-tokens 0 --max-new-tokens 2 --output " + dir.file("x.txt"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("regex '(ab'") && Contains("position 0"));
  r = run_specula("generate --target bigram:" + target +
                  " --method beam --num-samples 3 --prompt-tokens 0 --max-new-tokens 2 --output " + dir.file("x.txt"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.err, Contains("--num-samples"));
}
