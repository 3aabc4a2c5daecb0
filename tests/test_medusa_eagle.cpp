// Medusa heads and the EAGLE drafter (draft/heads/head_drafters.h): candidates against a full recompute, the
// EAGLE-2 dynamic tree's invariants, exactness through the real Generator (G-test of the exact 2-token law of a
// small random transformer under T = 0.8, top-p, penalties and an allowed-token mask), greedy speculation =
// greedy decoding, the p/q mutant on the dynamic tree, the extra target forward's count, spec errors and a
// short training run of each. Tags "[medusa]" and "[eagle]".
//
// The models are random (training is not needed for exactness) with unit-scale weights, so the logits are far
// from flat; the embedding rows of tokens >= 16 are shrunk (x 0.05) so that the heads' top candidates are
// mostly among the 16 tokens the target's sampler allows, and drafts are accepted often enough to exercise
// acceptance.
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>
#include <tuple>

#include "draft/heads/draft_heads.h"
#include "draft/heads/head_drafters.h"
#include "draft/registry/drafter_registry.h"
#include "draft/tree_shape_optimizer.h"
#include "harness/generation/generator.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "harness/train/head_trainer.h"
#include "kernels/shared/error.h"
#include "tests/statistics/goodness_of_fit.h"
#include "tests/support/mutant_switch.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

constexpr int32_t kV = 256;
constexpr int32_t kLive = 16;  // tokens the tests' sampler allows

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::temp_directory_path() / ("specula-test-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string str(const std::string& sub) const { return (path / sub).string(); }
};

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.vocab_size = kV;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.d_ff = 48;
  c.max_seq_len = 64;
  return c;
}

// Unit-scale weights (see test_transformer.cpp), except the (tied) embedding: N(0, 0.35^2), so that the logits
// h . e (|h|^2 ~ d = 32) have a standard deviation near 2 and the sampled law spreads over several tokens.
void scale_parameters(torch::nn::Module& m, uint64_t seed) {
  torch::manual_seed(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : m.named_parameters()) {
    torch::Tensor t = p.value();
    if (t.dim() == 1)
      p.key().find("bias") != std::string::npos ? t.normal_(0.0, 0.3) : t.uniform_(0.8, 1.2);
    else if (p.key() == "embedding.weight")
      t.normal_(0.0, 0.35);
    else
      t.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(t.size(1))));
  }
}

struct Fixture {
  TempDir dir{"heads"};
  std::string target_dir, medusa_dir, eagle_dir;
  std::shared_ptr<const LanguageModel> target;
  // Modules for full recomputes (mutable: forward() is not const).
  mutable Transformer reference{nullptr};  // the target
  mutable MedusaHeads medusa{nullptr};
  mutable EagleHead eagle{nullptr};

  Fixture() {
    const TransformerConfig c = tiny_config();
    Transformer t(c);
    scale_parameters(*t, 101);
    {
      torch::NoGradGuard no_grad;
      t->embedding->weight.narrow(0, kLive, kV - kLive).mul_(0.05);
    }
    target_dir = dir.str("target");
    save_checkpoint(target_dir, t, CheckpointConfig{});
    reference = load_checkpoint(target_dir).model;
    target = std::make_shared<TransformerLanguageModel>(target_dir);

    medusa = MedusaHeads(3, c.d_model, kV);
    scale_parameters(*medusa, 202);
    medusa->init_from_lm_head(reference->embedding->weight);
    DraftHeadsConfig mc;
    mc.kind = "medusa";
    mc.target = "../target";
    mc.target_model = c;
    mc.medusa_heads = 3;
    medusa_dir = dir.str("medusa");
    save_draft_heads(medusa_dir, *medusa, mc);

    eagle = EagleHead(c);
    scale_parameters(*eagle, 303);
    DraftHeadsConfig ec = mc;
    ec.kind = "eagle";
    ec.medusa_heads = 0;
    eagle_dir = dir.str("eagle");
    save_draft_heads(eagle_dir, *eagle, ec);
    medusa->eval();
    eagle->eval();
  }

  std::shared_ptr<const DrafterFactory> drafter(const std::string& spec) const {
    return load_drafter(spec, SamplingParams{}, target, SamplingParams{});
  }

  // f_t for t = 0..n-1 by one full causal forward: [n, H].
  torch::Tensor features(const std::vector<Token>& tokens, int64_t n) const {
    torch::NoGradGuard no_grad;
    const AttentionLayout layout = causal_layout(0, n);
    const torch::Tensor ids = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.begin() + n)).unsqueeze(0);
    return reference->hidden_states(ids, layout.positions, layout.mask, nullptr)[0];
  }

  // EAGLE's f^ after context + path, by recomputing every pair from scratch (no cache, no tree mask).
  torch::Tensor eagle_reference(const std::vector<Token>& context, const std::vector<Token>& path) const {
    torch::NoGradGuard no_grad;
    const int64_t L = static_cast<int64_t>(context.size());
    std::vector<torch::Tensor> feats = {features(context, L - 1)};
    std::vector<int64_t> next(context.begin() + 1, context.end());
    torch::Tensor last;
    for (size_t i = 0; i <= path.size(); ++i) {
      if (i > 0) {
        next.push_back(path[i - 1]);
        feats.push_back(last.unsqueeze(0));
      }
      const torch::Tensor f = torch::cat(feats).unsqueeze(0);
      const int64_t n = f.size(1);
      const AttentionLayout layout = causal_layout(0, n);
      const torch::Tensor emb = reference->embedding->forward(torch::tensor(next).unsqueeze(0));
      last = eagle->forward(emb, f, layout.positions, layout.mask, nullptr)[0][n - 1];
    }
    return last;
  }
};

const Fixture& fixture() {
  static const Fixture f;
  return f;
}

std::vector<Token> top_k(const torch::Tensor& logits, int32_t k) {
  const torch::Tensor l = logits.contiguous();
  std::vector<Token> idx(l.size(0));
  std::iota(idx.begin(), idx.end(), 0);
  const float* v = l.data_ptr<float>();
  std::stable_sort(idx.begin(), idx.end(), [&](Token a, Token b) { return v[a] > v[b]; });
  idx.resize(k);
  return idx;
}

DraftRequest request(const std::vector<Token>& context, const TokenHistory& history, std::vector<int32_t> shape,
                     int32_t k = 3) {
  DraftRequest r;
  r.context = &context;
  r.history = &history;
  r.num_draft_tokens = k;
  r.tree_shape = std::move(shape);
  r.scheme = SiblingScheme::deterministic;
  return r;
}

// Processed target law of all 2-token continuations (index x1 * V + x2), from full forwards.
std::vector<double> exact_two_token_law(const Fixture& f, const SamplingParams& params,
                                        const std::vector<Token>& prompt) {
  const SamplerPipeline pipeline(params, kV);
  auto logits_after = [&](const std::vector<Token>& ctx) {
    torch::NoGradGuard no_grad;
    const torch::Tensor l =
        f.reference->forward(torch::tensor(std::vector<int64_t>(ctx.begin(), ctx.end())).unsqueeze(0))[0][-1];
    return std::vector<float>(l.data_ptr<float>(), l.data_ptr<float>() + kV);
  };
  TokenHistory h0;
  h0.prompt = prompt;
  const std::vector<float> p1 = pipeline.process(logits_after(prompt), h0);
  std::vector<double> law(static_cast<size_t>(kV) * kV, 0.0);
  for (Token x1 = 0; x1 < kV; ++x1) {
    if (p1[x1] == 0.0f) continue;
    std::vector<Token> ctx = prompt;
    ctx.push_back(x1);
    const std::vector<float> p2 = pipeline.process(logits_after(ctx), pipeline.advance(h0, x1, p1.data()));
    for (Token x2 = 0; x2 < kV; ++x2) law[static_cast<size_t>(x1) * kV + x2] = static_cast<double>(p1[x1]) * p2[x2];
  }
  const double total = std::accumulate(law.begin(), law.end(), 0.0);
  for (double& v : law) v /= total;
  return law;
}

SamplingParams exactness_params() {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.4f;
  for (Token t = 0; t < kLive; ++t) p.allowed_tokens.push_back(t);
  return p;
}

struct GofRun {
  stats::GofResult g;
  GenerationMetrics metrics;
};

GofRun run_two_token_gof(const std::shared_ptr<const DrafterFactory>& drafter, VerifyMethod method,
                         std::vector<int32_t> shape, const std::vector<double>& law, const std::vector<Token>& prompt,
                         int64_t n) {
  GenerationConfig config;
  config.method = method;
  config.num_draft_tokens = 3;
  config.tree_shape = std::move(shape);
  config.tree_sampling = SiblingScheme::deterministic;
  config.max_new_tokens = 2;
  config.seed = 4242;
  const Generator generator(fixture().target, exactness_params(), drafter, config);
  GofRun run;
  const std::vector<SequenceOutput> out = generator.generate_many(prompt, 0, n, run.metrics);
  std::vector<int64_t> counts(law.size(), 0);
  for (const SequenceOutput& s : out) ++counts[static_cast<size_t>(s.tokens[0]) * kV + s.tokens[1]];
  run.g = stats::g_test(counts, law);
  return run;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Candidates

// The drafter registry's `doubts` column (which check_drafter_confidence reads from a spec before any model loads) says
// what each kind's loaded factory says (DrafterFactory::stops_on_confidence), kind by kind: the built-in kinds and a
// language model's spec.
TEST_CASE("each drafter kind's registry row and its loaded factory agree on stopping on the draft's doubt",
          "[medusa][eagle][drafters]") {
  const Fixture& f = fixture();
  const std::string bundled_ngram = std::string(SPECULA_SOURCE_DIR) + "/results/models/ngram-order4.txt";
  int64_t doubting = 0, refused = 0;
  for (const std::string& spec :
       {std::string("prompt-lookup"), std::string("synthetic:alpha=0.5"), "ngram:" + bundled_ngram,
        "transformer:" + f.target_dir, "medusa:" + f.medusa_dir, "eagle:" + f.eagle_dir}) {
    INFO(spec);
    const bool stops = f.drafter(spec)->stops_on_confidence();
    bool refuses = false;
    try {
      check_drafter_confidence(spec, 0.4);
    } catch (const std::exception& e) {
      refuses = true;
      CHECK_THAT(e.what(), Catch::Contains("does not stop on its confidence"));
    }
    CHECK(stops != refuses);
    doubting += stops;
    refused += refuses;
  }
  CHECK(doubting == 3);  // ngram, synthetic, a draft model
  CHECK(refused == 3);   // prompt-lookup, medusa, eagle
}

TEST_CASE("medusa: candidates are each head's top-k on f_{L-2}; chains, --tree shapes and tree files", "[medusa]") {
  const Fixture& f = fixture();
  const auto factory = f.drafter("medusa:" + f.medusa_dir);
  auto drafter = factory->create();
  const std::vector<Token> context = {3, 1, 4, 1, 5, 9, 2, 6};
  TokenHistory history;
  history.prompt = context;
  const int64_t L = static_cast<int64_t>(context.size());
  torch::Tensor heads;
  {
    torch::NoGradGuard no_grad;
    heads = f.medusa->forward(f.features(context, L - 1)[L - 2]);  // [K, V]
  }
  SECTION("chain: head k's top-1, at most K heads") {
    const TokenTree chain = drafter->propose(request(context, history, {}, 5));
    REQUIRE(chain.size() == 3);
    for (int32_t k = 0; k < 3; ++k) {
      CHECK(chain.parent[k] == k - 1);
      CHECK(chain.tokens[k] == top_k(heads[k], 1)[0]);
    }
    CHECK(chain.scheme == SiblingScheme::deterministic);
    for (const auto& q : chain.draft_q) CHECK(q.empty());  // point masses
  }
  SECTION("--tree 3,2: Cartesian top-k, the same candidates under every parent") {
    const TokenTree tree = drafter->propose(request(context, history, {3, 2}));
    REQUIRE(tree.size() == 3 + 6);
    const std::vector<Token> d1 = top_k(heads[0], 3), d2 = top_k(heads[1], 2);
    for (int32_t n = 0; n < tree.size(); ++n) {
      if (tree.parent[n] < 0) {
        CHECK(tree.tokens[n] == d1[n]);
      } else {
        const std::vector<int32_t> sib = tree.children(tree.parent[n] + 1);
        const auto rank = std::find(sib.begin(), sib.end(), n) - sib.begin();
        CHECK(tree.tokens[n] == d2[rank]);
      }
    }
    CHECK(drafter->counters().n_forward == 1);  // one forward of all heads per proposal
  }
  SECTION("tree=FILE: rank paths, each depth ranked by its head") {
    const std::string file = f.dir.str("medusa-tree.txt");
    std::ofstream(file) << "0 1 0.0 0.2 1.0 0.0.1\n";
    const auto from_file = f.drafter("medusa:" + f.medusa_dir + ",tree=" + file)->create();
    const TokenTree tree = from_file->propose(request(context, history, {1}));
    REQUIRE(tree.size() == 6);
    CHECK(tree.tokens[3] == top_k(heads[1], 3)[2]);  // path 0.2
    CHECK(tree.tokens[5] == top_k(heads[2], 2)[1]);  // path 0.0.1
  }
  SECTION("a one-token context has no feature: nothing is proposed") {
    const std::vector<Token> one = {7};
    CHECK(drafter->propose(request(one, history, {2})).size() == 0);
  }
}

TEST_CASE("eagle: cached tree drafting equals a full recompute along every path", "[eagle]") {
  const Fixture& f = fixture();
  auto drafter = f.drafter("eagle:" + f.eagle_dir)->create();
  std::vector<Token> context = {3, 1, 4, 1, 5, 9, 2, 6};
  TokenHistory history;
  history.prompt = context;
  // Three steps on a growing context: the head's cache keeps the committed pairs and drops old drafts.
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    const TokenTree tree = drafter->propose(request(context, history, {2, 2, 1}));
    REQUIRE(tree.size() == 2 + 4 + 4);
    for (int32_t n = 0; n < tree.size(); ++n) {
      const int32_t p = tree.parent[n];
      const torch::Tensor parent_feature = f.eagle_reference(context, p < 0 ? std::vector<Token>{} : tree.path(p));
      const std::vector<int32_t> sib = tree.children(p + 1);
      const auto rank = std::find(sib.begin(), sib.end(), n) - sib.begin();
      torch::NoGradGuard no_grad;
      CHECK(tree.tokens[n] == top_k(f.reference->lm_head(parent_feature), 2)[rank]);
    }
    context.push_back(tree.tokens[0]);
    context.push_back(static_cast<Token>(step));
  }
  // Forwards: per proposal, the committed pairs plus one per depth with children.
  CHECK(drafter->counters().n_forward == 3 * 3);
}

TEST_CASE("eagle: the EAGLE-2 dynamic tree keeps the best total_tokens nodes by cumulative log q", "[eagle]") {
  const Fixture& f = fixture();
  const int32_t depth = 3, top = 3, total = 7;
  auto drafter = f.drafter("eagle:" + f.eagle_dir + ",dynamic,depth=3,top_k=3,total_tokens=7")->create();
  const std::vector<Token> context = {2, 7, 1, 8, 2, 8};
  TokenHistory history;
  history.prompt = context;
  const TokenTree tree = drafter->propose(request(context, history, {1}));
  REQUIRE(tree.size() == total);
  CHECK(tree.scheme == SiblingScheme::deterministic);

  // Reference EAGLE-2 by full recomputes: expand the top-k frontier, then rerank every candidate.
  struct Cand {
    std::vector<Token> path;
    double score;
  };
  auto logq = [&](const std::vector<Token>& path) {
    torch::NoGradGuard no_grad;
    return torch::log_softmax(f.reference->lm_head(f.eagle_reference(context, path)), -1).contiguous();
  };
  std::vector<Cand> all, frontier;
  const torch::Tensor root = logq({});
  for (Token t : top_k(root, top)) frontier.push_back({{t}, root[t].item<double>()});
  all = frontier;
  for (int32_t level = 2; level <= depth; ++level) {
    std::vector<Cand> fresh;
    for (const Cand& c : frontier) {
      const torch::Tensor lq = logq(c.path);
      for (Token t : top_k(lq, top)) {
        Cand d = c;
        d.path.push_back(t);
        d.score += lq[t].item<double>();
        fresh.push_back(d);
      }
    }
    all.insert(all.end(), fresh.begin(), fresh.end());
    std::stable_sort(fresh.begin(), fresh.end(), [](const Cand& a, const Cand& b) { return a.score > b.score; });
    fresh.resize(top);
    frontier = fresh;
  }
  std::stable_sort(all.begin(), all.end(), [](const Cand& a, const Cand& b) { return a.score > b.score; });
  std::set<std::vector<Token>> want, got;
  for (int32_t i = 0; i < total; ++i) want.insert(all[i].path);
  for (int32_t n = 0; n < tree.size(); ++n) {
    got.insert(tree.path(n));
    if (tree.parent[n] >= 0) CHECK(tree.parent[n] < n);  // parents first
  }
  CHECK(got == want);
  CHECK(drafter->counters().n_forward == depth);  // committed pairs + (depth - 1) expansions
}

// ---------------------------------------------------------------------------------------------------------
// Exactness and greedy losslessness through the Generator

TEST_CASE("medusa and eagle are exact: G-test of the 2-token law (T 0.8, top-p, penalties, mask)", "[medusa][eagle]") {
  const Fixture& f = fixture();
  const std::vector<Token> prompt = {3, 1, 4, 1, 5};
  const std::vector<double> law = exact_two_token_law(f, exactness_params(), prompt);
  const std::string tree_file = f.dir.str("exact-tree.txt");
  std::ofstream(tree_file) << "0 1 2 0.0 0.1 1.0\n";
  struct Case {
    std::string name, spec;
    VerifyMethod method;
    std::vector<int32_t> shape;
  };
  const std::vector<Case> cases = {
      {"medusa static 2,2", "medusa:" + f.medusa_dir, VerifyMethod::tree, {2, 2}},
      {"medusa tree file", "medusa:" + f.medusa_dir + ",tree=" + tree_file, VerifyMethod::tree, {1, 1}},
      {"medusa chain", "medusa:" + f.medusa_dir, VerifyMethod::chain, {}},
      {"eagle static 2,2", "eagle:" + f.eagle_dir, VerifyMethod::tree, {2, 2}},
      {"eagle dynamic",
       "eagle:" + f.eagle_dir + ",dynamic,depth=3,top_k=3,total_tokens=8",
       VerifyMethod::tree,
       {1, 1, 1}},
      {"eagle chain", "eagle:" + f.eagle_dir, VerifyMethod::chain, {}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const GofRun r = run_two_token_gof(f.drafter(c.spec), c.method, c.shape, law, prompt, 12000);
    INFO(r.g.detail << " G = " << r.g.statistic << ", df = " << r.g.df << ", p = " << r.g.p_value);
    CHECK(r.g.passed(stats::kAlpha));
    CHECK(r.metrics.q_zero_errors == 0);
    CHECK(r.metrics.accepted > 300);  // the drafts were used
  }
}

TEST_CASE("mutant: the dynamic tree verified with p/q against its recorded q is caught by the same test", "[eagle]") {
  const Fixture& f = fixture();
  const std::vector<Token> prompt = {3, 1, 4, 1, 5};
  const std::vector<double> law = exact_two_token_law(f, exactness_params(), prompt);
  const auto drafter = f.drafter("eagle:" + f.eagle_dir + ",dynamic,depth=3,top_k=3,total_tokens=8");
  const ScopedMutant mutant(Mutant::dynamic_tree_tested_with_q);
  const GofRun r = run_two_token_gof(drafter, VerifyMethod::tree, {1, 1, 1}, law, prompt, 3000);
  INFO(r.g.detail << " G = " << r.g.statistic << ", p = " << r.g.p_value);
  CHECK_FALSE(r.g.passed(stats::kAlpha));
}

// A head drafter's greedy-equality case: its spec, method and tree shape, candidates chosen by value.
struct HeadCase {
  std::string spec;
  VerifyMethod method;
  std::vector<int32_t> shape;
  GenerationConfig config(GenerationConfig base) const {
    base.method = method;
    base.tree_shape = shape;
    base.tree_sampling = SiblingScheme::deterministic;
    base.num_draft_tokens = 3;
    return base;
  }
};

TEST_CASE("medusa and eagle: greedy speculation equals greedy decoding token for token", "[medusa][eagle]") {
  const Fixture& f = fixture();
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 24;
  const Generator baseline(f.target, greedy, nullptr, ar);
  const std::vector<HeadCase> cases = {
      {"medusa:" + f.medusa_dir, VerifyMethod::greedy, {}},
      {"medusa:" + f.medusa_dir, VerifyMethod::tree, {3, 2, 1}},
      {"eagle:" + f.eagle_dir, VerifyMethod::greedy, {}},
      {"eagle:" + f.eagle_dir, VerifyMethod::tree, {3, 2, 1}},
      {"eagle:" + f.eagle_dir + ",dynamic,top_k=3", VerifyMethod::tree, {3, 2, 2, 1}},
      // 16-bit heads (weights_dtype): other drafts, the same greedy output.
      {"medusa:" + f.medusa_dir + ",weights_dtype=bfloat16", VerifyMethod::tree, {3, 2, 1}},
      {"eagle:" + f.eagle_dir + ",weights_dtype=float16", VerifyMethod::greedy, {}},
      {"eagle:" + f.eagle_dir + ",dynamic,top_k=3,weights_dtype=float16", VerifyMethod::tree, {3, 2, 2, 1}},
  };
  int64_t accepted = 0;
  for (const HeadCase& c : cases) {
    INFO(c.spec << " " << verify_method_name(c.method));
    const GenerationConfig config = c.config(ar);
    const Generator spec(f.target, greedy, f.drafter(c.spec), config);
    int64_t accepted_here = 0;
    for (const std::vector<Token>& prompt : std::vector<std::vector<Token>>{{0, 1}, {3, 3, 3}, {9, 2, 6, 5, 3, 5}}) {
      GenerationMetrics m1, m2;
      CHECK(spec.generate(prompt, 3, m2).tokens == baseline.generate(prompt, 3, m1).tokens);
      accepted_here += m2.accepted;
    }
    // 16-bit heads must still draft what the target picks: heads broken by the narrowing would be rejected.
    if (c.spec.find("weights_dtype") != std::string::npos) CHECK(accepted_here > 0);
    accepted += accepted_here;
  }
  CHECK(accepted > 0);
}

TEST_CASE(
    "beside a target on LibTorch's device path the heads compute there, and greedy speculation still equals "
    "greedy decoding",
    "[medusa][eagle]") {
  const Fixture& f = fixture();
  // The path a target on a GPU takes (every forward LibTorch's, the heads beside it in their dtype), on the CPU.
  const auto target = std::make_shared<TransformerLanguageModel>(f.target_dir, "auto", "libtorch");
  const std::string copy_dir = f.dir.str("target-copy-libtorch");
  fs::remove_all(copy_dir);
  fs::copy(f.target_dir, copy_dir, fs::copy_options::recursive);
  const auto copy = std::make_shared<TransformerLanguageModel>(copy_dir, "auto", "libtorch");
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 16;
  int64_t accepted = 0;
  for (const std::shared_ptr<const LanguageModel>& on :
       {std::shared_ptr<const LanguageModel>(target), std::shared_ptr<const LanguageModel>(copy)}) {
    const Generator baseline(on, greedy, nullptr, ar);
    for (const std::string& spec : {"medusa:" + f.medusa_dir, "eagle:" + f.eagle_dir,
                                    "eagle:" + f.eagle_dir + ",dynamic,top_k=3,weights_dtype=bfloat16"}) {
      INFO(spec << " on " << on->description());
      const auto drafter = load_drafter(spec, SamplingParams{}, on, SamplingParams{});
      CHECK_THAT(drafter->description(), Contains("LibTorch's operations on cpu"));
      CHECK_THAT(drafter->description(), Contains(on == target ? "the target's own module" : "own copy"));
      GenerationConfig config = ar;
      config.method = VerifyMethod::tree;
      config.tree_shape = {3, 2, 1};
      config.tree_sampling = SiblingScheme::deterministic;
      const Generator spec_generator(on, greedy, drafter, config);
      for (const std::vector<Token>& prompt : std::vector<std::vector<Token>>{{0, 1}, {9, 2, 6, 5, 3, 5}}) {
        GenerationMetrics m1, m2;
        CHECK(spec_generator.generate(prompt, 3, m2).tokens == baseline.generate(prompt, 3, m1).tokens);
        accepted += m2.accepted;
      }
    }
  }
  CHECK(accepted > 0);
  // A target on the CPU's decoding step keeps the heads there (packed, no LibTorch operations).
  CHECK_THAT(load_drafter("eagle:" + f.eagle_dir, SamplingParams{}, f.target, SamplingParams{})->description(),
             !Contains("LibTorch's operations"));
  fs::remove_all(copy_dir);
}

// The batched path a GPU decodes with (lockstep, one target forward per step for every sequence, the kernels
// verifying), on the CPU: the target on LibTorch's device path keeps its hidden states where it computes, and the heads
// read each sequence's features from it between steps while the other sequences stop at different steps.
TEST_CASE("head drafters in a lockstep batch on cuda-host: greedy speculation equals greedy decoding, with stops",
          "[medusa][eagle]") {
  const Fixture& f = fixture();
  const auto target = std::make_shared<TransformerLanguageModel>(f.target_dir, "auto", "libtorch");
  const std::vector<std::vector<Token>> prompts = {{0, 1}, {3, 3, 3}, {9, 2, 6, 5, 3, 5}, {4}};
  std::vector<const std::vector<Token>*> each;
  for (const auto& p : prompts) each.push_back(&p);
  const std::vector<uint64_t> ids = {0, 1, 2, 3};
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  GenerationConfig ar;
  ar.max_new_tokens = 20;
  ar.device = Device::cuda_host;
  ar.lockstep = true;
  std::vector<GenerationMetrics> m0(prompts.size());
  std::vector<SequenceOutput> plain = Generator(target, greedy, nullptr, ar).generate_batch(each, ids, m0);
  // Stop at a token greedy decoding emits mid-way through some sequence, so that sequences end at different steps.
  Token stop = -1;
  for (const SequenceOutput& o : plain)
    if (stop < 0 && o.tokens.size() > 4) stop = o.tokens[o.tokens.size() / 2];
  REQUIRE(stop >= 0);
  greedy.stop_tokens = {stop};
  const std::vector<SequenceOutput> expected = Generator(target, greedy, nullptr, ar).generate_batch(each, ids, m0);
  size_t shortest = expected[0].tokens.size(), longest = shortest;
  for (const SequenceOutput& o : expected) {
    shortest = std::min(shortest, o.tokens.size());
    longest = std::max(longest, o.tokens.size());
  }
  CHECK(shortest < longest);
  const std::vector<HeadCase> cases = {
      {"medusa:" + f.medusa_dir, VerifyMethod::greedy, {}},
      {"medusa:" + f.medusa_dir, VerifyMethod::tree, {3, 2, 1}},
      {"eagle:" + f.eagle_dir, VerifyMethod::chain, {}},
      {"eagle:" + f.eagle_dir, VerifyMethod::tree, {3, 2, 1}},
      {"eagle:" + f.eagle_dir + ",dynamic,top_k=3,weights_dtype=bfloat16", VerifyMethod::tree, {3, 2, 2, 1}},
  };
  int64_t accepted = 0;
  for (const HeadCase& c : cases) {
    INFO(c.spec << " " << verify_method_name(c.method));
    const GenerationConfig config = c.config(ar);
    std::vector<GenerationMetrics> m(prompts.size());
    const std::vector<SequenceOutput> out =
        Generator(target, greedy, load_drafter(c.spec, greedy, target, greedy), config).generate_batch(each, ids, m);
    REQUIRE(out.size() == expected.size());
    for (size_t i = 0; i < out.size(); ++i) {
      CHECK(out[i].tokens == expected[i].tokens);
      CHECK(out[i].stop_reason == expected[i].stop_reason);
      accepted += m[i].accepted;
    }
  }
  CHECK(accepted > 0);
}

TEST_CASE("head drafters read the features of the verification forwards; a copy of the target runs its own",
          "[medusa][eagle]") {
  const Fixture& f = fixture();
  // The same target folder in another place: the heads cannot know it holds the same weights, so they keep
  // their own session of their target and count its forwards.
  const std::string copy_dir = f.dir.str("target-copy");
  fs::remove_all(copy_dir);
  fs::copy(f.target_dir, copy_dir, fs::copy_options::recursive);
  const auto copy = std::make_shared<TransformerLanguageModel>(copy_dir);
  for (const std::string& spec : {"medusa:" + f.medusa_dir, "eagle:" + f.eagle_dir})
    for (const bool shared : {true, false}) {
      INFO(spec << (shared ? " on the heads' own target" : " on a copy of it"));
      const std::shared_ptr<const LanguageModel> target = shared ? f.target : copy;
      const auto factory = std::dynamic_pointer_cast<const HeadDrafterFactory>(
          load_drafter(spec, SamplingParams{}, target, SamplingParams{}));
      REQUIRE(factory);
      GenerationConfig config;
      config.method = VerifyMethod::chain;
      config.num_draft_tokens = 3;
      config.max_new_tokens = 20;
      const Generator generator(target, exactness_params(), factory, config);
      GenerationMetrics metrics;
      const std::vector<Token> prompt = {1, 2, 3, 4};
      const SequenceOutput out = generator.generate(prompt, 0, metrics);
      if (shared) {
        CHECK(factory->feature_stats().forwards == 0);
        CHECK(factory->feature_stats().rows == 0);
      } else {
        // One forward for the prompt (begin), then one per step over the tokens it committed but the last:
        // positions 0..L-2 in total, where L is the context length at the last step.
        int64_t last_context = static_cast<int64_t>(prompt.size());
        for (size_t s = 0; s + 1 < out.accept_lengths.size(); ++s) last_context += out.accept_lengths[s] + 1;
        CHECK(factory->feature_stats().forwards == metrics.steps);
        CHECK(factory->feature_stats().rows == last_context - 1);
      }
    }
  // The copy's own weights take the --target's matrix dtype (--weights-dtype); the shared module is the
  // target's. The factory's description names which it has.
  const auto copy_bf16 = std::make_shared<TransformerLanguageModel>(copy_dir, "bfloat16");
  for (const std::string& spec : {"medusa:" + f.medusa_dir, "eagle:" + f.eagle_dir}) {
    INFO(spec);
    const auto own = load_drafter(spec, SamplingParams{}, copy_bf16, SamplingParams{});
    CHECK_THAT(own->description(), Catch::Contains("(own copy, bfloat16 matrices)"));
    const auto shared = load_drafter(spec, SamplingParams{}, f.target, SamplingParams{});
    CHECK_THAT(shared->description(), Catch::Contains("(the target's own module)"));
  }
  fs::remove_all(copy_dir);
}

TEST_CASE("a session's context features equal a full forward's hidden states, accepted path included",
          "[medusa][eagle][transformer]") {
  const Fixture& f = fixture();
  c10::InferenceMode inference;
  auto session = f.target->new_session();
  const int32_t H = session->feature_size();
  REQUIRE(H == tiny_config().d_model);
  const std::vector<Token> context = {1, 5, 2, 7, 3};
  TokenTree tree;  // 9 -> {4, 6 -> 8}
  tree.add(9, -1);
  tree.add(4, 0);
  tree.add(6, 0);
  tree.add(8, 2);
  std::vector<float> logits((tree.size() + 1) * kV);
  session->tree_logits(context, tree, logits.data());
  // The verifier accepted 9, 6 and emitted a correction: the committed context is context + 9 6 x.
  std::vector<Token> committed = context;
  for (Token t : {9, 6, 11}) committed.push_back(t);
  const int64_t n = static_cast<int64_t>(committed.size()) - 1;  // the features a draft head reads
  const float* got = session->context_features(committed, n);
  REQUIRE(got != nullptr);
  const torch::Tensor expected = f.features(committed, n);  // [n, H] by one causal forward
  const torch::Tensor actual = torch::from_blob(const_cast<float*>(got), {n, H}, torch::kFloat32);
  CHECK((actual - expected).abs().max().item<double>() < 1e-4);
  // Negative control: a path the tree does not hold, or a changed prefix, has no features.
  std::vector<Token> other = committed;
  other[context.size() + 1] = 4;  // 9 -> 4 is a leaf of the tree; 4 -> 11 is not in it
  other.push_back(12);
  CHECK(session->context_features(other, static_cast<int64_t>(other.size()) - 1) == nullptr);
  std::vector<Token> changed = committed;
  changed[0] = 0;
  CHECK(session->context_features(changed, n) == nullptr);
  // The session still serves the next verification exactly: logits after the committed context.
  std::vector<float> next(kV), full(kV);
  session->next_logits(committed, next.data());
  f.target->new_session()->next_logits(committed, full.data());
  for (int32_t x = 0; x < kV; ++x) CHECK(next[x] == Approx(full[x]).margin(1e-4));
}

TEST_CASE("head drafters keep their matrices in the target's dtype unless weights_dtype names one", "[medusa][eagle]") {
  const Fixture& f = fixture();
  // The fixture's target is float32; the same checkpoint kept in float16 makes float16 heads.
  const auto half_target = std::make_shared<TransformerLanguageModel>(f.target_dir, "float16");
  const auto heads = [&](const std::string& spec, const std::shared_ptr<const LanguageModel>& target) {
    return load_drafter(spec, SamplingParams{}, target, SamplingParams{})->description();
  };
  CHECK_THAT(heads("medusa:" + f.medusa_dir, f.target), Contains("float32 matrices, on"));
  CHECK_THAT(heads("eagle:" + f.eagle_dir, half_target), Contains("float16 matrices, on"));
  CHECK_THAT(heads("eagle:" + f.eagle_dir + ",weights_dtype=float32", half_target), Contains("float32 matrices, on"));
  CHECK_THAT(heads("medusa:" + f.medusa_dir + ",weights_dtype=bfloat16", f.target), Contains("bfloat16 matrices, on"));
}

TEST_CASE("heads stored with 16-bit matrices: norm gains stay float32, loading widens exactly, drafts unchanged",
          "[medusa][eagle]") {
  const Fixture& f = fixture();
  DraftHeadsConfig config = read_draft_heads_config(f.eagle_dir);
  REQUIRE(config.matrices_dtype == "float32");  // the fixture's, written with the default
  config.matrices_dtype = "float16";
  const std::string half_dir = f.dir.str("eagle-f16");
  save_draft_heads(half_dir, *f.eagle, config);
  REQUIRE(read_draft_heads_config(half_dir).matrices_dtype == "float16");

  // The file: matrices as float16 (the float32 values rounded once), every other tensor float32 as it was.
  torch::serialize::InputArchive archive;
  archive.load_from(half_dir + "/weights.pt");
  int64_t matrices = 0, vectors = 0;
  for (const auto& p : f.eagle->named_parameters()) {
    torch::Tensor stored;
    REQUIRE(archive.try_read(p.key(), stored));
    INFO(p.key());
    if (p.value().dim() >= 2) {
      CHECK(stored.scalar_type() == torch::kFloat16);
      CHECK(torch::equal(stored, p.value().to(torch::kFloat16)));
      ++matrices;
    } else {
      CHECK(stored.scalar_type() == torch::kFloat32);
      CHECK(torch::equal(stored, p.value()));
      ++vectors;
    }
  }
  CHECK(matrices > 0);
  CHECK(vectors > 0);

  // Loaded back: matrices widened exactly from float16, the rest bit for bit.
  EagleHead loaded(tiny_config());
  load_draft_heads_weights(half_dir, read_draft_heads_config(half_dir), *loaded);
  const auto original = f.eagle->named_parameters();
  for (const auto& p : loaded->named_parameters()) {
    INFO(p.key());
    const torch::Tensor want = original[p.key()];
    CHECK(torch::equal(p.value(), want.dim() >= 2 ? want.to(torch::kFloat16).to(torch::kFloat32) : want));
  }

  // With a float16 target the heads run their matrices in float16 either way: the same drafts, token for token.
  const auto half_target = std::make_shared<TransformerLanguageModel>(f.target_dir, "float16");
  SamplingParams sampling;
  sampling.temperature = 0.8f;
  GenerationConfig chain;
  chain.method = VerifyMethod::chain;
  chain.num_draft_tokens = 3;
  chain.max_new_tokens = 24;
  const auto run = [&](const std::string& dir) {
    const Generator g(half_target, sampling,
                      load_drafter("eagle:" + dir, SamplingParams{}, half_target, SamplingParams{}), chain);
    GenerationMetrics m;
    return g.generate({3, 1, 4, 1, 5}, 7, m).tokens;
  };
  CHECK(run(half_dir) == run(f.eagle_dir));

  // A config whose dtype the file does not hold, or an unknown dtype, is refused naming the file and field.
  const std::string lying = f.dir.str("eagle-lying");
  fs::copy(f.eagle_dir, lying, fs::copy_options::recursive);
  DraftHeadsConfig claims = read_draft_heads_config(lying);
  claims.matrices_dtype = "bfloat16";
  write_draft_heads_config(lying, claims);
  CHECK_THROWS_WITH(f.drafter("eagle:" + lying), Contains("weights.pt") && Contains("but the config says bfloat16"));
  nlohmann::json j = nlohmann::json::parse(std::ifstream(lying + "/config.json"));
  j["weights"]["matrices_dtype"] = "float8";
  std::ofstream(lying + "/config.json") << j.dump(2);
  CHECK_THROWS_WITH(read_draft_heads_config(lying), Contains("config.json") && Contains("matrices_dtype 'float8'"));
}

TEST_CASE("head drafter specs and folders: clear errors", "[medusa][eagle]") {
  const Fixture& f = fixture();
  CHECK_THROWS_WITH(f.drafter("medusa:"), Contains("needs the heads folder"));
  CHECK_THROWS_WITH(f.drafter("medusa:" + f.medusa_dir + ",dynamic"), Contains("dynamic trees need the EAGLE head"));
  CHECK_THROWS_WITH(f.drafter("eagle:" + f.eagle_dir + ",depth=3"), Contains("add ',dynamic'"));
  CHECK_THROWS_WITH(f.drafter("eagle:" + f.eagle_dir + ",dynamic,top_k=0"), Contains("top_k must be in 1..64"));
  CHECK_THROWS_WITH(f.drafter("eagle:" + f.eagle_dir + ",dynamic,tree=x"), Contains("tree=FILE is a static tree"));
  CHECK_THROWS_WITH(f.drafter("eagle:" + f.eagle_dir + ",bogus=1"), Contains("unknown option 'bogus'"));
  CHECK_THROWS_WITH(f.drafter("eagle:" + f.eagle_dir + ",weights_dtype=float8"),
                    Contains("weights_dtype must be target, float32, float16 or bfloat16, got 'float8'"));
  CHECK_THROWS_WITH(f.drafter("eagle:" + f.medusa_dir), Contains("holds medusa heads, not eagle"));
  CHECK_THROWS_WITH(f.drafter("medusa:" + f.dir.str("nowhere")), Contains("no such folder"));
  CHECK_THROWS_WITH(f.drafter("medusa:" + f.medusa_dir + ",tree=" + f.dir.str("missing.txt")),
                    Contains("tree file: cannot open '" + f.dir.str("missing.txt") + "'"));
  {  // Heads that record the target's weights they were trained on refuse a target retrained since.
    DraftHeadsConfig config = read_draft_heads_config(f.medusa_dir);
    const std::optional<FileChecksum> trained_on = read_checkpoint_config(f.target_dir).weights_checksum;
    REQUIRE(trained_on);
    config.target_weights_checksum = trained_on;
    const std::string same = f.dir.str("medusa-same-target"), other = f.dir.str("medusa-other-target");
    save_draft_heads(same, *f.medusa, config);
    CHECK_NOTHROW(f.drafter("medusa:" + same));
    config.target_weights_checksum->crc32 ^= 1;
    save_draft_heads(other, *f.medusa, config);
    CHECK_THROWS_WITH(
        f.drafter("medusa:" + other),
        Contains("the heads were trained on other weights of their target") && Contains("train the heads again"));
    CHECK(read_draft_heads_config(other).target_weights_checksum == config.target_weights_checksum);
  }
  {  // The heads' config records their weights' size and CRC-32: one flipped bit is refused.
    const std::string damaged = f.dir.str("medusa-damaged");
    fs::copy(f.medusa_dir, damaged, fs::copy_options::recursive);
    std::fstream weights(damaged + "/weights.pt", std::ios::in | std::ios::out | std::ios::binary);
    weights.seekg(static_cast<std::streamoff>(fs::file_size(damaged + "/weights.pt") / 2));
    const char byte = static_cast<char>(weights.peek() ^ 0x01);
    weights.seekp(static_cast<std::streamoff>(fs::file_size(damaged + "/weights.pt") / 2));
    weights.put(byte);
    weights.close();
    CHECK_THROWS_WITH(f.drafter("medusa:" + damaged), Contains("damaged or was replaced"));
  }
  {  // A target the heads' config names that is gone: named by that config's field, not as a stray folder.
    const std::string moved = f.dir.str("medusa-moved");
    fs::copy(f.medusa_dir, moved, fs::copy_options::recursive);
    DraftHeadsConfig config = read_draft_heads_config(moved);
    config.target = "/nonexistent-target";
    save_draft_heads(moved, *f.medusa, config);
    CHECK_THROWS_WITH(f.drafter("medusa:" + moved),
                      Contains(moved + "/config.json: field 'target' = '/nonexistent-target' names no folder") &&
                          Contains("give the spec's target=DIR"));
  }
  // A draft deeper than the heads is refused, never cut: a tree file, a --tree shape, a chain.
  const std::string deep = f.dir.str("medusa-deep-tree.txt");
  std::ofstream(deep) << "0 0.0 0.0.1 0.0.1.0\n";
  CHECK_THROWS_WITH(f.drafter("medusa:" + f.medusa_dir + ",tree=" + deep),
                    Contains("is 4 levels deep, but the 3 Medusa heads"));
  GenerationConfig tree_config;
  tree_config.method = VerifyMethod::tree;
  tree_config.tree_shape = {2, 1, 1, 1};
  CHECK_THROWS_WITH(Generator(f.target, SamplingParams{}, f.drafter("medusa:" + f.medusa_dir), tree_config),
                    Contains("tree asks for a draft 4 deep") && Contains("drafts at most 3 tokens ahead"));
  GenerationConfig chain_config;
  chain_config.method = VerifyMethod::chain;
  chain_config.num_draft_tokens = 4;
  CHECK_THROWS_AS(Generator(f.target, SamplingParams{}, f.drafter("medusa:" + f.medusa_dir), chain_config),
                  ParameterError);
  chain_config.num_draft_tokens = 3;
  CHECK_NOTHROW(Generator(f.target, SamplingParams{}, f.drafter("medusa:" + f.medusa_dir), chain_config));
  // A tree file within the heads: the request's shape only selects tree verification, whatever its depth.
  const std::string fits = f.dir.str("medusa-fitting-tree.txt");
  std::ofstream(fits) << "0 0.0 0.0.1\n";
  CHECK_NOTHROW(
      Generator(f.target, SamplingParams{}, f.drafter("medusa:" + f.medusa_dir + ",tree=" + fits), tree_config));
  // The Generator's target must be the transformer the heads read.
  TransformerConfig other = tiny_config();
  other.n_layers = 1;
  Transformer small(other);
  save_checkpoint(f.dir.str("other"), small, CheckpointConfig{});
  const auto other_target = std::make_shared<TransformerLanguageModel>(f.dir.str("other"));
  CHECK_THROWS_WITH(load_drafter("medusa:" + f.medusa_dir, SamplingParams{}, other_target, SamplingParams{}),
                    Contains("is not the --target"));
  CHECK_THROWS_WITH(load_drafter("medusa:" + f.medusa_dir + ",target=" + f.dir.str("other"), SamplingParams{}, nullptr,
                                 SamplingParams{}),
                    Contains("the heads were trained on a target with"));
}

// ---------------------------------------------------------------------------------------------------------
// Training

namespace {

// A small training run of `kind` heads on the fixture's target, over a corpus of text the target's live tokens can
// say (bytes 0..15), with structure to learn; written to the fixture's folder under `output`.
HeadTrainOptions small_head_training(const Fixture& f, const std::string& kind, const std::string& output) {
  const std::string corpus = f.dir.str("heads-corpus.txt");
  if (!std::filesystem::exists(corpus)) {
    std::ofstream out(corpus, std::ios::binary);
    for (int i = 0; i < 3000; ++i) out << static_cast<char>((i * 7 + (i / 5) % 3) % kLive);
  }
  HeadTrainOptions o;
  o.kind = kind;
  o.target = f.target_dir;
  o.corpus = corpus;
  o.output = f.dir.str(output);
  o.medusa_heads = 2;
  o.feature_windows = 24;
  o.batch_size = 4;
  o.seq_len = 32;
  o.lr.peak = 3e-3;
  o.lr.min = 3e-4;
  o.lr.warmup_steps = 5;
  o.lr.total_steps = 60;
  o.eval_interval = 20;
  o.eval_windows = 4;
  o.log_interval = 1000;
  return o;
}

}  // namespace

TEST_CASE("specula train-medusa / train-eagle: a short run lowers the loss and loads as a drafter", "[medusa][eagle]") {
  const Fixture& f = fixture();
  for (const std::string& kind : std::vector<std::string>{"medusa", "eagle"}) {
    INFO(kind);
    const HeadTrainOptions o = small_head_training(f, kind, "trained-" + kind);
    const HeadTrainResult r = train_draft_heads(o);
    const DraftHeadsConfig saved = read_draft_heads_config(o.output);
    CHECK(saved.kind == kind);
    CHECK(saved.target == "../target");
    REQUIRE(saved.training.contains("initial_val_loss"));
    CHECK(r.val_loss < saved.training["initial_val_loss"].get<double>());
    CHECK(r.val_top1.size() == (kind == "medusa" ? 2u : 1u));
    const auto drafter = f.drafter(kind + ":" + o.output)->create();
    const std::vector<Token> context = {1, 2, 3};
    TokenHistory history;
    CHECK(drafter->propose(request(context, history, {}, 2)).size() == 2);
  }
}

TEST_CASE("train-medusa / train-eagle stopped by a signal keep their last save whole and marked interrupted",
          "[medusa][eagle]") {
  const Fixture& f = fixture();
  for (const std::string& kind : std::vector<std::string>{"medusa", "eagle"}) {
    INFO(kind);
    HeadTrainOptions o = small_head_training(f, kind, "stopped-" + kind);
    o.lr.total_steps = 1000000;  // more than the test waits for
    o.eval_interval = 3;
    // The signal comes from another thread once the first save is there, while the loop's handlers are in place.
    // It signals only then, and only while training runs: a SIGINT outside the loop would end the test process. The
    // handlers in place before are back after.
    struct sigaction before {};
    sigaction(SIGINT, nullptr, &before);
    // The signaller raises it on its own thread (delivered before raise returns), under a lock the caller takes to mark
    // the training returned.
    std::mutex lock;
    bool returned = false;
    std::thread signaller([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (!std::filesystem::exists(o.output + "/config.json") && std::chrono::steady_clock::now() < deadline) {
        if (const std::lock_guard<std::mutex> hold(lock); returned) return;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      const std::lock_guard<std::mutex> hold(lock);
      if (!returned && std::filesystem::exists(o.output + "/config.json")) raise(SIGINT);
    });
    struct Joined {
      std::mutex& lock;
      bool& returned;
      std::thread& thread;
      ~Joined() {
        {
          const std::lock_guard<std::mutex> hold(lock);
          returned = true;
        }
        thread.join();
      }
    };
    HeadTrainResult r;
    {
      const Joined joined{lock, returned, signaller};
      r = train_draft_heads(o);
    }
    struct sigaction after {};
    sigaction(SIGINT, nullptr, &after);
    CHECK(after.sa_handler == before.sa_handler);
    CHECK(r.stop.signal == SIGINT);
    CHECK(r.steps == r.stop.steps_done);
    CHECK(r.steps < o.lr.total_steps);
    CHECK(r.best_step > 0);
    CHECK(r.best_step % 3 == 0);
    CHECK(r.best_step <= r.steps);
    const DraftHeadsConfig saved = read_draft_heads_config(o.output);
    CHECK(saved.training.at("status") ==
          "interrupted (SIGINT) after step " + std::to_string(r.steps) + " of " + std::to_string(o.lr.total_steps));
    CHECK(saved.training.at("step") == r.best_step);
    // The saved weights match their config's checksum and load as a drafter.
    const auto drafter = f.drafter(kind + ":" + o.output)->create();
    const std::vector<Token> context = {1, 2, 3};
    TokenHistory history;
    CHECK(drafter->propose(request(context, history, {}, 2)).size() == 2);
  }
}

TEST_CASE("specula train-medusa / train-eagle --matrices-dtype write 16-bit matrices; a bad dtype is refused",
          "[medusa][eagle]") {
  const Fixture& f = fixture();
  const std::string corpus = f.dir.str("corpus-16bit.txt");
  {
    std::ofstream out(corpus, std::ios::binary);
    for (int i = 0; i < 2000; ++i) out << static_cast<char>((i * 5 + (i / 3) % 2) % kLive);
  }
  for (const auto& [kind, dtype, scalar] :
       {std::tuple{"medusa", "float16", torch::kFloat16}, std::tuple{"eagle", "bfloat16", torch::kBFloat16}}) {
    INFO(kind);
    HeadTrainOptions o;
    o.kind = kind;
    o.target = f.target_dir;
    o.corpus = corpus;
    o.output = f.dir.str(std::string("trained-16bit-") + kind);
    o.matrices_dtype = dtype;
    o.medusa_heads = 2;
    o.feature_windows = 8;
    o.batch_size = 4;
    o.seq_len = 16;
    o.lr.warmup_steps = 2;
    o.lr.total_steps = 10;
    o.eval_interval = 5;
    o.eval_windows = 2;
    o.log_interval = 1000;
    train_draft_heads(o);
    const DraftHeadsConfig saved = read_draft_heads_config(o.output);
    CHECK(saved.matrices_dtype == dtype);
    // The file holds the matrices in 16 bits and the norm gains as float32; the folder loads as a drafter.
    torch::serialize::InputArchive archive;
    archive.load_from(o.output + "/weights.pt");
    int64_t matrices = 0, vectors = 0;
    const auto check_file = [&](const torch::nn::Module& heads) {
      for (const auto& p : heads.named_parameters()) {
        torch::Tensor stored;
        REQUIRE(archive.try_read(p.key(), stored));
        INFO(p.key());
        if (p.value().dim() >= 2) {
          CHECK(stored.scalar_type() == scalar);
          ++matrices;
        } else {
          CHECK(stored.scalar_type() == torch::kFloat32);
          ++vectors;
        }
      }
    };
    if (std::string(kind) == "medusa")
      check_file(*MedusaHeads(2, saved.target_model.d_model, saved.target_model.vocab_size));
    else
      check_file(*EagleHead(saved.target_model));
    CHECK(matrices > 0);
    CHECK(vectors > 0);
    const auto drafter = f.drafter(std::string(kind) + ":" + o.output)->create();
    const std::vector<Token> context = {1, 2, 3};
    TokenHistory history;
    CHECK(drafter->propose(request(context, history, {}, 2)).size() == 2);

    o.matrices_dtype = "float8";
    o.output = f.dir.str(std::string("trained-float8-") + kind);
    CHECK_THROWS_WITH(train_draft_heads(o), Catch::Contains("matrices_dtype") && Catch::Contains("float8"));
    CHECK_FALSE(fs::exists(o.output));  // refused before anything is written
  }
}

}  // namespace specula
