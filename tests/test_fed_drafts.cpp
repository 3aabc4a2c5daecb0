// Fed drafting: a draft transformer's chains and trees (i.i.d., ranked, or siblings without replacement) drawn on the
// device with every depth's forward reading the ids the depth before drew where its launch left them
// (TreeLogitsCall::device_tokens), so the host waits once a proposal. On cuda-host the "device" memory is the host's
// and the model computes on the CPU (its decoding step, or LibTorch's operations and static-shape steps), so CI runs
// the code a GPU runs: the trees must be the CPU path's, node for node, across steps whose contexts follow the drafts,
// with one wait a proposal. LibTorch before Catch: glog's CHECK (through LibTorch's headers) must not replace Catch's.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "draft/model_drafter.h"
#include "harness/generation/generator.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "kernels/shared/error.h"
#include "mixed_k_seen.h"
#include "tests/support/mutant_switch.h"
#include "verify/device/batch_verifier.h"
#include "verify/verifiers/verify_methods.h"

using namespace specula;
using Catch::Matchers::Contains;

namespace {

const std::string kDraftDir = std::string(SPECULA_SOURCE_DIR) + "/results/models/draft";
const std::string kDraft = "transformer:" + kDraftDir;

// The draft transformer, keeping a view of every session it makes (their owners keep them alive).
class SessionsSeen : public TransformerLanguageModel {
 public:
  using TransformerLanguageModel::TransformerLanguageModel;
  std::unique_ptr<ModelSession> new_session() const override {
    std::unique_ptr<ModelSession> session = TransformerLanguageModel::new_session();
    sessions.push_back(dynamic_cast<TransformerSession*>(session.get()));
    return session;
  }
  mutable std::vector<TransformerSession*> sessions;
};

// min_tokens reads the paths' lengths: a space is banned in the first two positions of a step's drafts (their
// histories' output is empty).
SamplingParams drafting() {
  SamplingParams s;
  s.temperature = 0.9f;
  s.top_k = 40;
  s.min_tokens = 2;
  s.stop_tokens = {' '};
  return s;
}

// `steps` proposals of `shape` (empty: a chain of 4, or of chain_lengths[i] for sequence i) for three sequences, fed on
// cuda-host and on the CPU, each step's contexts then following a path of the CPU's trees plus one token. Counts the
// trees that differ; `waits` gets the fed proposals' downloads.
// `params`: the draft's and the target's settings.
int64_t differing_trees(const std::string& model_device, const std::vector<int32_t>& shape, SiblingScheme scheme,
                        int steps, std::vector<uint64_t>* waits = nullptr, const SamplingParams& params = drafting(),
                        const std::vector<int32_t>& chain_lengths = {}) {
  const auto model = std::make_shared<SessionsSeen>(kDraftDir, "auto", model_device);
  const int32_t V = model->vocab_size();
  const SamplerPipeline target(params, V);
  const ModelDrafterFactory factory(model, params);
  BatchVerifier device(Device::cuda_host, target, VerifyMethod::tree);
  std::vector<std::vector<Token>> contexts = {{10, 20, 30}, {40, 50}, {60, 70, 80, 90}};
  const size_t B = contexts.size();
  std::vector<std::unique_ptr<Drafter>> fed, cpu;
  for (size_t i = 0; i < B; ++i) {
    fed.push_back(factory.create());
    cpu.push_back(factory.create());
  }
  int64_t differing = 0;
  for (int step = 0; step < steps; ++step) {
    std::vector<TokenHistory> histories;
    for (const std::vector<Token>& c : contexts) histories.push_back(TokenHistory{c, {}});
    std::vector<DraftRequest> on_device, on_cpu;
    std::vector<Drafter*> drafters;
    for (size_t i = 0; i < B; ++i) {
      DraftRequest r;
      r.context = &contexts[i];
      r.history = &histories[i];
      r.num_draft_tokens = chain_lengths.empty() ? 4 : chain_lengths[i];
      std::vector<int32_t> tree(shape.begin(), shape.end());  // empty: a chain
      r.tree_shape.swap(tree);
      r.scheme = scheme;
      r.rng = StepRandom{5, i, static_cast<uint64_t>(step)};
      on_cpu.push_back(r);
      r.device = &device;
      on_device.push_back(r);
      drafters.push_back(fed[i].get());
    }
    REQUIRE(factory.draws_on_device(on_device));
    const uint64_t before = device.downloads();
    const std::vector<TokenTree> trees = factory.propose_batch(drafters, on_device);
    if (waits) waits->push_back(device.downloads() - before);
    for (size_t i = 0; i < B; ++i) {
      const TokenTree expected = cpu[i]->propose(on_cpu[i]);
      differing += trees[i].tokens != expected.tokens || trees[i].parent != expected.parent;
      // The laws verification reads (in host memory on cuda-host): each row with children the CPU's law, at that
      // row of the tree (for siblings without replacement, moved there from the full shape's row).
      if (trees[i].device_q && trees[i].tokens == expected.tokens && trees[i].parent == expected.parent)
        for (int32_t row = 0; row <= expected.size(); ++row) {
          if (row > 0 && expected.children(row).empty()) continue;
          const std::vector<float>& q = expected.q_at_row(row);
          REQUIRE(q.size() == static_cast<size_t>(V));
          const float* kept = trees[i].device_q + static_cast<int64_t>(row) * V;
          float worst = 0.0f;
          for (int32_t x = 0; x < V; ++x) worst = std::max(worst, std::abs(kept[x] - q[static_cast<size_t>(x)]));
          INFO("sequence " << i << ", step " << step << ", row " << row);
          CHECK(worst < 1e-5f);
          differing += worst < 1e-5f ? 0 : 1;
        }
      // The next context: the path to the tree's last node (its deepest), then one more token.
      if (!expected.tokens.empty()) {
        const std::vector<Token> path = expected.path(expected.size() - 1);
        contexts[i].insert(contexts[i].end(), path.begin(), path.end());
      }
      contexts[i].push_back(static_cast<Token>((step * 7 + static_cast<int>(i)) % V));
    }
  }
  // Each step's context follows its drafts: the fed sessions, told their trees' tokens, kept those nodes' keys and
  // values as the CPU's did (fed and CPU drafters alternate among the sessions made).
  REQUIRE(model->sessions.size() == 2 * B);
  int64_t fed_kept = 0, cpu_kept = 0;
  for (size_t k = 0; k < model->sessions.size(); ++k)
    (k % 2 ? cpu_kept : fed_kept) += model->sessions[k]->stats().path_nodes_compacted;
  if (differing == 0) {  // (a mutant's other trees do not hold the paths the contexts follow)
    CHECK(fed_kept > 0);
    // A chain cut to its own K keeps the nodes drawn past it, so its session may have more of the path than the CPU's.
    if (chain_lengths.empty())
      CHECK(fed_kept == cpu_kept);
    else
      CHECK(fed_kept >= cpu_kept);
  }
  CHECK(device.staging_waits() == 0);  // no staging buffer written while its upload might still run on a GPU
  return differing;
}

}  // namespace

TEST_CASE("a draft transformer's chains and trees drawn fed on cuda-host are the CPU's, with one wait a proposal",
          "[device]") {
  struct Shape {
    std::vector<int32_t> tree;
    SiblingScheme scheme;
  };
  const std::vector<Shape> shapes = {{{}, SiblingScheme::iid},
                                     {{2, 2, 1}, SiblingScheme::iid},
                                     {{3, 2}, SiblingScheme::deterministic},
                                     {{2, 1, 1}, SiblingScheme::deterministic},
                                     {{2, 2, 1}, SiblingScheme::without_replacement},
                                     {{3, 2}, SiblingScheme::without_replacement}};
  for (const std::string model_device : {"cpu", "libtorch"})
    for (const Shape& shape : shapes) {
      INFO("draft on " << model_device << ", " << (shape.tree.empty() ? "chain of 4" : "a tree") << ", "
                       << sibling_scheme_name(shape.scheme) << " siblings");
      std::vector<uint64_t> waits;
      CHECK(differing_trees(model_device, shape.tree, shape.scheme, 4, &waits) == 0);
      // One wait for the drawn ids and their statuses (two copies), not one a depth.
      for (uint64_t w : waits) CHECK(w == 2);
    }
  // Every depth's forward given the first depth's ids as its newest nodes' (from the third depth on): other trees.
  const ScopedMutant on(Mutant::fed_drafts_read_first_depth);
  CHECK(differing_trees("cpu", {}, SiblingScheme::iid, 2) > 0);
  CHECK(differing_trees("cpu", {2, 1, 1}, SiblingScheme::deterministic, 2) > 0);
  CHECK(differing_trees("cpu", {2, 1, 1}, SiblingScheme::without_replacement, 2) > 0);
}

// Chains of a moving K: each sequence asks for its own length, the batch is drawn at the longest, and each chain is cut
// to its own, its laws those of its rows.
TEST_CASE("a draft transformer's chains of different lengths drawn fed on cuda-host are each the CPU's chain",
          "[device]") {
  const std::vector<int32_t> lengths = {2, 5, 3};
  for (const std::string model_device : {"cpu", "libtorch"}) {
    INFO("draft on " << model_device);
    std::vector<uint64_t> waits;
    CHECK(differing_trees(model_device, {}, SiblingScheme::iid, 4, &waits, drafting(), lengths) == 0);
    for (uint64_t w : waits) CHECK(w == 2);
  }
  const ScopedMutant on(Mutant::device_chains_not_cut);
  CHECK(differing_trees("cpu", {}, SiblingScheme::iid, 2, nullptr, drafting(), lengths) > 0);
}

TEST_CASE("fed siblings without replacement whose rows run out of mass: the CPU's smaller trees, one wait a proposal",
          "[device]") {
  // Top-k 2 under four siblings: the root spends three slots of four (two tokens, then a draw finding no mass), so the
  // CPU's second depth starts a slot earlier than a full tree's would, and the root's last two children are never
  // drawn: their rows draw nothing, and the trees are smaller than full, their laws moved to the smaller trees' rows.
  // A 4,3,2 tree: the second depth's rows run out too, so its third starts from slots carried over two depths, and its
  // drawn nodes sit at other columns of the full shape's forwards than of the CPU's.
  SamplingParams truncated = drafting();
  truncated.top_k = 2;
  for (const std::string model_device : {"cpu", "libtorch"})
    for (const std::vector<int32_t>& shape : {std::vector<int32_t>{4, 2}, std::vector<int32_t>{4, 3, 2}}) {
      INFO("draft on " << model_device << ", " << shape.size() << " depths");
      std::vector<uint64_t> waits;
      CHECK(differing_trees(model_device, shape, SiblingScheme::without_replacement, 5, &waits, truncated) == 0);
      for (uint64_t w : waits) CHECK(w == 2);
    }
  {
    // Each depth from the sequence's first slot: the second depth's draws are not the CPU's.
    const ScopedMutant on(Mutant::device_siblings_carry_dropped);
    CHECK(differing_trees("cpu", {4, 2}, SiblingScheme::without_replacement, 2, nullptr, truncated) > 0);
  }
  // The rows under a node never drawn draw all the same: refused when the ids come back.
  const ScopedMutant on(Mutant::device_siblings_dead_rows_draw);
  CHECK_THROWS_WITH(differing_trees("cpu", {4, 2}, SiblingScheme::without_replacement, 1, nullptr, truncated),
                    Contains("planned sibling 0 of row 2 of depth 1 is"));
}

TEST_CASE("a session's pending tokens read where they lie give the tokens' bits, and once known its path is followed",
          "[transformer]") {
  for (const std::string model_device : {"cpu", "libtorch"}) {
    INFO("model on " << model_device);
    const auto model = load_language_model(kDraft, "draft", "auto", model_device);
    const int32_t V = model->vocab_size();
    const auto fed_session = model->new_session();
    const auto plain_session = model->new_session();
    auto& fed = dynamic_cast<TransformerSession&>(*fed_session);
    std::vector<Token> context = {5, 6, 7, 8};
    // Depth by depth: two children of the root, then one under each. `pending` holds the host's view.
    TokenTree real, pending;
    std::vector<float> a, b;
    const auto step = [&](const std::vector<int32_t>& ids, uint64_t round) {
      const int64_t newest = static_cast<int64_t>(ids.size());
      const int32_t first_parent = real.size() == 0 ? -1 : real.size() - 2;
      for (int64_t k = 0; k < newest; ++k) {
        const int32_t parent = first_parent < 0 ? -1 : first_parent + static_cast<int32_t>(k);
        real.add(ids[static_cast<size_t>(k)], parent);
        pending.add(kPendingToken, parent);
      }
      a.assign(static_cast<size_t>(newest) * V, 0.0f);
      b.assign(static_cast<size_t>(real.size() + 1) * V, 0.0f);
      TreeLogitsCall call{fed_session.get(), &context, &pending, a.data(), false, real.size() + 1 - newest};
      call.device_tokens = ids.data();
      call.device_tokens_from = real.size() - newest;
      call.pending_round = round;
      model->batch_tree_logits({call});
      plain_session->tree_logits(context, real, b.data());
      // The newest nodes' rows, bit for bit.
      return std::equal(a.begin(), a.end(), b.end() - static_cast<std::ptrdiff_t>(a.size()));
    };
    std::vector<float> row0(static_cast<size_t>(V));
    // Both sessions make the same calls (LibTorch's GEMMs may sum a row differently beside other rows).
    fed_session->next_logits(context, row0.data());
    plain_session->next_logits(context, row0.data());
    CHECK(step({11, 12}, 3));
    CHECK(step({13, 14}, 3));
    CHECK(fed.stats().tree_nodes_reused == 2);  // the first depth's pending nodes, of the same round
    // Once known (as a drafter knows them: its tree has grown by the depth drawn after the last forward), the next
    // context along the path to node 2 (11, 13) then 9 keeps those nodes' keys and values.
    TokenTree grown = real;
    grown.add(17, 2);
    grown.add(18, 3);
    fed_session->tree_tokens_known(grown, 3);
    const int64_t compacted = fed.stats().path_nodes_compacted;
    std::vector<Token> next = context;
    for (Token t : {11, 13, 9}) next.push_back(t);
    std::vector<float> x(static_cast<size_t>(V)), y(static_cast<size_t>(V));
    fed_session->next_logits(next, x.data());
    plain_session->next_logits(next, y.data());
    CHECK(fed.stats().path_nodes_compacted == compacted + 2);
    CHECK(x == y);
    // A pending node of another round than the remembered one's, not given: refused, not read as its placeholder.
    context = std::move(next);
    real = TokenTree{};
    pending = TokenTree{};
    fed_session->next_logits(context, row0.data());
    plain_session->next_logits(context, row0.data());
    CHECK(step({21, 22}, 5));
    TokenTree more = pending;
    more.add(kPendingToken, 0);
    const std::vector<int32_t> one = {23};
    std::vector<float> out(static_cast<size_t>(V));
    TreeLogitsCall call{fed_session.get(), &context, &more, out.data(), false, more.size()};
    call.device_tokens = one.data();
    call.device_tokens_from = more.size() - 1;
    call.pending_round = 6;
    CHECK_THROWS_WITH(model->batch_tree_logits({call}), Contains("pending, but neither given nor computed"));
    // A node given both on the host and in device memory: refused.
    call.tree = &real;
    call.first_row = real.size();
    call.device_tokens_from = real.size() - 1;
    CHECK_THROWS_WITH(model->batch_tree_logits({call}), Contains("given twice"));
    // Told the tokens of another round than the one that computed its nodes, the session forgets them rather than
    // label them: the next context along them runs them again.
    real = TokenTree{};
    pending = TokenTree{};
    CHECK(step({24, 25}, 7));
    fed_session->tree_tokens_known(real, 8);
    const int64_t kept = fed.stats().path_nodes_compacted;
    std::vector<Token> along = context;
    along.push_back(24);
    along.push_back(9);
    fed_session->next_logits(along, x.data());
    CHECK(fed.stats().path_nodes_compacted == kept);
  }
}

// A chain drawn at a batch's longest K and cut to its own: the session computed every depth's pending node, is told the
// cut chain's ids alone, and keeps the nodes it was told; a context along them follows them, and the nodes past the
// cut stay pending, followed by no context.
TEST_CASE("a session told a cut chain's ids follows the path along them", "[transformer]") {
  for (const std::string model_device : {"cpu", "libtorch"}) {
    INFO("model on " << model_device);
    const auto model = load_language_model(kDraft, "draft", "auto", model_device);
    const int32_t V = model->vocab_size();
    const auto fed_session = model->new_session();
    const auto plain_session = model->new_session();
    auto& fed = dynamic_cast<TransformerSession&>(*fed_session);
    const std::vector<Token> context = {5, 6, 7, 8};
    std::vector<float> row(static_cast<size_t>(V));
    fed_session->next_logits(context, row.data());
    plain_session->next_logits(context, row.data());
    // Three depths of a chain, each forward reading its newest node's id where it lies (round 4); the plain session
    // makes the same calls with the ids on the host (LibTorch's GEMMs may sum a row differently beside other rows).
    TokenTree pending, real;
    std::vector<float> rows(static_cast<size_t>(4 * V));
    const std::vector<int32_t> ids = {11, 12, 13};
    for (const int32_t& id : ids) {
      real.add(id, real.size() - 1);
      plain_session->tree_logits(context, real, rows.data());
      pending.add(kPendingToken, pending.size() - 1);
      TreeLogitsCall call{fed_session.get(), &context, &pending, row.data(), false, pending.size()};
      call.device_tokens = &id;
      call.device_tokens_from = pending.size() - 1;
      call.pending_round = 4;
      model->batch_tree_logits({call});
    }
    const int64_t compacted = fed.stats().path_nodes_compacted;
    fed_session->tree_tokens_known(TokenTree::chain({11}), 4);  // cut to K = 1
    std::vector<Token> next = context;
    next.push_back(11);
    next.push_back(9);
    std::vector<float> x(static_cast<size_t>(V)), y(static_cast<size_t>(V));
    fed_session->next_logits(next, x.data());
    plain_session->next_logits(next, y.data());
    CHECK(fed.stats().path_nodes_compacted == compacted + 1);
    CHECK(x == y);
  }
}

// Through the generator on cuda-host: a step of a fed draft's chain of 4 waits once, for verification, the draft's ids
// staying on the device for the target's forward and for verification, whether the target, the draft or both are
// penalised (a row's penalties count its path's ids on the device). The same sequences in every case as on the CPU.
TEST_CASE("a fed draft's decoding step waits once for the device, penalised or not", "[device]") {
  const auto target = load_language_model(kDraft, "draft", "auto", "cpu");
  SamplingParams penalised = drafting();
  penalised.repetition_penalty = 1.2f;
  struct Case {
    SamplingParams draft, target;
  };
  for (const Case& c : {Case{drafting(), drafting()}, Case{drafting(), penalised}, Case{penalised, drafting()},
                        Case{penalised, penalised}}) {
    INFO("draft penalised " << c.draft.penalised() << ", target penalised " << c.target.penalised());
    GenerationConfig config;
    config.method = VerifyMethod::chain;
    config.num_draft_tokens = 4;
    config.max_new_tokens = 12;
    config.seed = 5;
    const auto drafter = std::make_shared<ModelDrafterFactory>(target, c.draft);
    GenerationMetrics cpu_metrics, device_metrics;
    const std::vector<Token> prompt = {10, 20, 30};
    const auto cpu = Generator(target, c.target, drafter, config).generate_many(prompt, 0, 3, cpu_metrics);
    config.device = Device::cuda_host;
    const auto out = Generator(target, c.target, drafter, config).generate_many(prompt, 0, 3, device_metrics);
    for (size_t n = 0; n < out.size(); ++n) CHECK(out[n].tokens == cpu[n].tokens);
    CHECK(cpu_metrics.device_waits == 0);
    REQUIRE(device_metrics.steps > 0);
    CHECK(device_metrics.device_waits == device_metrics.steps);
    CHECK(device_metrics.staging_waits == 0);
  }
}

namespace {

// A draft that differs from the target (drafting()), so that verification rejects some of its tokens.
SamplingParams other_draft() {
  SamplingParams s;
  s.temperature = 0.7f;
  s.top_k = 20;
  return s;
}

// A transformer that keeps, after each batched call, the path nodes each session has kept so far (its sessions end
// with the generator that owns them).
// A transformer that counts the path nodes its sessions kept; with reads_ids false, it does not read token ids where a
// draft's draws left them (as a model of another kind), so a fed draft's ids come back before its forward.
class KeptSeen : public TransformerLanguageModel {
 public:
  using TransformerLanguageModel::TransformerLanguageModel;
  bool reads_ids = true;
  bool reads_device_tokens() const override { return reads_ids && TransformerLanguageModel::reads_device_tokens(); }
  void batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const override {
    TransformerLanguageModel::batch_tree_logits(calls);
    for (const TreeLogitsCall& c : calls)
      kept[c.session] = dynamic_cast<const TransformerSession&>(*c.session).stats().path_nodes_compacted;
  }
  int64_t total() const {
    int64_t sum = 0;
    for (const auto& [session, nodes] : kept) sum += nodes;
    return sum;
  }
  mutable std::map<const ModelSession*, int64_t> kept;
};

struct RunOf {
  std::vector<SequenceOutput> out;
  GenerationMetrics metrics;
  int64_t target_kept = 0, draft_kept = 0;  // path nodes the sessions kept (moved into place) over the run
  DraftStepCounts drafts;  // the drafter's steps, on the device or not, and its moving K's (MixedKSeen)
};

// Four sequences of `config` in lockstep (every call of both models batched) with a draft transformer and a target
// transformer (the bundled draft's checkpoint, at drafting()'s settings), each model its own instance so that its
// sessions are counted apart; both on `model_device` ("cpu": the decoding step; "libtorch": LibTorch's operations, step
// graphs and pooled steps).
RunOf run_of(GenerationConfig config, const SamplingParams& target_params, const std::string& model_device = "cpu",
             const SamplingParams& draft_params = other_draft(), bool target_reads_ids = true) {
  const auto target = std::make_shared<KeptSeen>(kDraftDir, "auto", model_device);
  target->reads_ids = target_reads_ids;
  const auto draft = std::make_shared<KeptSeen>(kDraftDir, "auto", model_device);
  const auto drafter = std::make_shared<MixedKSeen>(draft, draft_params);
  config.lockstep = true;
  RunOf run;
  run.out = Generator(target, target_params, drafter, config).generate_many({10, 20, 30}, 0, 4, run.metrics);
  run.target_kept = target->total();
  run.draft_kept = draft->total();
  run.drafts = drafter->counts;
  return run;
}

// A fed draft's config: `method` with 4 drafts, or a tree of `shape` (empty: a chain) and `scheme`.
GenerationConfig fed_config(VerifyMethod method, std::vector<int32_t> shape, SiblingScheme scheme) {
  GenerationConfig config;
  config.method = method;
  config.num_draft_tokens = 4;
  config.tree_shape = std::move(shape);
  config.tree_sampling = scheme;
  return config;
}

// run_of on the CPU and on cuda-host (models on the decoding step): the sequences that differ; `waits_once` whether
// every device step waited once, with no staging wait.
int64_t differing_sequences(GenerationConfig config, const SamplingParams& target_params,
                            const SamplingParams& draft_params = other_draft(), bool* waits_once = nullptr) {
  const RunOf cpu = run_of(config, target_params, "cpu", draft_params);
  config.device = Device::cuda_host;
  const RunOf device = run_of(config, target_params, "cpu", draft_params);
  if (waits_once)
    *waits_once = device.metrics.steps > 0 && device.metrics.device_waits == device.metrics.steps &&
                  device.metrics.staging_waits == 0;
  int64_t differing = 0;
  for (size_t n = 0; n < cpu.out.size(); ++n) differing += device.out[n].tokens != cpu.out[n].tokens;
  return differing;
}

}  // namespace

// The draft's ids never come to the host before verification: the target's forward reads them where the draws left
// them, and verification too, which brings them back with its outcome. Chains, i.i.d. trees and ranked trees, a sampled
// target and a greedy one: the CPU's sequences, one wait a step, and both models' sessions keep the accepted paths'
// nodes as the CPU's do (told the ids after verification).
TEST_CASE(
    "a draft's ids stay on the device through the target's forward and verification, with the CPU's "
    "sequences and one wait a step",
    "[device]") {
  struct Case {
    VerifyMethod method;
    std::vector<int32_t> shape;
    SiblingScheme scheme;
    float target_temperature;
  };
  int64_t rejected = 0;  // draft positions verification rejected: the accepted paths are not the whole drafts
  const std::vector<Case> cases = {Case{VerifyMethod::chain, {}, SiblingScheme::iid, 0.9f},
                                   Case{VerifyMethod::greedy, {}, SiblingScheme::iid, 0.0f},
                                   Case{VerifyMethod::tree, {2, 2, 1}, SiblingScheme::iid, 0.9f},
                                   Case{VerifyMethod::tree, {3, 2}, SiblingScheme::deterministic, 0.9f},
                                   Case{VerifyMethod::tree, {2, 1, 1}, SiblingScheme::deterministic, 0.0f}};
  for (const std::string model_device : {"cpu", "libtorch"})
    for (const Case& c : cases) {
      INFO("models on " << model_device << ", " << verify_method_name(c.method) << ", " << c.shape.size()
                        << " depths, target temperature " << c.target_temperature);
      GenerationConfig config = fed_config(c.method, c.shape, c.scheme);
      config.max_new_tokens = 14;
      config.seed = 11;
      SamplingParams target_params = drafting();
      target_params.temperature = c.target_temperature;
      const RunOf cpu = run_of(config, target_params, model_device);
      config.device = Device::cuda_host;
      const RunOf device = run_of(config, target_params, model_device);
      REQUIRE(device.out.size() == cpu.out.size());
      for (size_t n = 0; n < cpu.out.size(); ++n) CHECK(device.out[n].tokens == cpu.out[n].tokens);
      REQUIRE(device.metrics.steps > 0);
      CHECK(device.metrics.device_waits == device.metrics.steps);
      CHECK(device.metrics.staging_waits == 0);
      CHECK(device.metrics.accepted == cpu.metrics.accepted);
      rejected += device.metrics.proposed - device.metrics.accepted;
      CHECK(cpu.target_kept > 0);
      CHECK(cpu.draft_kept > 0);
      CHECK(device.target_kept == cpu.target_kept);
      CHECK(device.draft_kept == cpu.draft_kept);
    }
  CHECK(rejected > 0);
}

// A moving K (the heuristic schedule): the sequences' Ks move apart (a hot draft, so that they move far), each step's
// chains are drawn fed at the batch's longest K and each cut to its own, their ids kept on the device for the target's
// forward and verification, and the drafter's session told the cut chain's ids, some cut more than one node short of
// what it computed. The CPU's sequences and forwards, one wait a step.
TEST_CASE("a moving K's chains drawn fed, their ids kept on the device: the CPU's sequences, one wait a step",
          "[device][schedule]") {
  GenerationConfig config = fed_config(VerifyMethod::chain, {}, SiblingScheme::iid);
  config.num_draft_tokens = 6;
  config.num_draft_tokens_schedule = DraftSchedule::heuristic;
  config.max_new_tokens = 48;
  config.seed = 11;
  SamplingParams unstopped = drafting();  // no stop token: every sequence runs its 48 tokens, over many steps
  unstopped.stop_tokens.clear();
  SamplingParams hot = other_draft();
  hot.temperature = 2.0f;
  for (const std::string model_device : {"cpu", "libtorch"}) {
    INFO("models on " << model_device);
    GenerationConfig c = config;
    const RunOf cpu = run_of(c, unstopped, model_device, hot);
    c.device = Device::cuda_host;
    const RunOf device = run_of(c, unstopped, model_device, hot);
    CHECK(device.drafts.mixed > 0);
    CHECK(device.drafts.mixed_on_device == device.drafts.mixed);
    CHECK(device.drafts.widest_spread >= 2);
    REQUIRE(device.out.size() == cpu.out.size());
    for (size_t n = 0; n < cpu.out.size(); ++n) {
      CHECK(device.out[n].tokens == cpu.out[n].tokens);
      CHECK(device.out[n].accept_lengths == cpu.out[n].accept_lengths);
    }
    REQUIRE(device.metrics.steps > 0);
    CHECK(device.metrics.device_waits == device.metrics.steps);
    CHECK(device.metrics.staging_waits == 0);
    CHECK(device.metrics.draft_calls == cpu.metrics.draft_calls);
    CHECK(device.draft_kept >= cpu.draft_kept);  // told the ids, the draft's sessions kept the accepted paths
    // Step graphs run on LibTorch's path alone (each step: a pooled step a draft depth, and the target's), and none
    // replays without a GPU.
    INFO(device.metrics.step_graphs_built << " step graphs built, " << device.metrics.step_graphs_evicted
                                          << " evicted, in " << device.metrics.steps << " steps");
    if (model_device == "libtorch") {
      CHECK(device.metrics.step_graph_runs >= 2 * device.metrics.steps);
      CHECK(device.metrics.step_graphs_built > 0);
    } else {
      CHECK(device.metrics.step_graph_runs == 0);
    }
    CHECK(device.metrics.step_graph_replays == 0);
  }
  // Every chain left at the batch's longest K: other sequences.
  const ScopedMutant on(Mutant::device_chains_not_cut);
  CHECK(differing_sequences(config, unstopped, hot) > 0);
}

// A chain that may stop on the draft's doubt (confidence_threshold), its draft sampled: drawn fed at the batch's
// longest K and each chain cut after its first draft whose probability under its law is below the threshold, the
// probabilities gathered on the device. With a target that reads the ids where they lie, they stay there, and a step
// waits for the probabilities and for verification; with one that does not, the ids come back first (three waits).
// Under a constant K and the heuristic schedule: the CPU's sequences and draft forwards, every step drawn on the
// device.
TEST_CASE(
    "a chain that stops on the draft's doubt drawn fed on cuda-host: the CPU's sequences, every step on the device",
    "[device][schedule]") {
  SamplingParams unstopped = drafting();  // no stop token: every sequence runs its tokens, over many steps
  unstopped.stop_tokens.clear();
  for (const DraftSchedule schedule : {DraftSchedule::constant, DraftSchedule::heuristic})
    for (const bool target_reads_ids : {true, false})
      for (const std::string model_device : {"cpu", "libtorch"}) {
        INFO("models on " << model_device << ", " << draft_schedule_name(schedule) << " schedule, the target "
                          << (target_reads_ids ? "reads" : "does not read") << " the ids on the device");
        GenerationConfig config = fed_config(VerifyMethod::chain, {}, SiblingScheme::iid);
        config.num_draft_tokens = 6;
        config.num_draft_tokens_schedule = schedule;
        config.confidence_threshold = 0.4;
        config.max_new_tokens = 32;
        config.seed = 11;
        const RunOf cpu = run_of(config, unstopped, model_device, other_draft(), target_reads_ids);
        config.device = Device::cuda_host;
        const RunOf device = run_of(config, unstopped, model_device, other_draft(), target_reads_ids);
        REQUIRE(device.out.size() == cpu.out.size());
        for (size_t n = 0; n < cpu.out.size(); ++n) {
          CHECK(device.out[n].tokens == cpu.out[n].tokens);
          CHECK(device.out[n].accept_lengths == cpu.out[n].accept_lengths);
        }
        REQUIRE(device.metrics.steps > 0);
        CHECK(device.drafts.steps_on_device == device.drafts.steps);
        CHECK(device.metrics.proposed < 6 * device.metrics.steps);  // chains stopped on their doubt
        CHECK(device.metrics.proposed > device.metrics.steps);      // and not always at their first draft
        CHECK(device.metrics.proposed == cpu.metrics.proposed);
        CHECK(device.metrics.draft_calls == cpu.metrics.draft_calls);
        CHECK(device.metrics.device_waits == (target_reads_ids ? 2 : 3) * device.metrics.steps);
        CHECK(device.metrics.staging_waits == 0);
      }
  // Chains left uncut by their doubts: other sequences.
  GenerationConfig config = fed_config(VerifyMethod::chain, {}, SiblingScheme::iid);
  config.num_draft_tokens = 6;
  config.confidence_threshold = 0.4;
  config.max_new_tokens = 32;
  const ScopedMutant on(Mutant::device_chains_not_cut);
  CHECK(differing_sequences(config, unstopped) > 0);
}

TEST_CASE("a draft's ids kept for verification from the wrong depth change the sequences", "[device][mutant]") {
  const ScopedMutant on(Mutant::kept_ids_depths_misplaced);
  GenerationConfig config = fed_config(VerifyMethod::chain, {}, SiblingScheme::iid);
  config.max_new_tokens = 14;
  config.seed = 11;
  CHECK(differing_sequences(config, drafting()) > 0);
}

namespace {

// Strong penalties for both models, so that a path's token counted or not changes draws and decisions.
SamplingParams penalised(SamplingParams s) {
  s.repetition_penalty = 1.4f;
  s.frequency_penalty = 0.6f;
  s.presence_penalty = 0.4f;
  return s;
}

// differing_sequences for a penalised draft and target, with `config`.
int64_t penalised_differences(GenerationConfig config, float target_temperature, bool* waits_once = nullptr) {
  config.max_new_tokens = 14;
  config.seed = 13;
  SamplingParams target_params = penalised(drafting());
  target_params.temperature = target_temperature;
  return differing_sequences(config, target_params, penalised(other_draft()), waits_once);
}

}  // namespace

// Trees with siblings drawn without replacement through the generator: fed at the full shape, the CPU's sequences, on
// both model paths; drafts whose rows run out of mass (top-k 2 under 4 and 3 siblings) leave nodes never drawn, and
// penalised drafts (a row under a node never drawn counts its -1 as nothing). Their ids kept on the device for the
// target and verification (one wait a step), the nodes never drawn holes, which verification leaves out, keying the
// drawn nodes as the CPU's smaller trees (kVerifyRowHoles); or, for a target that does not read ids there, back before
// its forward (two waits a step), the host's trees without those nodes, their laws moved to those trees' rows. The
// target's sessions keep the CPU's path nodes: with these seeds no correction token is 0 at a row with holes (a
// session could then keep the hole's node, whose keys and values are token 0's there).
TEST_CASE(
    "trees of siblings drawn without replacement, fed, through the generator: the CPU's sequences, one wait a step "
    "(two when the target reads no device ids)",
    "[device]") {
  SamplingParams truncated = other_draft();
  truncated.top_k = 2;
  struct Case {
    std::vector<int32_t> shape;
    SamplingParams draft, target;
  };
  SamplingParams penalised_target = penalised(drafting());
  for (const bool target_reads_ids : {true, false})
    for (const std::string model_device : {"cpu", "libtorch"})
      for (const Case& c :
           {Case{{2, 2, 1}, other_draft(), drafting()}, Case{{4, 2}, truncated, drafting()},
            Case{{4, 3, 2}, truncated, drafting()}, Case{{4, 2}, penalised(truncated), penalised_target}}) {
        INFO("models on " << model_device << ", " << c.shape.size() << " depths, draft top-k " << c.draft.top_k
                          << ", penalised " << c.draft.penalised() << ", target reads ids " << target_reads_ids);
        GenerationConfig config = fed_config(VerifyMethod::tree, c.shape, SiblingScheme::without_replacement);
        config.max_new_tokens = 14;
        config.seed = 17;
        const RunOf cpu = run_of(config, c.target, model_device, c.draft, target_reads_ids);
        config.device = Device::cuda_host;
        const RunOf device = run_of(config, c.target, model_device, c.draft, target_reads_ids);
        REQUIRE(device.out.size() == cpu.out.size());
        for (size_t n = 0; n < cpu.out.size(); ++n) CHECK(device.out[n].tokens == cpu.out[n].tokens);
        REQUIRE(device.metrics.steps > 0);
        CHECK(device.metrics.device_waits == (target_reads_ids ? 1 : 2) * device.metrics.steps);
        CHECK(device.metrics.staging_waits == 0);
        CHECK(device.metrics.growth_waits == 0);
        CHECK(device.metrics.accepted == cpu.metrics.accepted);
        CHECK(device.metrics.proposed == cpu.metrics.proposed);
        CHECK(device.target_kept == cpu.target_kept);
      }
}

TEST_CASE("a kept proposal's rows under a node never drawn that draw anyway are refused after verification",
          "[device][mutant]") {
  SamplingParams truncated = other_draft();
  truncated.top_k = 2;
  GenerationConfig config = fed_config(VerifyMethod::tree, {4, 2}, SiblingScheme::without_replacement);
  config.max_new_tokens = 6;
  config.device = Device::cuda_host;
  const ScopedMutant on(Mutant::device_siblings_dead_rows_draw);
  CHECK_THROWS_WITH(run_of(config, drafting(), "cpu", truncated), Contains("planned sibling 0 of row 2 of depth 1 is"));
}

TEST_CASE("a kept tree's holes are counted out of the drafter's proposed tokens", "[device]") {
  const auto draft = load_language_model(kDraft, "draft", "auto", "cpu");
  const std::unique_ptr<Drafter> drafter = ModelDrafterFactory(draft, drafting()).create();
  TokenTree tree;
  for (const Token t : {5, -1, 7, -1, -1}) tree.add(t, -1);
  const int64_t before = drafter->counters().n_draft_tokens;
  drafter->tokens_known(tree);
  CHECK(drafter->counters().n_draft_tokens == before - 3);
}

TEST_CASE("fed trees with holes verified with their full shape's keys change the sequences", "[device][mutant]") {
  SamplingParams truncated = other_draft();
  truncated.top_k = 2;  // every root's four siblings: two tokens, then two holes, ahead of the drawn second depth
  GenerationConfig config = fed_config(VerifyMethod::tree, {4, 2}, SiblingScheme::without_replacement);
  config.max_new_tokens = 14;
  config.seed = 17;
  CHECK(differing_sequences(config, drafting(), truncated) == 0);
  const ScopedMutant on(Mutant::tree_holes_keyed_by_shape);
  CHECK(differing_sequences(config, drafting(), truncated) > 0);
}

// Penalties read a row's path: the draft's depths the ids drawn before them, the target's rows their paths' ids, all
// counted on the device where they lie (TokenHistory::pending_ids), so a penalised step still waits once, with the
// CPU's sequences.
TEST_CASE("a penalised draft and target wait once a step, with the CPU's sequences", "[device]") {
  struct Case {
    GenerationConfig config;
    float target_temperature;
  };
  for (const Case& c : {Case{fed_config(VerifyMethod::chain, {}, SiblingScheme::iid), 0.9f},
                        Case{fed_config(VerifyMethod::tree, {2, 2, 1}, SiblingScheme::iid), 0.9f},
                        Case{fed_config(VerifyMethod::tree, {3, 2}, SiblingScheme::deterministic), 0.9f},
                        Case{fed_config(VerifyMethod::greedy, {}, SiblingScheme::iid), 0.0f}}) {
    INFO(verify_method_name(*c.config.method)
         << ", " << c.config.tree_shape.size() << " depths, target temperature " << c.target_temperature);
    bool waits_once = false;
    CHECK(penalised_differences(c.config, c.target_temperature, &waits_once) == 0);
    CHECK(waits_once);
  }
}

TEST_CASE("pending ids left out of the device's penalty counts change the sequences", "[device][mutant]") {
  const ScopedMutant on(Mutant::pending_counts_skip_newest);
  CHECK(penalised_differences(fed_config(VerifyMethod::chain, {}, SiblingScheme::iid), 0.9f) > 0);
  CHECK(penalised_differences(fed_config(VerifyMethod::tree, {2, 2, 1}, SiblingScheme::iid), 0.9f) > 0);
}
