// Drafters (draft/): prompt lookup on hand cases, the Kneser-Ney n-gram model against a brute-force
// reference and hand-computed values, its file format, the synthetic drafter's acceptance rate, and for
// every drafter exactness through the real Generator (G-test of the law of all V^L continuations against
// exact enumeration) and greedy speculation = greedy decoding token for token.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "draft/model_drafter.h"
#include "draft/ngram_drafter.h"
#include "draft/ngram_model.h"
#include "draft/prompt_lookup_drafter.h"
#include "draft/synthetic_drafter.h"
#include "harness/generation/generator.h"
#include "harness/models/table_model.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "speculative_fixtures.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Fixtures

std::shared_ptr<TableModel> bigram_target(int32_t V, uint64_t seed, double scale = 1.5) {
  std::vector<float> logits(static_cast<size_t>(V) * V);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>(scale * testing::philox_gaussian(seed, i, /*stream=*/31));
  return std::make_shared<TableModel>(1, V, logits, "bigram-target");
}

// A token sequence sampled from a table model (plain softmax), to train n-gram models on.
std::vector<Token> sample_sequence(const TableModel& model, Token first, size_t length, uint64_t seed) {
  const SamplerPipeline pipeline(SamplingParams{}, model.vocab_size());
  std::vector<Token> out = {first};
  std::vector<float> p(model.vocab_size());
  while (out.size() < length) {
    pipeline.process(model.row_after(out), TokenHistory{}, p.data());
    out.push_back(sample_categorical(p.data(), model.vocab_size(), RandomKey{seed, 5, out.size()}));
  }
  return out;
}

std::vector<int64_t> tally(const std::vector<SequenceOutput>& outputs, int32_t V, int32_t L) {
  size_t cells = 1;
  for (int32_t t = 0; t < L; ++t) cells *= V;
  std::vector<int64_t> counts(cells, 0);
  for (const SequenceOutput& s : outputs) {
    REQUIRE(static_cast<int32_t>(s.tokens.size()) == L);
    ++counts[testing::sequence_index(s.tokens, V)];
  }
  return counts;
}

DraftRequest chain_request(const std::vector<Token>& context, const TokenHistory& history, int32_t k) {
  DraftRequest r;
  r.context = &context;
  r.history = &history;
  r.num_draft_tokens = k;
  r.rng = StepRandom{7, 0, 0};
  return r;
}

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() / "specula_test_drafters";
  std::filesystem::create_directories(dir);
  return dir;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Brute-force interpolated modified Kneser-Ney straight from the definitions (Chen & Goodman 1998),
// scanning the corpus for every count; shares no code with draft/ngram_model.cpp.
struct ReferenceKneserNey {
  std::vector<Token> corpus;
  int32_t order, V;

  bool occurs_at(const std::vector<Token>& g, size_t i) const {
    if (i + g.size() > corpus.size()) return false;
    for (size_t j = 0; j < g.size(); ++j)
      if (corpus[i + j] != g[j]) return false;
    return true;
  }
  // Raw count at the highest order; distinct left contexts (the corpus start counting as one) below.
  int64_t count(const std::vector<Token>& g) const {
    if (static_cast<int32_t>(g.size()) == order) {
      int64_t c = 0;
      for (size_t i = 0; i < corpus.size(); ++i) c += occurs_at(g, i);
      return c;
    }
    std::set<int32_t> left;
    for (size_t i = 0; i < corpus.size(); ++i)
      if (occurs_at(g, i)) left.insert(i == 0 ? -1 : corpus[i - 1]);
    return static_cast<int64_t>(left.size());
  }
  std::vector<std::vector<Token>> all_ngrams(int32_t n) const {
    std::vector<std::vector<Token>> out = {{}};
    for (int32_t k = 0; k < n; ++k) {
      std::vector<std::vector<Token>> next;
      for (const auto& g : out)
        for (Token x = 0; x < V; ++x) {
          next.push_back(g);
          next.back().push_back(x);
        }
      out = std::move(next);
    }
    return out;
  }
  mutable std::map<int32_t, std::vector<double>> discount_cache;
  std::vector<double> discounts(int32_t n) const {
    if (discount_cache.count(n)) return discount_cache[n];
    double c[5] = {0, 0, 0, 0, 0};
    for (const auto& g : all_ngrams(n)) {
      const int64_t k = count(g);
      if (k >= 1 && k <= 4) c[k] += 1;
    }
    const double y = c[1] / (c[1] + 2 * c[2]);
    std::vector<double> d = {1 - 2 * y * c[2] / c[1], 2 - 3 * y * c[3] / c[2], 3 - 4 * y * c[4] / c[3]};
    const double fallback[3] = {0.5, 1.0, 1.5};
    for (int k = 0; k < 3; ++k)
      if (!(std::isfinite(d[k]) && d[k] > 0 && d[k] < k + 1)) d[k] = fallback[k];
    return discount_cache[n] = d;
  }
  double prob(Token w, std::vector<Token> h) const {  // h: the last n - 1 tokens for level n
    if (static_cast<int32_t>(h.size()) >= order) h.erase(h.begin(), h.end() - (order - 1));
    return level(w, h);
  }
  double level(Token w, const std::vector<Token>& h) const {
    const double lower = h.empty() ? 1.0 / V : level(w, std::vector<Token>(h.begin() + 1, h.end()));
    const int32_t n = static_cast<int32_t>(h.size()) + 1;
    double total = 0, mass = 0, own = 0;
    const std::vector<double> d = discounts(n);
    for (Token x = 0; x < V; ++x) {
      std::vector<Token> g = h;
      g.push_back(x);
      const int64_t c = count(g);
      if (c == 0) continue;
      const double dc = c >= 3 ? d[2] : d[c - 1];
      total += c;
      mass += dc;
      if (x == w) own = c - dc;
    }
    if (total == 0) return lower;
    return own / total + mass / total * lower;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Prompt lookup

TEST_CASE("prompt lookup: longest suffix, most recent occurrence, up to K tokens", "[drafters]") {
  const PromptLookupOptions def;  // max_n = 3, min_n = 1
  // Suffix "1 2" occurred at 0..1: propose what followed, K = 3.
  CHECK(prompt_lookup_chain({1, 2, 3, 4, 1, 2}, def, 3) == std::vector<Token>{3, 4, 1});
  CHECK(prompt_lookup_chain({1, 2, 3, 4, 1, 2}, def, 1) == std::vector<Token>{3});
  // Only "1" matches; its most recent earlier occurrence is at 3, followed by "8 1": fewer than K.
  CHECK(prompt_lookup_chain({5, 1, 7, 1, 8, 1}, def, 3) == std::vector<Token>{8, 1});
  // The longer match wins over a more recent shorter one; with max_n = 1 recency decides.
  const std::vector<Token> ctx = {1, 2, 9, 3, 2, 8, 1, 2};
  CHECK(prompt_lookup_chain(ctx, def, 3) == std::vector<Token>{9, 3, 2});
  CHECK(prompt_lookup_chain(ctx, PromptLookupOptions{1, 1}, 3) == std::vector<Token>{8, 1, 2});
  // max_n = 3 prefers a 3-token match over a more recent 2-token one.
  CHECK(prompt_lookup_chain({4, 5, 6, 0, 5, 6, 1, 4, 5, 6}, def, 2) == std::vector<Token>{0, 5});
  CHECK(prompt_lookup_chain({4, 5, 6, 0, 5, 6, 1, 4, 5, 6}, PromptLookupOptions{2, 1}, 2) == std::vector<Token>{1, 4});
  // min_n: a 1-token match is not enough with min_n = 2.
  CHECK(prompt_lookup_chain({4, 5, 6, 5}, def, 3) == std::vector<Token>{6, 5});
  CHECK(prompt_lookup_chain({4, 5, 6, 5}, PromptLookupOptions{3, 2}, 3).empty());
  // An occurrence may overlap the suffix.
  CHECK(prompt_lookup_chain({7, 7, 7}, def, 4) == std::vector<Token>{7});
  // No match, too short, K = 0.
  CHECK(prompt_lookup_chain({1, 2, 3}, def, 3).empty());
  CHECK(prompt_lookup_chain({1}, def, 3).empty());
  CHECK(prompt_lookup_chain({}, def, 3).empty());
  CHECK(prompt_lookup_chain({1, 2, 1}, def, 0).empty());

  const std::vector<LookupMatch> m = find_lookup_matches({1, 2, 9, 3, 2, 8, 1, 2}, def, 10);
  REQUIRE(m.size() == 2);  // "1 2" at end 2; "2" at end 5 (the "2" ending at 2 is the same continuation)
  CHECK((m[0].length == 2 && m[0].end == 2));
  CHECK((m[1].length == 1 && m[1].end == 5));
}

TEST_CASE("prompt lookup drafter: point-mass chains, tries for trees, counters", "[drafters]") {
  PromptLookupDrafterFactory factory(PromptLookupOptions{}, 10);
  CHECK(factory.vocab_size() == 10);
  CHECK(factory.description() == "prompt-lookup:max_n=3,min_n=1");
  auto drafter = factory.create();
  const std::vector<Token> context = {1, 2, 1, 3, 1, 4, 1};
  const TokenHistory history{context, {}, std::nan("")};
  DraftRequest r = chain_request(context, history, 3);
  TokenTree chain = drafter->propose(r);
  CHECK(chain.tokens == std::vector<Token>{4, 1});
  CHECK(chain.parent == std::vector<int32_t>{-1, 0});
  CHECK(chain.q_at_row(0).empty());  // point masses
  CHECK(chain.q_at_row(1).empty());

  // Tree 2,1: "1" followed by 4 (most recent), then 3; each continued by its own next token.
  r.tree_shape = {2, 1};
  r.scheme = SiblingScheme::iid;  // ignored: lookups are deterministic candidates
  const TokenTree tree = drafter->propose(r);
  CHECK(tree.tokens == std::vector<Token>{4, 1, 3, 1});
  CHECK(tree.parent == std::vector<int32_t>{-1, 0, -1, 2});
  CHECK(tree.scheme == SiblingScheme::deterministic);
  for (int32_t row = 0; row <= tree.size(); ++row) CHECK(tree.q_at_row(row).empty());
  // Siblings are distinct and the shape is respected.
  r.tree_shape = {3, 2};
  const TokenTree wide = drafter->propose(r);
  CHECK(wide.children(0).size() == 3);
  CHECK(wide.max_depth() == 2);

  // No match: nothing proposed.
  const std::vector<Token> fresh = {5, 6};
  const TokenHistory fresh_history{fresh, {}, std::nan("")};
  CHECK(drafter->propose(chain_request(fresh, fresh_history, 3)).size() == 0);

  drafter->accept(2);
  CHECK(drafter->counters().n_drafts == 4);
  CHECK(drafter->counters().n_draft_tokens == 2 + 4 + wide.size() + 0);
  CHECK(drafter->counters().n_accepted == 2);
  CHECK(drafter->counters().n_forward == 0);
}

TEST_CASE("prompt lookup options: parsing and clear errors", "[drafters]") {
  const PromptLookupOptions d = parse_prompt_lookup_options("", "prompt-lookup");
  CHECK((d.max_n == 3 && d.min_n == 1));
  const PromptLookupOptions o = parse_prompt_lookup_options("min_n=2,max_n=5", "prompt-lookup:min_n=2,max_n=5");
  CHECK((o.max_n == 5 && o.min_n == 2));
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse_prompt_lookup_options("max_n=0", "s"), Contains("max_n must be in 1..64"));
  CHECK_THROWS_WITH(parse_prompt_lookup_options("max_n=2,min_n=3", "s"), Contains("min_n (3) must be <= max_n (2)"));
  CHECK_THROWS_WITH(parse_prompt_lookup_options("max_n=x", "s"), Contains("max_n must be an integer, got 'x'"));
  CHECK_THROWS_WITH(parse_prompt_lookup_options("n=2", "s"), Contains("unknown option 'n'"));
  CHECK_THROWS_WITH(parse_prompt_lookup_options("max_n", "s"), Contains("is not key=value"));
  CHECK_THROWS_WITH(parse_prompt_lookup_options("max_n=2,max_n=3", "s"), Contains("given twice"));
  CHECK_THROWS_AS(parse_prompt_lookup_options("max_n=2,", "s"), Error);
}

TEST_CASE("prompt lookup drafter: the generator makes progress when nothing is proposed", "[drafters]") {
  // A prompt with no repeats: the first step's tree is empty and the verifier emits a token from row 0.
  const auto target = bigram_target(6, 11);
  GenerationConfig config;
  config.method = VerifyMethod::chain;
  config.num_draft_tokens = 3;
  config.max_new_tokens = 12;
  const Generator generator(target, SamplingParams{},
                            std::make_shared<PromptLookupDrafterFactory>(PromptLookupOptions{}, 6), config);
  GenerationMetrics metrics;
  const SequenceOutput out = generator.generate({0, 1}, 0, metrics);
  CHECK(out.tokens.size() == 12);
  CHECK(out.accept_lengths.front() == 0);
  CHECK(metrics.q_zero_errors == 0);
}

// ---------------------------------------------------------------------------------------------------------
// Kneser-Ney n-gram model

TEST_CASE("Kneser-Ney: hand-computed values on a tiny corpus", "[drafters]") {
  // Corpus "0 1 0 1 2", V = 3, order 2.
  //   bigram counts: (0 1) = 2, (1 0) = 1, (1 2) = 1
  //   unigram continuation counts: 0 <- {start, 1} = 2; 1 <- {0} = 1; 2 <- {1} = 1
  //   count-of-counts at both orders: n1 = 2, n2 = 1, n3 = n4 = 0 -> Y = 1/2, D1 = 1 - 2Y n2/n1 = 0.5;
  //   D2 = 2 - 3Y n3/n2 = 2 is not < 2 and D3+ = 0/0: fallbacks 1.0 and 1.5.
  const NgramModel m = NgramModel::train({0, 1, 0, 1, 2}, 2, 3);
  CHECK(m.count({0, 1}) == 2);
  CHECK(m.count({1, 0}) == 1);
  CHECK(m.count({0}) == 2);
  CHECK(m.count({1}) == 1);
  CHECK(m.count({2}) == 1);
  CHECK(m.discounts(1).d1 == Approx(0.5));
  CHECK(m.discounts(1).d2 == 1.0);
  CHECK(m.discounts(1).d3 == 1.5);
  CHECK(m.discounts(1).fallback);
  // P1(w) = max(c - D, 0)/4 + gamma/3 with gamma = (0.5*2 + 1.0*1)/4 = 1/2.
  const double p1[3] = {(2 - 1.0) / 4 + 0.5 / 3, (1 - 0.5) / 4 + 0.5 / 3, (1 - 0.5) / 4 + 0.5 / 3};
  // After 1: (1 0) = 1, (1 2) = 1: total 2, gamma = 0.5*2/2 = 1/2.
  const std::vector<double> after1 = m.distribution({1});
  CHECK(after1[0] == Approx(0.5 / 2 + 0.5 * p1[0]).epsilon(1e-12));
  CHECK(after1[1] == Approx(0.5 * p1[1]).epsilon(1e-12));
  CHECK(after1[2] == Approx(0.5 / 2 + 0.5 * p1[2]).epsilon(1e-12));
  CHECK(after1[0] == Approx(0.4583333333333333).epsilon(1e-12));
  // After 0: (0 1) = 2: total 2, gamma = 1.0*1/2 = 1/2.
  const std::vector<double> after0 = m.distribution({0});
  CHECK(after0[1] == Approx((2 - 1.0) / 2 + 0.5 * p1[1]).epsilon(1e-12));
  CHECK(after0[0] == Approx(0.5 * p1[0]).epsilon(1e-12));
  // After 2 (never followed by anything): the unigram level; with no history too.
  const std::vector<double> after2 = m.distribution({2});
  const std::vector<double> none = m.distribution(std::vector<Token>{});
  for (int x = 0; x < 3; ++x) {
    CHECK(after2[x] == Approx(p1[x]).epsilon(1e-12));
    CHECK(none[x] == Approx(p1[x]).epsilon(1e-12));
  }
  CHECK(m.probability(1, {0, 0, 0}) == Approx(after0[1]).epsilon(1e-12));  // only the last token is read
}

TEST_CASE("Kneser-Ney: matches a brute-force reference and sums to 1 over the vocabulary", "[drafters]") {
  // V = 5 with token 4 never in the corpus (it still gets mass from the uniform base), order 3.
  const auto source = bigram_target(4, 3, 2.0);
  const std::vector<Token> corpus = sample_sequence(*source, 0, 300, 17);
  const NgramModel m = NgramModel::train(corpus, 3, 5);
  const ReferenceKneserNey ref{corpus, 3, 5, {}};
  for (int32_t n = 1; n <= 3; ++n) {
    const std::vector<double> d = ref.discounts(n);
    CHECK(m.discounts(n).d1 == Approx(d[0]).epsilon(1e-12));
    CHECK(m.discounts(n).d2 == Approx(d[1]).epsilon(1e-12));
    CHECK(m.discounts(n).d3 == Approx(d[2]).epsilon(1e-12));
  }
  CHECK_FALSE(m.discounts(3).fallback);  // this corpus defines the top-order discounts from its counts
  int histories = 0;
  for (int32_t len = 0; len <= 3; ++len) {
    for (const std::vector<Token>& h : ref.all_ngrams(len)) {
      const std::vector<double> q = m.distribution(h);
      double sum = 0.0;
      for (Token w = 0; w < 5; ++w) {
        sum += q[w];
        REQUIRE(q[w] > 0.0);
        if (len <= 2) CHECK(q[w] == Approx(ref.prob(w, h)).epsilon(1e-10));
      }
      REQUIRE(sum == Approx(1.0).epsilon(1e-12));
      ++histories;
    }
  }
  CHECK(histories == 1 + 5 + 25 + 125);
  // Orders 1..5 and a larger vocabulary also give proper distributions.
  for (int32_t order = 1; order <= 5; ++order) {
    const NgramModel big = NgramModel::train(corpus, order, 40);
    for (size_t i = 0; i + 6 <= corpus.size(); i += 7) {
      const std::vector<double> q = big.distribution(std::vector<Token>(corpus.begin() + i, corpus.begin() + i + 6));
      double sum = 0.0;
      for (double v : q) sum += v;
      REQUIRE(sum == Approx(1.0).epsilon(1e-12));
    }
  }
  CHECK_THROWS_AS(NgramModel::train({0, 1, 5}, 2, 5), Error);  // token outside the vocabulary
  CHECK_THROWS_AS(NgramModel::train({0, 1}, 0, 5), Error);
}

TEST_CASE("Kneser-Ney: save/load round trip and corrupt files", "[drafters]") {
  const auto source = bigram_target(5, 4);
  const std::vector<Token> corpus = sample_sequence(*source, 1, 400, 9);
  const NgramModel m = NgramModel::train(corpus, 3, 6);
  const std::string path = (temp_dir() / "model.ngram").string();
  m.save(path);
  const NgramModel back = NgramModel::load(path);
  CHECK(back.order() == 3);
  CHECK(back.vocab_size() == 6);
  for (int32_t n = 1; n <= 3; ++n) {
    CHECK(back.num_ngrams(n) == m.num_ngrams(n));
    CHECK(back.discounts(n).d1 == m.discounts(n).d1);
  }
  for (size_t i = 0; i + 2 <= corpus.size(); i += 3) {
    const std::vector<Token> h(corpus.begin() + i, corpus.begin() + i + 2);
    CHECK(back.distribution(h) == m.distribution(h));  // bit-identical
  }
  back.save(path + ".again");
  CHECK(read_text(path + ".again") == read_text(path));  // deterministic file

  // Corrupt variants: every one is an Error naming the file.
  const std::string good = read_text(path);
  std::vector<std::string> lines;
  {
    std::istringstream ss(good);
    std::string l;
    while (std::getline(ss, l)) lines.push_back(l);
  }
  auto join = [](const std::vector<std::string>& ls) {
    std::string s;
    for (const std::string& l : ls) s += l + "\n";
    return s;
  };
  auto replaced = [&](size_t i, const std::string& l) {
    std::vector<std::string> c = lines;
    c[i] = l;
    return join(c);
  };
  // lines: 0 magic, 1 order, 2 vocab, 3..5 ngrams, 6 "1-grams", 7.. records
  std::map<std::string, std::string> cases = {
      {"magic", replaced(0, "specula-bigram 1")},
      {"version", replaced(0, "specula-ngram 2")},
      {"order", replaced(1, "order 0")},
      {"vocab", replaced(2, "vocab x")},
      {"count header", replaced(4, "ngrams 2 -3")},
      {"section", replaced(6, "2-grams")},
      {"token range", replaced(7, "3 6")},
      {"zero count", replaced(7, "0 1")},
      {"fields", replaced(7, "3 1 2")},
      {"duplicate", replaced(8, lines[7])},
      {"truncated", good.substr(0, good.size() / 2)},
      {"no end", join(std::vector<std::string>(lines.begin(), lines.end() - 1))},
      {"trailing", good + "1 2 3\n"},
      {"empty", ""},
  };
  for (const auto& [name, text] : cases) {
    INFO("corruption: " << name);
    const std::string bad =
        (temp_dir() / ("bad_" + std::to_string(std::hash<std::string>()(name)) + ".ngram")).string();
    write_text(bad, text);
    CHECK_THROWS_WITH(NgramModel::load(bad), Catch::Matchers::Contains(bad));
    CHECK_THROWS_AS(NgramModel::load(bad), Error);
  }
  CHECK_THROWS_WITH(NgramModel::load(path + ".missing"), Catch::Matchers::Contains("cannot open"));
  {  // Counts each readable whose sum passes 2^62 (a context's total wrapped): refused where the sum passes it.
    std::vector<std::string> many = lines;
    for (size_t i = 7; i < many.size() && many[i].rfind("2-grams", 0) != 0 && many[i] != "end"; ++i)
      if (std::count(many[i].begin(), many[i].end(), ' ') == 1)
        many[i] = "999999999999999999 " + many[i].substr(many[i].find(' ') + 1);
    const std::string bad = (temp_dir() / "bad_sum.ngram").string();
    write_text(bad, join(many));
    CHECK_THROWS_WITH(NgramModel::load(bad), Catch::Matchers::Contains("the 1-gram counts sum past 2^62"));
  }
}

TEST_CASE("n-gram drafter: records exactly the processed q it sampled from", "[drafters]") {
  const auto source = bigram_target(6, 4);
  auto model = std::make_shared<NgramModel>(NgramModel::train(sample_sequence(*source, 0, 500, 2), 3, 6));
  const std::vector<Token> context = {0, 3, 2};
  const TokenHistory history{context, {}, std::nan("")};
  {
    NgramDrafterFactory factory(model, SamplingParams{}, "ngram:test");
    auto drafter = factory.create();
    const TokenTree chain = drafter->propose(chain_request(context, history, 3));
    REQUIRE(chain.size() == 3);
    const std::vector<double> kn = model->distribution({3, 2});
    for (Token x = 0; x < 6; ++x) CHECK(chain.q_at_row(0)[x] == Approx(kn[x]).margin(1e-6));
    const std::vector<double> kn2 = model->distribution({2, chain.tokens[0]});
    for (Token x = 0; x < 6; ++x) CHECK(chain.q_at_row(1)[x] == Approx(kn2[x]).margin(1e-6));
    CHECK(chain.q_at_row(3).empty());  // the bonus row has no draft
    CHECK(drafter->counters().n_draft_tokens == 3);
  }
  {
    // With its own pipeline (top-k 2): q is truncated, and the recorded q is the truncated one.
    SamplingParams params;
    params.top_k = 2;
    NgramDrafterFactory factory(model, params, "ngram:test");
    auto drafter = factory.create();
    DraftRequest r = chain_request(context, history, 0);
    r.tree_shape = {2, 2};
    r.scheme = SiblingScheme::without_replacement;
    const TokenTree tree = drafter->propose(r);
    REQUIRE(tree.size() == 6);
    for (int32_t row = 0; row < 3; ++row) {
      int nonzero = 0;
      for (float v : tree.q_at_row(row)) nonzero += v > 0.0f;
      CHECK(nonzero == 2);
    }
    CHECK(tree.tokens[0] != tree.tokens[1]);  // without replacement: distinct siblings
    CHECK(tree.tokens[2] != tree.tokens[3]);
    CHECK(tree.q_at_row(3).empty());  // leaves
  }
}

TEST_CASE("ranked draft trees at temperature 0 rank the law at temperature 1", "[drafters]") {
  // Greedy processing makes q a point mass: ranking it would put the argmax first and then ids in order, all of
  // probability zero. The candidates are the best of the same pipeline at temperature 1 (argmax still first).
  const auto source = bigram_target(6, 4);
  auto model = std::make_shared<NgramModel>(NgramModel::train(sample_sequence(*source, 0, 500, 2), 3, 6));
  const std::vector<Token> context = {0, 3, 2};
  const TokenHistory history{context, {}, std::nan("")};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  auto top3 = [](std::vector<double> law) {
    std::vector<Token> idx = {0, 1, 2, 3, 4, 5};
    std::stable_sort(idx.begin(), idx.end(), [&](Token a, Token b) { return law[a] > law[b]; });
    idx.resize(3);
    return idx;
  };
  DraftRequest r = chain_request(context, history, 0);
  r.tree_shape = {3};
  r.scheme = SiblingScheme::deterministic;
  {
    NgramDrafterFactory factory(model, greedy, "ngram:test");
    const TokenTree tree = factory.create()->propose(r);
    REQUIRE(tree.size() == 3);
    CHECK(std::vector<Token>(tree.tokens.begin(), tree.tokens.end()) == top3(model->distribution({3, 2})));
    // A sampled chain at temperature 0 still draws from (and records) the point mass.
    const TokenTree chain = factory.create()->propose(chain_request(context, history, 1));
    CHECK(chain.tokens[0] == tree.tokens[0]);
    CHECK(chain.q_at_row(0)[chain.tokens[0]] == 1.0f);
  }
  {
    ModelDrafterFactory factory(source, greedy);
    const TokenTree tree = factory.create()->propose(r);
    REQUIRE(tree.size() == 3);
    const float* row = source->row_after(context);
    CHECK(std::vector<Token>(tree.tokens.begin(), tree.tokens.end()) ==
          top3(std::vector<double>(row, row + 6)));  // softmax keeps the order of the logits
  }
}

// ---------------------------------------------------------------------------------------------------------
// Synthetic drafter

TEST_CASE("synthetic drafter: q = alpha p + (1 - alpha) delta_argmin p, recorded exactly", "[drafters]") {
  const auto target = bigram_target(6, 21);
  SamplingParams params;
  params.temperature = 0.8f;
  const SyntheticDrafterFactory factory(target, params, 0.7);
  auto drafter = factory.create();
  const std::vector<Token> context = {2};
  const TokenHistory history{context, {}, std::nan("")};
  const TokenTree chain = drafter->propose(chain_request(context, history, 2));
  REQUIRE(chain.size() == 2);
  const SamplerPipeline pipeline(params, 6);
  for (int32_t row = 0; row < 2; ++row) {
    const std::vector<Token> ctx = row == 0 ? context : std::vector<Token>{2, chain.tokens[0]};
    std::vector<float> logits(target->row_after(ctx), target->row_after(ctx) + 6);
    const std::vector<float> p = pipeline.process(logits, history);
    Token y = 0;
    for (Token x = 1; x < 6; ++x)
      if (p[x] < p[y]) y = x;
    for (Token x = 0; x < 6; ++x)
      CHECK(chain.q_at_row(row)[x] == Approx(0.7 * p[x] + (x == y ? 0.3 : 0.0)).margin(1e-7));
  }
  CHECK(drafter->counters().n_forward == 2);
  CHECK(parse_synthetic_alpha("alpha=0.25", "synthetic:alpha=0.25") == 0.25);
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse_synthetic_alpha("alpha=1.5", "synthetic:alpha=1.5"), Contains("alpha must be in [0, 1]"));
  CHECK_THROWS_WITH(parse_synthetic_alpha("", "synthetic"), Contains("synthetic needs alpha"));
  CHECK_THROWS_WITH(parse_synthetic_alpha("alpha=abc", "synthetic:alpha=abc"), Contains("must be a finite number"));
  CHECK_THROWS_WITH(parse_synthetic_alpha("beta=1", "synthetic:beta=1"), Contains("unknown option 'beta'"));
}

TEST_CASE("synthetic drafter: acceptance per position = alpha + (1 - alpha) p(y)", "[drafters]") {
  // Every row of the target is a cyclic shift of one logits vector, so p(y) = min p is the same after every
  // context and each tested position is an independent Bernoulli(alpha + (1 - alpha) min p) trial.
  const int32_t V = 6;
  const std::vector<float> base = {1.2f, -0.4f, 0.3f, 2.0f, -1.1f, 0.6f};
  std::vector<float> logits;
  for (int32_t r = 0; r < V; ++r)
    for (int32_t x = 0; x < V; ++x) logits.push_back(base[(x + r) % V]);
  const auto target = std::make_shared<TableModel>(1, V, logits, "shifted");
  const SamplerPipeline pipeline(SamplingParams{}, V);
  const std::vector<float> p = pipeline.process(base, TokenHistory{});
  const double p_min = *std::min_element(p.begin(), p.end());
  for (double alpha : {0.3, 0.7}) {
    INFO("alpha = " << alpha);
    const double expected = alpha + (1.0 - alpha) * p_min;
    GenerationConfig config;
    config.method = VerifyMethod::chain;
    config.num_draft_tokens = 4;
    config.max_new_tokens = 40;
    config.seed = 5;
    const Generator generator(target, SamplingParams{},
                              std::make_shared<SyntheticDrafterFactory>(target, SamplingParams{}, alpha), config);
    GenerationMetrics metrics;
    generator.generate_many({0}, 0, 2000, metrics);
    CHECK(metrics.expected_acceptance() == Approx(expected).margin(1e-6));
    CHECK(metrics.q_zero_errors == 0);
    for (int32_t i = 0; i < 4; ++i) {
      const int64_t n = metrics.position_reached[i], k = metrics.position_accepted[i];
      const double rate = static_cast<double>(k) / n;
      const double se = std::sqrt(expected * (1 - expected) / n);
      INFO("position " << i << ": " << k << "/" << n << " = " << rate << " vs " << expected << " (se " << se << ")");
      CHECK(n > 1000);
      CHECK(std::fabs(rate - expected) < 5 * se);
      CHECK(stats::binomial_rate_p(k, n, expected) >= stats::kAlpha);
    }
  }
  // alpha = 1 drafts from p itself: every draft is accepted.
  GenerationConfig config;
  config.method = VerifyMethod::chain;
  config.num_draft_tokens = 3;
  config.max_new_tokens = 20;
  const Generator all(target, SamplingParams{},
                      std::make_shared<SyntheticDrafterFactory>(target, SamplingParams{}, 1.0), config);
  GenerationMetrics metrics;
  all.generate_many({0}, 0, 50, metrics);
  CHECK(metrics.accepted == metrics.proposed);
}

// ---------------------------------------------------------------------------------------------------------
// Exactness through the generator, and greedy losslessness

namespace {

struct DrafterCase {
  std::string name;
  std::shared_ptr<const DrafterFactory> factory;
  VerifyMethod method = VerifyMethod::chain;
  std::vector<int32_t> tree_shape;
  SiblingScheme scheme = SiblingScheme::iid;
};

std::vector<DrafterCase> drafter_cases(const std::shared_ptr<TableModel>& target, const SamplingParams& target_params,
                                       const SamplingParams& draft_params) {
  const int32_t V = target->vocab_size();
  auto ngram = std::make_shared<NgramModel>(NgramModel::train(sample_sequence(*target, 0, 3000, 99), 3, V));
  auto lookup = std::make_shared<PromptLookupDrafterFactory>(PromptLookupOptions{}, V);
  auto ngram_factory = std::make_shared<NgramDrafterFactory>(ngram, draft_params, "ngram:trained");
  auto synthetic = std::make_shared<SyntheticDrafterFactory>(target, target_params, 0.6);
  return {
      {"prompt-lookup chain", lookup, VerifyMethod::chain, {}, SiblingScheme::iid},
      {"ngram chain", ngram_factory, VerifyMethod::chain, {}, SiblingScheme::iid},
      {"synthetic chain", synthetic, VerifyMethod::chain, {}, SiblingScheme::iid},
      {"prompt-lookup tree 2,1", lookup, VerifyMethod::tree, {2, 1}, SiblingScheme::deterministic},
      {"ngram tree 2,1 without-replacement",
       ngram_factory,
       VerifyMethod::tree,
       {2, 1},
       SiblingScheme::without_replacement},
  };
}

}  // namespace

TEST_CASE("drafters are exact: G-test of all V^3 continuations through the Generator", "[drafters]") {
  const int32_t V = 6, L = 3;
  const int64_t N = 50000;
  const auto target = bigram_target(V, 2024);
  // Penalties make every row depend on its own history (prompt + output + draft prefix); top-k puts
  // zeros in p where the n-gram's q is positive and makes the synthetic y a token p never emits.
  SamplingParams params;
  params.temperature = 0.9f;
  params.top_k = 5;
  params.repetition_penalty = 1.3f;
  const std::vector<Token> prompt = {0, 1, 2, 0, 1, 2, 0, 1};  // repetitive: prompt lookup finds matches
  const SamplerPipeline pipeline(params, V);
  std::vector<double> law = testing::exact_sequence_law(*target, pipeline, prompt, L);
  double total = 0.0;
  for (double v : law) total += v;
  REQUIRE(total == Approx(1.0).epsilon(1e-5));  // float32 rows: renormalise the product law in float64
  for (double& v : law) v /= total;
  for (const DrafterCase& c : drafter_cases(target, params, params)) {
    INFO("drafter: " << c.name);
    GenerationConfig config;
    config.method = c.method;
    config.num_draft_tokens = 3;
    config.tree_shape = c.tree_shape;
    config.tree_sampling = c.scheme;
    config.max_new_tokens = L;
    config.seed = 1234;
    const Generator generator(target, params, c.factory, config);
    GenerationMetrics metrics;
    const std::vector<int64_t> counts = tally(generator.generate_many(prompt, 0, N, metrics), V, L);
    const stats::GofResult g = stats::g_test(counts, law);
    INFO(g.detail << " G = " << g.statistic << ", df = " << g.df << ", p = " << g.p_value);
    CHECK(g.passed(stats::kAlpha));
    CHECK(metrics.q_zero_errors == 0);
    CHECK(metrics.accepted > 0);  // the drafts were actually used
  }
}

TEST_CASE("drafters: greedy speculation equals greedy decoding token for token", "[drafters]") {
  const int32_t V = 6;
  const auto target = bigram_target(V, 77);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 40;
  const Generator baseline(target, greedy, nullptr, ar);
  const std::vector<std::vector<Token>> prompts = {{0}, {3, 3}, {1, 2, 1, 2, 1}, {5, 4, 3, 2, 1, 0}};
  for (const DrafterCase& c : drafter_cases(target, greedy, greedy)) {
    for (VerifyMethod method : {VerifyMethod::greedy, VerifyMethod::chain}) {
      if (c.method == VerifyMethod::tree && method == VerifyMethod::greedy) continue;
      INFO("drafter: " << c.name << ", method " << verify_method_name(method));
      GenerationConfig config = ar;
      config.method = c.method == VerifyMethod::tree ? VerifyMethod::tree : method;
      config.tree_shape = c.tree_shape;
      config.tree_sampling = c.scheme;
      config.num_draft_tokens = 4;
      const Generator spec(target, greedy, c.factory, config);
      for (const std::vector<Token>& prompt : prompts) {
        GenerationMetrics m1, m2;
        CHECK(spec.generate(prompt, 3, m2).tokens == baseline.generate(prompt, 3, m1).tokens);
      }
    }
  }
}

TEST_CASE("drafters: a vocabulary that differs from the target's is an error", "[drafters]") {
  const auto target = bigram_target(6, 1);
  auto bytes = std::make_shared<NgramModel>(NgramModel::train({104, 105, 33}, 2, 256));
  GenerationConfig config;
  config.method = VerifyMethod::chain;
  CHECK_THROWS_WITH(Generator(target, SamplingParams{},
                              std::make_shared<NgramDrafterFactory>(bytes, SamplingParams{}, "ngram:b"), config),
                    Catch::Matchers::Contains("vocabulary mismatch"));
}

TEST_CASE("specula train-ngram: byte-level model from a corpus file", "[drafters]") {
  const auto dir = temp_dir();
  const std::string corpus = (dir / "corpus.txt").string(), model = (dir / "bytes.ngram").string();
  write_text(corpus, "the cat sat on the mat. the cat sat on the hat.\n");
  const std::string cmd = std::string(SPECULA_BINARY) + " train-ngram --corpus " + corpus + " --order 3 --output " +
                          model + " > " + (dir / "train.log").string() + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const NgramModel m = NgramModel::load(model);
  CHECK(m.order() == 3);
  CHECK(m.vocab_size() == 256);
  const std::vector<double> q = m.distribution({'t', 'h'});
  CHECK(std::max_element(q.begin(), q.end()) - q.begin() == 'e');  // "th" is always followed by "e"
  double sum = 0.0;
  for (double v : q) sum += v;
  CHECK(sum == Approx(1.0).epsilon(1e-12));
  const std::string bad = std::string(SPECULA_BINARY) + " train-ngram --corpus " + corpus + " --order 3 --output " +
                          model + " --tokenizer gpt2 > " + (dir / "bad.log").string() + " 2>&1";
  CHECK(std::system(bad.c_str()) != 0);
  CHECK(read_text((dir / "bad.log").string()).find("unknown tokenizer 'gpt2'") != std::string::npos);
  // A failed write (a full device) is an error naming the model file.
  const std::string full = std::string(SPECULA_BINARY) + " train-ngram --corpus " + corpus +
                           " --order 3 --output /dev/full > " + (dir / "full.log").string() + " 2>&1";
  CHECK(std::system(full.c_str()) != 0);
  const std::string full_log = read_text((dir / "full.log").string());
  INFO(full_log);
  CHECK(full_log.find("the n-gram model") != std::string::npos);
  CHECK(full_log.find("/dev/full") != std::string::npos);
}
