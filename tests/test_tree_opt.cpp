// The tree-shape optimiser (draft/tree_shape_optimizer.h, `specula tree-opt`): rank-tree text, Sequoia's DP
// against brute force over every tree, the uniform-per-depth search against enumeration, forward costs, and
// the prediction itself: on a drafter whose positional acceptance is known exactly (an oracle that proposes
// the target's own top-ranked tokens, under a target whose every row is a permutation of one distribution),
// the predicted tokens per step must match the Generator's measured mean within its standard error. All
// "[tree-opt]".
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <vector>

#include "cli_runner.h"
#include "draft/model_drafter.h"
#include "draft/tree_shape_optimizer.h"
#include "harness/generation/generator.h"
#include "harness/models/table_model.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/sampling/sampler_pipeline.h"

using namespace specula;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Brute force: every tree of rank paths with ranks < K and depth <= D (prefix-closed node sets).

struct Universe {
  std::vector<int32_t> parent, rank, depth;  // BFS order: parents first
};

Universe rank_universe(int32_t K, int32_t D) {
  Universe u;
  std::vector<int32_t> level = {-1};
  for (int32_t d = 1; d <= D; ++d) {
    std::vector<int32_t> next;
    for (int32_t p : level)
      for (int32_t r = 0; r < K; ++r) {
        next.push_back(static_cast<int32_t>(u.parent.size()));
        u.parent.push_back(p);
        u.rank.push_back(r);
        u.depth.push_back(d);
      }
    level = std::move(next);
  }
  return u;
}

// best[n] = max F over prefix-closed subsets of exactly n nodes.
std::vector<double> brute_force_best(const Universe& u, const std::vector<double>& p, int32_t max_nodes) {
  std::vector<double> best(max_nodes + 1, 0.0), reach(u.parent.size(), 0.0);
  std::vector<char> in(u.parent.size(), 0);
  best[0] = 1.0;
  std::function<void(size_t, int32_t, double)> go = [&](size_t i, int32_t n, double f) {
    best[n] = std::max(best[n], f);
    if (n == max_nodes) return;
    for (size_t j = i; j < u.parent.size(); ++j) {
      const int32_t par = u.parent[j];
      if (par >= 0 && !in[par]) continue;
      in[j] = 1;
      reach[j] = p[u.rank[j]] * (par < 0 ? 1.0 : reach[par]);
      go(j + 1, n + 1, f + reach[j]);
      in[j] = 0;
    }
  };
  go(0, 0, 1.0);
  return best;
}

// ---------------------------------------------------------------------------------------------------------
// A target whose rows are permutations of one distribution, and the oracle drafter of a rank tree.

std::shared_ptr<TableModel> permuted_rows_target(int32_t V, const std::vector<float>& base, uint64_t seed) {
  std::vector<float> logits(static_cast<size_t>(V) * V);
  for (int32_t row = 0; row < V; ++row) {
    std::vector<int32_t> perm(V);
    std::iota(perm.begin(), perm.end(), 0);
    for (int32_t i = V - 1; i > 0; --i) {  // Fisher-Yates on Philox
      const int32_t j = static_cast<int32_t>(philox_uniform(seed, 11, static_cast<uint64_t>(row * V + i)) * (i + 1));
      std::swap(perm[i], perm[std::min(j, i)]);
    }
    for (int32_t x = 0; x < V; ++x) logits[static_cast<size_t>(row) * V + perm[x]] = base[x];
  }
  return std::make_shared<TableModel>(1, V, logits, "permuted-rows");
}

class RankOracleDrafter : public Drafter {
 public:
  RankOracleDrafter(std::shared_ptr<const TableModel> model, RankTree shape)
      : model_(std::move(model)), shape_(std::move(shape)), pipeline_(SamplingParams{}, model_->vocab_size()) {}
  std::string name() const override { return "rank-oracle"; }
  TokenTree propose(const DraftRequest& request) override {
    TokenTree tree;
    tree.scheme = SiblingScheme::deterministic;
    const int32_t V = model_->vocab_size();
    std::vector<float> p(V);
    for (int32_t n = 0; n < shape_.size(); ++n) {
      const int32_t parent = shape_.parent[n];
      const std::vector<Token> suffix = parent < 0 ? std::vector<Token>{} : tree.path(parent);
      pipeline_.process(model_->row_after(*request.context, suffix), TokenHistory{}, p.data());
      std::vector<Token> order(V);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](Token a, Token b) { return p[a] > p[b]; });
      tree.add(order[shape_.rank[n]], parent);
    }
    tree.draft_q.resize(tree.size() + 1);
    return tree;
  }

 private:
  std::shared_ptr<const TableModel> model_;
  RankTree shape_;
  SamplerPipeline pipeline_;
};

class RankOracleFactory : public DrafterFactory {
 public:
  RankOracleFactory(std::shared_ptr<const TableModel> model, RankTree shape)
      : model_(std::move(model)), shape_(std::move(shape)) {}
  std::unique_ptr<Drafter> create() const override { return std::make_unique<RankOracleDrafter>(model_, shape_); }
  int32_t vocab_size() const override { return model_->vocab_size(); }
  std::string description() const override { return "rank oracle"; }

 private:
  std::shared_ptr<const TableModel> model_;
  RankTree shape_;
};

struct StepStats {
  double mean = 0, sd = 0;
  int64_t n = 0;
};

// Tokens emitted per verification step (accepted + 1), over every step of every sequence.
StepStats emitted_per_step(const Generator& generator, int64_t sequences) {
  GenerationMetrics metrics;
  const std::vector<SequenceOutput> outputs = generator.generate_many({0}, 0, sequences, metrics);
  double sum = 0, sum2 = 0;
  StepStats s;
  for (const SequenceOutput& o : outputs)
    for (int32_t a : o.accept_lengths) {
      sum += a + 1;
      sum2 += static_cast<double>(a + 1) * (a + 1);
      ++s.n;
    }
  s.mean = sum / static_cast<double>(s.n);
  s.sd = std::sqrt(std::max(0.0, sum2 / static_cast<double>(s.n) - s.mean * s.mean));
  REQUIRE(s.n == metrics.steps);
  REQUIRE(metrics.q_zero_errors == 0);
  return s;
}

}  // namespace

TEST_CASE("rank trees: parse, format, uniform shapes and errors", "[tree-opt]") {
  const RankTree t = parse_rank_tree("0 1\n0.0 0.1 # comment\n1.0\n0.0.0", "test");
  REQUIRE(t.size() == 6);
  CHECK(t.parent == std::vector<int32_t>{-1, -1, 0, 0, 1, 2});
  CHECK(t.rank == std::vector<int32_t>{0, 1, 0, 1, 0, 0});
  CHECK(t.max_depth() == 3);
  CHECK(t.uniform_shape().empty());
  CHECK(format_rank_tree(t) == "0 1\n0.0 0.1 1.0\n0.0.0\n");
  CHECK(parse_rank_tree(format_rank_tree(t), "again").parent == t.parent);
  // Order of the paths does not matter; BFS order with siblings by rank comes out.
  CHECK(parse_rank_tree("1.0 0.0.0 0.1 1 0 0.0", "shuffled").parent == t.parent);

  const RankTree u = RankTree::uniform({2, 2, 1});
  CHECK(u.size() == 2 + 4 + 4);
  CHECK(u.uniform_shape() == std::vector<int32_t>{2, 2, 1});
  CHECK(parse_rank_tree(format_rank_tree(u), "u").uniform_shape() == std::vector<int32_t>{2, 2, 1});
  CHECK(RankTree::chain(3).uniform_shape() == std::vector<int32_t>{1, 1, 1});
  CHECK(u.truncated(2).uniform_shape() == std::vector<int32_t>{2, 2});
  CHECK(RankTree{}.uniform_shape().empty());

  // Ranks need not be contiguous (Medusa's choices may skip one): rank 1 under node 0 without rank 0.
  CHECK(parse_rank_tree("0 0.1", "f.txt").rank == std::vector<int32_t>{0, 1});
  CHECK_THROWS_WITH(parse_rank_tree("0 1.1", "f.txt"), Contains("'1.1' has no parent '1'"));
  CHECK_THROWS_WITH(parse_rank_tree("0 0.x", "f.txt"), Contains("'0.x' is not a rank path"));
  CHECK_THROWS_WITH(parse_rank_tree("0 0", "f.txt"), Contains("given twice"));
  CHECK_THROWS_WITH(parse_rank_tree("# nothing\n", "f.txt"), Contains("empty tree"));
  CHECK_THROWS_WITH(parse_rank_tree("0 0.", "f.txt"), Contains("ends with '.'"));
}

TEST_CASE("expected tokens per step: F(T) = sum over nodes of the product of p along the path", "[tree-opt]") {
  const std::vector<double> p = {0.5, 0.2, 0.1};
  CHECK(expected_tokens_per_step(RankTree{}, p) == 1.0);
  CHECK(expected_tokens_per_step(RankTree::chain(3), p) == Approx(1 + 0.5 + 0.25 + 0.125));
  // Uniform 2,1: 1 + (0.5 + 0.2) + (0.5 * 0.5 + 0.2 * 0.5).
  CHECK(expected_tokens_per_step(RankTree::uniform({2, 1}), p) == Approx(1 + 0.7 + 0.35));
  // A rank beyond the measured ones contributes nothing.
  CHECK(expected_tokens_per_step(RankTree::uniform({4}), p) == Approx(1.8));
  CHECK_THROWS_WITH(validate_positional_acceptance({0.7, 0.5}, "--acceptance"), Contains("sum to 1.2"));
  CHECK_THROWS_WITH(validate_positional_acceptance({0.7, -0.1}, "--acceptance"), Contains("p_2 = -0.1"));
  CHECK_THROWS_WITH(validate_positional_acceptance({}, "--acceptance"), Contains("no acceptance"));
}

TEST_CASE("Sequoia's DP finds the best tree of every size: equal to brute force over all rank trees", "[tree-opt]") {
  const int32_t K = 3, D = 3, N = 6;
  const Universe u = rank_universe(K, D);
  for (const std::vector<double>& p :
       std::vector<std::vector<double>>{{0.6, 0.2, 0.1}, {0.3, 0.25, 0.2}, {0.9, 0.05, 0.01}, {0.45, 0.44, 0.1}}) {
    CAPTURE(p);
    const SequoiaTable table(p, N, D);
    for (int32_t d = 1; d <= D; ++d) {
      Universe shallow;
      for (size_t i = 0; i < u.parent.size(); ++i)
        if (u.depth[i] <= d) {
          shallow.parent.push_back(u.parent[i]);
          shallow.rank.push_back(u.rank[i]);
          shallow.depth.push_back(u.depth[i]);
        }
      const std::vector<double> brute = brute_force_best(shallow, p, N);
      for (int32_t n = 1; n <= N; ++n) {
        CAPTURE(d, n);
        CHECK(table.best(n, d) == Approx(brute[n]).epsilon(1e-12));
        if (brute[n] == 0.0) continue;  // more nodes than K-ary trees of depth d hold
        const RankTree t = table.tree(n, d);
        CHECK(t.size() == n);
        CHECK(t.max_depth() <= d);
        CHECK(expected_tokens_per_step(t, p) == Approx(brute[n]).epsilon(1e-12));
      }
    }
  }
  // More nodes than K-ary trees of that depth hold: no tree.
  CHECK(SequoiaTable({0.5, 0.3}, 8, 2).best(7, 2) == 0.0);
  CHECK(SequoiaTable({0.5, 0.3}, 8, 2).best(6, 2) > 0.0);
}

TEST_CASE("forward costs: linear between measured points; errors name the option", "[tree-opt]") {
  const ForwardCost c = ForwardCost::parse("8:1.1,1:1.0,16:1.5", "forward_cost");
  CHECK(c.at(1) == 1.0);
  CHECK(c.at(8) == Approx(1.1));
  CHECK(c.at(4) == Approx(1.0 + 0.1 * 3 / 7));
  CHECK(c.at(12) == Approx(1.3));
  CHECK(c.max_rows() == 16);
  CHECK_THROWS_WITH(c.at(17), Contains("outside the measured range"));
  CHECK_THROWS_WITH(ForwardCost::parse("2:1.0,8:1.1", "forward_cost"), Contains("needs the cost of 1 row"));
  CHECK_THROWS_WITH(ForwardCost::parse("1:1.0,8", "forward_cost"), Contains("'8' is not ROWS:COST"));
  CHECK_THROWS_WITH(ForwardCost::parse("1:1.0,8:0", "forward_cost"), Contains("must be > 0"));
  CHECK_THROWS_WITH(ForwardCost::parse("1:1.0,1:1.2", "forward_cost"), Contains("1 rows given twice"));
}

TEST_CASE("tree choice: tokens per unit time under the forward cost; uniform search equals enumeration", "[tree-opt]") {
  const std::vector<double> p = {0.55, 0.2, 0.08, 0.04};
  TreeSearchOptions o;
  o.acceptance = p;
  o.max_depth = 5;
  o.max_nodes = 24;
  // Free forwards: the biggest tree allowed wins (F grows with every node).
  const TreeChoice flat = optimal_tree(o, ForwardCost({{1, 1.0}, {64, 1.0}}, "flat"));
  CHECK(flat.tree.size() == 24);
  CHECK(flat.tokens_per_step == Approx(SequoiaTable(p, 24, 5).best(24, 5)));
  CHECK(flat.speedup == Approx(flat.tokens_per_step));
  // Steep forwards: a small tree; so steep that nothing pays: no tree.
  const TreeChoice steep = optimal_tree(o, ForwardCost({{1, 1.0}, {2, 1.2}, {64, 40.0}}, "steep"));
  CHECK(steep.tree.size() >= 1);
  CHECK(steep.tree.size() < 8);
  CHECK(optimal_tree(o, ForwardCost({{1, 1.0}, {2, 3.0}, {64, 100.0}}, "prohibitive")).tree.size() == 0);
  // A draft cost per depth favours shallow trees.
  o.draft_cost_per_depth = 0.3;
  const TreeChoice costly_draft = optimal_tree(o, ForwardCost({{1, 1.0}, {64, 1.0}}, "flat"));
  CHECK(costly_draft.tree.max_depth() < flat.tree.max_depth());
  o.draft_cost_per_depth = 0.0;

  // The uniform search against an explicit enumeration of shapes under a realistic cost curve.
  const ForwardCost curve = ForwardCost::parse("1:1.0,4:1.02,8:1.08,16:1.25,32:1.7", "curve");
  const TreeChoice uniform = best_uniform_tree(o, curve);
  double best_rate = 1.0 / curve.at(1);
  std::vector<int32_t> best_shape;
  std::function<void(std::vector<int32_t>&, int64_t, int64_t)> enumerate = [&](std::vector<int32_t>& s, int64_t nodes,
                                                                               int64_t level) {
    if (!s.empty()) {
      const RankTree t = RankTree::uniform(s);
      const double rate = expected_tokens_per_step(t, p) / curve.at(t.size() + 1);
      if (rate > best_rate * (1 + 1e-12)) {
        best_rate = rate;
        best_shape = s;
      }
    }
    if (static_cast<int32_t>(s.size()) == o.max_depth) return;
    for (int32_t b = 1; b <= 4; ++b)
      if (nodes + level * b <= 24) {
        s.push_back(b);
        enumerate(s, nodes + level * b, level * b);
        s.pop_back();
      }
  };
  std::vector<int32_t> s;
  enumerate(s, 0, 1);
  CHECK(uniform.shape == best_shape);
  CHECK(uniform.tokens_per_step / uniform.step_cost == Approx(best_rate));
  // The unconstrained optimum is at least as good.
  const TreeChoice best = optimal_tree(o, curve);
  CHECK(best.tokens_per_step / best.step_cost >= uniform.tokens_per_step / uniform.step_cost * (1 - 1e-12));
}

TEST_CASE("predicted tokens per step match the Generator on a drafter with known positional acceptance", "[tree-opt]") {
  // Every row of the target is a permutation of softmax(base): a drafter proposing the target's rank-k token
  // is accepted with exactly p_k = the k-th largest probability, at every node (point-mass verification).
  const int32_t V = 8;
  const std::vector<float> base = {2.0f, 1.1f, 0.6f, 0.1f, -0.4f, -1.0f, -1.6f, -2.2f};
  const auto target = permuted_rows_target(V, base, 5);
  const SamplerPipeline pipeline(SamplingParams{}, V);
  std::vector<float> sorted(V);
  pipeline.process(base.data(), TokenHistory{}, sorted.data());  // base is sorted descending already
  const std::vector<double> p(sorted.begin(), sorted.end());

  TreeSearchOptions o;
  o.acceptance = p;
  o.max_depth = 4;
  o.max_nodes = 12;
  const ForwardCost curve = ForwardCost::parse("1:1.0,4:1.05,8:1.15,13:1.3", "curve");
  const TreeChoice best = optimal_tree(o, curve);
  const TreeChoice uniform = best_uniform_tree(o, curve);
  REQUIRE(best.tree.size() > 1);
  INFO("optimal tree:\n" << format_rank_tree(best.tree) << "uniform shape size " << uniform.shape.size());

  GenerationConfig config;
  config.method = VerifyMethod::tree;
  config.tree_sampling = SiblingScheme::deterministic;
  config.max_new_tokens = 48;
  config.seed = 77;
  struct Case {
    std::string name;
    std::shared_ptr<const DrafterFactory> factory;
    std::vector<int32_t> tree_shape;
    double predicted;
  };
  const std::vector<Case> cases = {
      {"optimal (rank oracle)", std::make_shared<RankOracleFactory>(target, best.tree),
       std::vector<int32_t>(best.tree.max_depth(), 1), best.tokens_per_step},
      // The uniform tree through the ordinary model drafter: top-k of q = p under --tree-sampling topk.
      {"uniform (model drafter, --tree)", std::make_shared<ModelDrafterFactory>(target, SamplingParams{}),
       uniform.shape, uniform.tokens_per_step},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    GenerationConfig cc = config;
    cc.tree_shape = c.tree_shape;
    const Generator generator(target, SamplingParams{}, c.factory, cc);
    const StepStats s = emitted_per_step(generator, 1500);
    const double se = s.sd / std::sqrt(static_cast<double>(s.n));
    INFO("predicted " << c.predicted << ", measured " << s.mean << " +- " << se << " over " << s.n << " steps");
    CHECK(stats::normal_two_sided_p(stats::z_score(s.mean, s.sd, s.n, c.predicted)) >= stats::kAlpha);
    CHECK(std::fabs(s.mean - c.predicted) < 0.02 * c.predicted);  // and the error bar is small
  }
}

TEST_CASE("specula tree-opt: prints both trees, writes a --tree the generator accepts and rank paths", "[tree-opt]") {
  testing::TempDir dir;
  const std::string shape_file = dir.file("tree.txt"), ranks_file = dir.file("ranks.txt");
  const testing::CliResult r = testing::run_specula(
      "tree-opt --acceptance 0.55,0.2,0.08,0.04 --forward-cost 1:1.0,4:1.02,8:1.08,16:1.25,32:1.7 --max-depth 5 "
      "--output " +
      shape_file + " --output-ranks " + ranks_file);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("optimal tree (Sequoia DP)") && Contains("best uniform tree") &&
                        Contains("expected tokens per step"));
  const std::string shape_text = testing::read_text(shape_file);
  const std::vector<int32_t> shape = parse_tree_shape(shape_text.substr(0, shape_text.find('\n')));
  const RankTree ranks = read_rank_tree_file(ranks_file);
  TreeSearchOptions o;
  o.acceptance = {0.55, 0.2, 0.08, 0.04};
  o.max_depth = 5;
  const ForwardCost curve = ForwardCost::parse("1:1.0,4:1.02,8:1.08,16:1.25,32:1.7", "curve");
  CHECK(shape == best_uniform_tree(o, curve).shape);
  CHECK(ranks.parent == optimal_tree(o, curve).tree.parent);
  CHECK(ranks.rank == optimal_tree(o, curve).tree.rank);

  const testing::CliResult bad = testing::run_specula("tree-opt --acceptance 0.7,0.5 --forward-cost 1:1,8:1.1");
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("--acceptance") && Contains("sum to 1.2"));
  const testing::CliResult none = testing::run_specula("tree-opt --acceptance 0.7");
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.err, Contains("--forward-cost"));
  // The cost table raises its problems as the parameter's; the command line names the flag.
  for (const char* costs : {"1:1,8", "2:1,8:1.1"}) {
    const testing::CliResult table =
        testing::run_specula(std::string("tree-opt --acceptance 0.7 --forward-cost ") + costs);
    CHECK(table.exit_code == 1);
    CHECK_THAT(table.err, StartsWith("specula tree-opt: error: --forward-cost: "));
  }
}

TEST_CASE("tree-opt --cost-profile: the profile's target curve, and its cost of the --draft model unless --draft-cost",
          "[tree-opt][cli]") {
  testing::TempDir dir;
  const std::string target =
      dir.write("t.txt", "0.5 1.0 -0.3 0.2\n1.2 -0.4 0.3 0.0\n-0.2 0.8 0.9 -1.0\n0.1 0.1 1.5 -0.5\n");
  const std::string draft =
      dir.write("d.txt", "0.4 1.3 -0.1 0.2\n1.0 -0.2 0.3 0.3\n-0.5 0.8 1.2 -1.0\n0.3 0.0 1.1 -0.2\n");
  const nlohmann::json profile = {
      {"format", "specula cost profile"},
      {"version", 1},
      {"machine", {{"cpu", "a test machine"}}},
      {"device", "cpu"},
      {"target",
       {{"model", "bigram:" + target}, {"parameters", 16}, {"weights_dtype", "float32"}, {"one_token_us", 10}}},
      {"rows", {{{"rows", 1}, {"cost", 1}}, {{"rows", 4}, {"cost", 1.1}}, {{"rows", 16}, {"cost", 1.5}}}},
      {"drafts", {{{"model", "bigram:" + draft}, {"parameters", 16}, {"cost", 0.25}}}}};
  const std::string path = dir.write("profile.json", profile.dump());
  const std::string measure = "tree-opt --target bigram:" + target + " --draft bigram:" + draft +
                              " --prompt-tokens 0,1 --measure-branching 3 --measure-samples 2 --measure-tokens 16 "
                              "--max-depth 3 --cost-profile " +
                              path;
  const testing::CliResult r = testing::run_specula(measure);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("forward cost t(rows)/t(1): 1:1 4:1.1 16:1.5") &&
                        Contains("draft cost per depth 0.25 (the cost profile's bigram:" + draft + ")"));
  // --draft-cost wins over the profile; without either, the output says drafting was counted as free.
  const testing::CliResult given = testing::run_specula(measure + " --draft-cost 0.125");
  CHECK_THAT(given.out, Contains("draft cost per depth 0.125 (--draft-cost)"));
  const testing::CliResult free =
      testing::run_specula("tree-opt --acceptance 0.55,0.2 --max-depth 3 --cost-profile " + path);
  CHECK(free.exit_code == 0);
  CHECK_THAT(free.out, Contains("draft cost per depth 0 (not given: drafting counted as free"));
  // The help shows no default that the profile would override.
  CHECK_THAT(testing::run_specula("tree-opt --help").out,
             Contains("--draft-cost arg ") && !Contains("--draft-cost arg (="));
  // A profile of another target is refused, as `run` refuses it.
  const testing::CliResult other = testing::run_specula(
      "tree-opt --target bigram:" + draft + " --draft bigram:" + draft + " --prompt-tokens 0,1 --cost-profile " + path);
  CHECK(other.exit_code == 1);
  CHECK_THAT(other.err, Contains("--cost-profile: " + path + " was measured on the target bigram:" + target +
                                 ", not on --target bigram:" + draft));
  // Exactly one source of forward costs.
  const testing::CliResult two =
      testing::run_specula("tree-opt --acceptance 0.55 --forward-cost 1:1,8:1.1 --cost-profile " + path);
  CHECK(two.exit_code == 1);
  CHECK_THAT(two.err, Contains("give exactly one of --forward-cost, --forward-bench and --cost-profile"));
  const testing::CliResult bad =
      testing::run_specula("tree-opt --acceptance 0.55 --cost-profile " + dir.write("bad.json", "{}"));
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.err, Contains("--cost-profile") && Contains(dir.file("bad.json")));
}

TEST_CASE("tree-opt: a failed write of --output or --output-ranks is an error naming it", "[tree-opt][cli]") {
  testing::TempDir dir;
  const std::string base = "tree-opt --acceptance 0.55,0.2,0.08,0.04 --forward-cost 1:1.0,4:1.02,8:1.08 --max-depth 4";
  for (const std::string option : {"--output", "--output-ranks"}) {
    INFO(option);
    const std::string other = option == "--output" ? " --output-ranks " + dir.file("r") : " --output " + dir.file("s");
    const testing::CliResult r = testing::run_specula(base + " " + option + " /dev/full" + other);
    CHECK(r.exit_code == 1);
    CHECK_THAT(r.err, Contains(option) && Contains("/dev/full"));
  }
}

TEST_CASE("tree-opt: with no tree worth drafting, an earlier tree at --output is removed, not left to be read",
          "[tree-opt][cli]") {
  testing::TempDir dir;
  const std::string shape = dir.write("tree.txt", "1,1,1,1,1\n"), ranks = dir.write("ranks.txt", "0\n");
  const testing::CliResult r =
      testing::run_specula("tree-opt --acceptance 0.05 --forward-cost 1:1,8:3 --draft-cost 0.5 --output " + shape +
                           " --output-ranks " + ranks);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("no tree beats plain decoding at these costs: nothing written") &&
                        Contains("removed the earlier --output file " + shape));
  CHECK_FALSE(std::filesystem::exists(shape));
  CHECK_FALSE(std::filesystem::exists(ranks));
  const testing::CliResult same = testing::run_specula("tree-opt --acceptance 0.5 --forward-cost 1:1,8:1.1 --output " +
                                                       shape + " --output-ranks " + shape);
  CHECK(same.exit_code == 1);
  CHECK_THAT(same.err, Contains("--output-ranks: '" + shape + "' is also --output's file"));
  const testing::CliResult none =
      testing::run_specula("tree-opt --acceptance 0.5 --forward-cost 1:1,8:1.1 --max-nodes 0");
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.err, Contains("--max-nodes must be >= 1, got 0"));
}

TEST_CASE("tree-opt: the search is bounded before it starts, and the uniform enumeration by its shape count",
          "[tree-opt][cli]") {
  const std::string base = "tree-opt --acceptance 0.5,0.2,0.1,0.05,0.03,0.02,0.01,0.01 --forward-cost 1:1.0,5000:3.0";
  const testing::CliResult nodes = testing::run_specula(base + " --max-nodes 100000 --max-depth 1000");
  CHECK(nodes.exit_code == 1);
  CHECK_THAT(nodes.err, Contains("--max-nodes must be <= 4096 (a draft tree's limit), got 100000"));
  const testing::CliResult depth = testing::run_specula(base + " --max-nodes 64 --max-depth 1000");
  CHECK(depth.exit_code == 1);
  CHECK_THAT(depth.err, Contains("--max-depth must be <= 64, got 1000"));
  const testing::CliResult table = testing::run_specula(base + " --max-nodes 4096 --max-depth 64");
  CHECK(table.exit_code == 1);
  CHECK_THAT(table.err, Contains("--max-nodes 4096 with max depth 64") && Contains("steps of Sequoia's table"));
  // Within the table's bound, but with more uniform shapes than the enumeration visits.
  const testing::CliResult shapes = testing::run_specula(base + " --max-nodes 1024 --max-depth 64");
  CHECK(shapes.exit_code == 1);
  CHECK_THAT(shapes.err, Contains("--max-depth 64 with max nodes 1024 allows more than 20000000 uniform tree shapes"));
}

TEST_CASE("tree-opt writes only trees generate accepts, for every bundled drafter", "[tree-opt][cli]") {
  // Measured on each bundled drafter with its target: the uniform tree (--tree) and, for the head drafters, the
  // rank-path tree (tree=FILE). Medusa drafts one level per head, so the default depth limit of 8 is lowered
  // to its 3 heads with a note, and a --max-depth beyond them is refused naming both numbers.
  const std::string models = std::string(SPECULA_SOURCE_DIR) + "/results/models/";
  const std::string small = "transformer:" + models + "target", large = "transformer:" + models + "target-27m";
  struct Pair {
    std::string target, draft;
    bool heads;
  };
  const std::vector<Pair> pairs = {
      {small, "prompt-lookup", false},
      {small, "ngram:" + models + "ngram-order4.txt", false},
      {small, "ngram:" + models + "ngram-order6.txt", false},
      {large, "ngram:" + models + "ngram-order6-distilled-27m.txt", false},
      {small, "transformer:" + models + "draft", false},
      {small, "medusa:" + models + "medusa", true},
      {small, "eagle:" + models + "eagle", true},
      {large, "medusa:" + models + "medusa-27m", true},
      {large, "eagle:" + models + "eagle-27m", true},
  };
  const std::string prompt = " --prompt-tokens 82,79,77,69,79,58,10,87,104,97,116";
  const std::string costs = " --forward-cost 1:1,4:1.01,8:1.02,16:1.04,32:1.08,64:1.2";
  testing::TempDir dir;
  for (const Pair& p : pairs) {
    INFO(p.draft);
    const std::string shape_file = dir.file("tree.txt"), ranks_file = dir.file("ranks.txt");
    const testing::CliResult opt =
        testing::run_specula("tree-opt --target " + p.target + " --draft " + p.draft + prompt + costs +
                             " --measure-samples 1 --measure-tokens 24 --measure-branching 4 --output " + shape_file +
                             " --output-ranks " + ranks_file);
    INFO(opt.out << opt.err);
    REQUIRE(opt.exit_code == 0);
    if (opt.out.find("nothing written") != std::string::npos) continue;
    const std::string shape = testing::read_text(shape_file).substr(0, testing::read_text(shape_file).find('\n'));
    const std::string generate =
        "generate --target " + p.target + prompt + " --max-new-tokens 12 --method tree --output " + dir.file("out.txt");
    const testing::CliResult uniform = testing::run_specula(generate + " --draft " + p.draft + " --tree " + shape);
    INFO("--tree " << shape << ": " << uniform.err);
    CHECK(uniform.exit_code == 0);
    if (p.heads) {
      const testing::CliResult ranked = testing::run_specula(generate + " --draft " + p.draft + ",tree=" + ranks_file);
      INFO("tree=" << testing::read_text(ranks_file) << ranked.err);
      CHECK(ranked.exit_code == 0);
    }
    if (p.draft.rfind("medusa:", 0) == 0) {
      CHECK_THAT(opt.out, Contains("max depth 8 lowered to 3"));
      CHECK(parse_tree_shape(shape).size() <= 3u);
      const testing::CliResult deep = testing::run_specula("tree-opt --target " + p.target + " --draft " + p.draft +
                                                           prompt + costs + " --max-depth 4");
      CHECK(deep.exit_code == 1);
      CHECK_THAT(deep.err, Contains("--max-depth 4 is deeper than") && Contains("(3 levels)"));
    }
  }
}
