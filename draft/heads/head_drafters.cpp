#include "draft/heads/head_drafters.h"

#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <limits>
#include <numeric>
#include <optional>
#include <sstream>

#include "draft/drafter_options.h"
#include "draft/heads/draft_heads.h"
#include "draft/tree_shape_optimizer.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/transformer_language_model.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"

namespace specula {

struct HeadDrafterFactory::State {
  HeadDrafterOptions options;
  std::string target_dir;
  Transformer target{nullptr};  // frozen: features, token embedding (EAGLE), LM head (EAGLE)
  bool shares_target = false;   // `target` is the --target model's own module (same checkpoint)
  DraftHeadsConfig heads_config;
  MedusaHeads medusa{nullptr};
  EagleHead eagle{nullptr};
  torch::ScalarType heads_dtype = torch::kFloat32;  // the heads' matrices in memory
  // Where the heads (and a target copy of their own) compute: beside a target that takes LibTorch's operations (on a
  // GPU, or `libtorch` on the CPU), on its device with LibTorch's operations; otherwise on the CPU's decoding step,
  // matrices packed. Their inputs (the target's hidden states) come from the host, and their ranked rows go back
  // there: the drafts are chosen on the CPU.
  torch::Device device{torch::kCPU};
  bool libtorch_operations = false;
  std::optional<RankTree> tree_template;  // tree=FILE
  std::atomic<int64_t> feature_forwards{0}, feature_rows{0};
};

namespace {

using Clock = std::chrono::steady_clock;

torch::Tensor ids(const std::vector<Token>& tokens, size_t begin, size_t end) {
  return torch::tensor(std::vector<int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                            tokens.begin() + static_cast<std::ptrdiff_t>(end)),
                       torch::kInt64)
      .unsqueeze(0);
}

// The `k` largest entries of row [V], best first, lowest id on ties (the order of draw_children's top-k).
std::vector<Token> top_tokens(const float* row, int32_t vocab_size, int32_t k) {
  std::vector<Token> idx(vocab_size);
  std::iota(idx.begin(), idx.end(), 0);
  const int32_t n = std::min(k, vocab_size);
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(),
                    [&](Token a, Token b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  idx.resize(n);
  return idx;
}

// The simplest correct feature source: the drafter's own session of the target (see target_features.h).
class OwnSessionFeatures : public TargetFeatureSource {
 public:
  explicit OwnSessionFeatures(Transformer model)
      : model_(std::move(model)),
        kv_(model_->new_cache(1)),
        rows_(torch::zeros({model_->config().max_seq_len, model_->config().d_model})) {}

  int32_t hidden_size() const override { return model_->config().d_model; }
  const TargetFeatureStats& stats() const override { return stats_; }

  const float* features(const std::vector<Token>& tokens, int64_t n) override {
    if (n < 0 || n > static_cast<int64_t>(tokens.size())) fail("target features: ", n, " positions of ", tokens.size());
    if (n > rows_.size(0)) fail("target features: ", n, " positions exceed the target's max_seq_len ", rows_.size(0));
    c10::InferenceMode inference;
    size_t common = 0;
    while (common < cached_.size() && common < static_cast<size_t>(n) && cached_[common] == tokens[common]) ++common;
    if (common < cached_.size()) {
      cached_.resize(common);
      kv_.truncate(static_cast<int64_t>(common));
    }
    const int64_t fresh = n - static_cast<int64_t>(common);
    if (fresh > 0) {
      const AttentionLayout layout = causal_layout(static_cast<int64_t>(common), fresh);
      const torch::Tensor hidden = model_->hidden_states(ids(tokens, common, static_cast<size_t>(n)), layout.positions,
                                                         fresh == 1 ? torch::Tensor() : layout.mask, &kv_)[0];
      rows_.narrow(0, static_cast<int64_t>(common), fresh).copy_(hidden);
      cached_.insert(cached_.end(), tokens.begin() + static_cast<std::ptrdiff_t>(common), tokens.begin() + n);
      ++stats_.forwards;
      stats_.rows += fresh;
    }
    return rows_.data_ptr<float>();
  }

 private:
  Transformer model_;
  KVCache kv_;
  torch::Tensor rows_;  // [max_seq_len, H] features of the cached positions
  std::vector<Token> cached_;
  TargetFeatureStats stats_;
};

// What every head drafter shares: the factory state, the feature source and the request's static shape.
class HeadDrafterBase : public Drafter {
 public:
  explicit HeadDrafterBase(std::shared_ptr<HeadDrafterFactory::State> state)
      : state_(std::move(state)),
        vocab_size_(state_->target->config().vocab_size),
        hidden_size_(state_->target->config().d_model),
        max_seq_len_(state_->target->config().max_seq_len) {}

  // With the heads' own target module (not a copy), the generation loop's target session already holds the
  // features of the committed context after each verification call: read them there.
  void set_target_session(ModelSession* target) override {
    verifier_ = state_->shares_target && target && target->feature_size() == hidden_size_ ? target : nullptr;
  }

  // Prefill: the target features of the prompt (proposals read positions [0, L - 1)), so the decoding loop
  // pays only for the tokens each step commits.
  void begin(const std::vector<Token>& prompt) override {
    if (prompt.size() >= 2) features(prompt, static_cast<int64_t>(prompt.size()) - 1);
  }

 protected:
  // The features of positions [0, n), counting the target forward it may cost in the factory's totals.
  const float* features(const std::vector<Token>& context, int64_t n) {
    if (verifier_)
      if (const float* f = verifier_->context_features(context, n)) return f;
    // Made on first use: a drafter that reads the verification forwards never holds a KV cache of its own (on a GPU,
    // max_seq_len positions of device memory per sequence).
    if (!features_) features_ = std::make_unique<OwnSessionFeatures>(state_->target);
    const TargetFeatureStats before = features_->stats();
    const float* f = features_->features(context, n);
    state_->feature_forwards += features_->stats().forwards - before.forwards;
    state_->feature_rows += features_->stats().rows - before.rows;
    return f;
  }

  // The static tree of a request (see head_drafters.h), cut to `max_depth`.
  RankTree static_shape(const DraftRequest& request, int32_t max_depth) const {
    RankTree shape = request.tree_shape.empty() ? RankTree::chain(request.num_draft_tokens)
                     : state_->tree_template    ? *state_->tree_template
                                                : RankTree::uniform(request.tree_shape);
    return shape.max_depth() > max_depth ? shape.truncated(std::max(max_depth, 0)) : shape;
  }

  TokenTree finish(TokenTree tree, Clock::time_point start) {
    if (tree.scheme == SiblingScheme::deterministic) tree.draft_q.clear();  // point masses
    tree.draft_q.resize(tree.size() + 1);
    return counted(std::move(tree), start);
  }

  std::shared_ptr<HeadDrafterFactory::State> state_;
  ModelSession* verifier_ = nullptr;  // the generation loop's target session, when it runs the heads' module
  std::unique_ptr<OwnSessionFeatures> features_;
  int32_t vocab_size_, hidden_size_, max_seq_len_;
};

// ---------------------------------------------------------------------------------------------------------
// Medusa: one forward of the K heads on f_{L-2}; the candidate at depth d and rank r is head d's r-th token.

class MedusaDrafter : public HeadDrafterBase {
 public:
  using HeadDrafterBase::HeadDrafterBase;
  std::string name() const override { return "medusa"; }

  TokenTree propose(const DraftRequest& request) override {
    const auto start = Clock::now();
    const std::vector<Token>& context = *request.context;
    const int64_t L = static_cast<int64_t>(context.size());
    TokenTree tree;
    tree.scheme = SiblingScheme::deterministic;
    const int32_t heads = static_cast<int32_t>(state_->medusa->count);
    const RankTree shape = static_shape(request, std::min<int64_t>(heads, max_seq_len_ - std::max<int64_t>(L, 1)));
    if (L < 2 || shape.size() == 0) return finish(std::move(tree), start);

    const float* f = features(context, L - 1) + static_cast<size_t>(L - 2) * hidden_size_;
    c10::InferenceMode inference;
    const LibTorchOperationsOnly scope(state_->libtorch_operations);
    const torch::Tensor h = torch::from_blob(const_cast<float*>(f), {hidden_size_}, torch::kFloat32).to(state_->device);
    const torch::Tensor logits = state_->medusa->forward(h).to(torch::kCPU).contiguous();  // [K, V]
    ++counters_.n_forward;
    const int32_t depth = shape.max_depth();
    std::vector<int32_t> ranks_needed(depth, 0);
    for (int32_t n = 0; n < shape.size(); ++n)
      ranks_needed[shape.depth(n) - 1] = std::max(ranks_needed[shape.depth(n) - 1], shape.rank[n] + 1);
    std::vector<std::vector<Token>> top(depth);
    for (int32_t d = 0; d < depth; ++d) top[d] = top_tokens(logits[d].data_ptr<float>(), vocab_size_, ranks_needed[d]);
    std::vector<int32_t> kept(shape.size(), -1);  // ranks beyond the vocabulary are dropped with their subtree
    for (int32_t n = 0; n < shape.size(); ++n) {
      const int32_t p = shape.parent[n];
      const std::vector<Token>& choices = top[shape.depth(n) - 1];
      if ((p >= 0 && kept[p] < 0) || shape.rank[n] >= static_cast<int32_t>(choices.size())) continue;
      kept[n] = tree.size();
      tree.add(choices[shape.rank[n]], p < 0 ? -1 : kept[p]);
    }
    return finish(std::move(tree), start);
  }
};

// ---------------------------------------------------------------------------------------------------------
// EAGLE: the committed pairs (Embed(x_{t+1}), f_t) live in the head's KV cache (slots 0..P-1, P = L - 1);
// draft nodes are appended after them, one batched forward per depth, each row seeing the committed pairs,
// its ancestors and itself (verify/ALGORITHMS.md §6's tree mask, on the draft's side).

class EagleDrafter : public HeadDrafterBase {
 public:
  explicit EagleDrafter(std::shared_ptr<HeadDrafterFactory::State> state)
      : HeadDrafterBase(std::move(state)), kv_(state_->eagle->new_cache()) {
    if (state_->libtorch_operations) kv_.use_libtorch_operations();
  }
  std::string name() const override { return "eagle"; }

  TokenTree propose(const DraftRequest& request) override {
    const auto start = Clock::now();
    const std::vector<Token>& context = *request.context;
    const int64_t L = static_cast<int64_t>(context.size());
    TokenTree tree;
    tree.scheme = SiblingScheme::deterministic;
    // Draft node of depth d sits at position L - 2 + d; the target needs L + depth <= max_seq_len.
    const int32_t depth_limit = static_cast<int32_t>(std::max<int64_t>(0, max_seq_len_ - L));
    const bool dynamic = state_->options.dynamic && !request.tree_shape.empty();
    const RankTree shape = static_shape(request, depth_limit);
    if (L < 2 || depth_limit == 0 || (!dynamic && shape.size() == 0)) return finish(std::move(tree), start);

    const float* f = features(context, L - 1);
    c10::InferenceMode inference;
    const LibTorchOperationsOnly scope(state_->libtorch_operations);
    const torch::Tensor root = run_committed(context, f);  // f^_{L-1} [H]
    if (dynamic) {
      const int32_t depth =
          std::min(depth_limit,
                   state_->options.depth > 0 ? state_->options.depth : static_cast<int32_t>(request.tree_shape.size()));
      const int32_t total = state_->options.total_tokens > 0 ? state_->options.total_tokens
                                                             : RankTree::uniform(request.tree_shape).size();
      tree = dynamic_tree(root, L, depth, state_->options.top_k, total);
    } else {
      tree = static_tree(root, L, shape);
    }
    return finish(std::move(tree), start);
  }

 private:
  // Runs the committed pairs not yet cached (at least the last one, whose output is returned).
  torch::Tensor run_committed(const std::vector<Token>& context, const float* features) {
    const int64_t L = static_cast<int64_t>(context.size());
    size_t common = 0;
    while (common < pair_context_.size() && common < context.size() && pair_context_[common] == context[common])
      ++common;
    // Pair t reads x_{t+1} and f_t (a function of x_0..x_t): valid while x_0..x_{t+1} are unchanged.
    int64_t valid = std::min<int64_t>(pairs_, std::max<int64_t>(0, static_cast<int64_t>(common) - 1));
    valid = std::min(valid, L - 2);  // the last pair always runs: its output is the root's feature
    kv_.truncate(valid);             // also drops the previous step's draft nodes
    const int64_t fresh = L - 1 - valid;
    const torch::Device device = state_->device;
    const torch::Tensor emb = state_->target->embed(ids(context, valid + 1, L).to(device));
    const torch::Tensor feat =
        torch::from_blob(const_cast<float*>(features) + valid * hidden_size_, {1, fresh, hidden_size_}, torch::kFloat32)
            .to(device);
    const AttentionLayout layout = causal_layout(valid, fresh);
    const torch::Tensor out = state_->eagle->forward(emb, feat, layout.positions.to(device),
                                                     fresh == 1 ? torch::Tensor() : layout.mask.to(device), &kv_);
    ++counters_.n_forward;
    pairs_ = L - 1;
    pair_context_ = context;
    return out[0][fresh - 1];
  }

  // Runs draft nodes (one row each) after the cache: node i has token tokens[i], its parent's feature
  // parent_features[i], depth depths[i] and sees the cached draft slots ancestors[i]. Returns f^ [N, H];
  // the rows take slots kv_.length() + i.
  torch::Tensor run_nodes(const std::vector<Token>& tokens, const std::vector<torch::Tensor>& parent_features,
                          const std::vector<int32_t>& depths, const std::vector<std::vector<int64_t>>& ancestors,
                          int64_t L) {
    const int64_t n = static_cast<int64_t>(tokens.size()), cached = kv_.length(), cols = cached + n;
    std::vector<float> mask(static_cast<size_t>(n * cols), -std::numeric_limits<float>::infinity());
    std::vector<int64_t> positions(n);
    for (int64_t i = 0; i < n; ++i) {
      float* row = mask.data() + i * cols;
      std::fill(row, row + pairs_, 0.0f);
      for (int64_t slot : ancestors[i]) row[slot] = 0.0f;
      row[cached + i] = 0.0f;
      positions[i] = L - 2 + depths[i];
    }
    kv_.reserve(cols);
    const torch::Device device = state_->device;
    const torch::Tensor emb = state_->target->embed(ids(tokens, 0, tokens.size()).to(device));
    const torch::Tensor feat = torch::stack(parent_features).unsqueeze(0);
    const torch::Tensor out =
        state_->eagle->forward(emb, feat, torch::tensor(positions, torch::kInt64).to(device),
                               torch::from_blob(mask.data(), {n, cols}, torch::kFloat32).clone().to(device), &kv_);
    ++counters_.n_forward;
    return out[0];
  }

  TokenTree static_tree(const torch::Tensor& root, int64_t L, const RankTree& shape) {
    TokenTree tree;
    tree.scheme = SiblingScheme::deterministic;
    const int32_t n = shape.size(), depth = shape.max_depth();
    std::vector<int32_t> node_depth(n), kept(n, -1);
    std::vector<char> has_children(n, 0);
    for (int32_t i = 0; i < n; ++i) {
      node_depth[i] = shape.depth(i);
      if (shape.parent[i] >= 0) has_children[shape.parent[i]] = 1;
    }
    std::vector<torch::Tensor> hidden(n);  // f^ of the nodes that were run
    std::vector<int64_t> slot(n, -1);
    std::vector<std::vector<Token>> top(n + 1);  // per row: the ranked children tokens
    auto rank_children = [&](int32_t row, const torch::Tensor& logits, int32_t count) {  // logits on the host
      top[row] = top_tokens(logits.contiguous().data_ptr<float>(), vocab_size_, count);
    };
    std::vector<int32_t> ranks_needed(n + 1, 0);
    for (int32_t i = 0; i < n; ++i)
      ranks_needed[shape.parent[i] + 1] = std::max(ranks_needed[shape.parent[i] + 1], shape.rank[i] + 1);
    rank_children(0, state_->target->lm_head(root).to(torch::kCPU), ranks_needed[0]);
    for (int32_t d = 1; d <= depth; ++d) {
      // Tokens of depth d from their parents' rankings.
      for (int32_t i = 0; i < n; ++i) {
        if (node_depth[i] != d) continue;
        const int32_t p = shape.parent[i];
        if (p >= 0 && kept[p] < 0) continue;
        const std::vector<Token>& choices = top[p + 1];
        if (shape.rank[i] >= static_cast<int32_t>(choices.size())) continue;
        kept[i] = tree.size();
        tree.add(choices[shape.rank[i]], p < 0 ? -1 : kept[p]);
      }
      if (d == depth) break;
      // Run the nodes of depth d that have children; rank their children.
      std::vector<int32_t> run;
      std::vector<Token> tokens;
      std::vector<torch::Tensor> parent_features;
      std::vector<int32_t> depths;
      std::vector<std::vector<int64_t>> ancestors;
      for (int32_t i = 0; i < n; ++i) {
        if (node_depth[i] != d || !has_children[i] || kept[i] < 0) continue;
        run.push_back(i);
        tokens.push_back(tree.tokens[kept[i]]);
        parent_features.push_back(shape.parent[i] < 0 ? root : hidden[shape.parent[i]]);
        depths.push_back(d);
        std::vector<int64_t> a;
        for (int32_t u = shape.parent[i]; u >= 0; u = shape.parent[u]) a.push_back(slot[u]);
        ancestors.push_back(std::move(a));
      }
      if (run.empty()) continue;
      const int64_t first_slot = kv_.length();
      const torch::Tensor out = run_nodes(tokens, parent_features, depths, ancestors, L);
      const torch::Tensor logits = state_->target->lm_head(out).to(torch::kCPU);
      for (size_t r = 0; r < run.size(); ++r) {
        hidden[run[r]] = out[static_cast<int64_t>(r)];
        slot[run[r]] = first_slot + static_cast<int64_t>(r);
        rank_children(run[r] + 1, logits[static_cast<int64_t>(r)], ranks_needed[run[r] + 1]);
      }
    }
    return tree;
  }

  // EAGLE-2 (cnets.py::topK_genrate): scores are cumulative draft log-probabilities.
  TokenTree dynamic_tree(const torch::Tensor& root, int64_t L, int32_t depth, int32_t top_k, int32_t total) {
    struct Candidate {
      Token token;
      int32_t parent;  // candidate index, -1 = root
      double score;    // sum of log q along the path
    };
    std::vector<Candidate> cands;
    std::vector<torch::Tensor> hidden;  // f^ of expanded candidates
    std::vector<int64_t> slot;
    std::vector<torch::Tensor> row_logits;  // raw logits of expanded candidates (the mutant's q)
    const torch::Tensor root_logits = state_->target->lm_head(root);
    const torch::Tensor root_logq = torch::log_softmax(root_logits, -1).to(torch::kCPU).contiguous();
    const float* lq = root_logq.data_ptr<float>();
    std::vector<int32_t> frontier;
    for (Token t : top_tokens(lq, vocab_size_, top_k)) {
      frontier.push_back(static_cast<int32_t>(cands.size()));
      cands.push_back({t, -1, lq[t]});
    }
    auto grow = [&](size_t n) {
      hidden.resize(n);
      slot.resize(n, -1);
      row_logits.resize(n);
    };
    grow(cands.size());
    for (int32_t level = 2; level <= depth && !frontier.empty(); ++level) {
      std::vector<Token> tokens;
      std::vector<torch::Tensor> parent_features;
      std::vector<int32_t> depths;
      std::vector<std::vector<int64_t>> ancestors;
      for (int32_t c : frontier) {
        tokens.push_back(cands[c].token);
        parent_features.push_back(cands[c].parent < 0 ? root : hidden[cands[c].parent]);
        depths.push_back(level - 1);
        std::vector<int64_t> a;
        for (int32_t u = cands[c].parent; u >= 0; u = cands[u].parent) a.push_back(slot[u]);
        ancestors.push_back(std::move(a));
      }
      const int64_t first_slot = kv_.length();
      const torch::Tensor out = run_nodes(tokens, parent_features, depths, ancestors, L);
      const torch::Tensor logits = state_->target->lm_head(out);
      const torch::Tensor logq = torch::log_softmax(logits, -1).to(torch::kCPU).contiguous();
      std::vector<int32_t> fresh;
      for (size_t r = 0; r < frontier.size(); ++r) {
        const int32_t c = frontier[r];
        hidden[c] = out[static_cast<int64_t>(r)];
        slot[c] = first_slot + static_cast<int64_t>(r);
        row_logits[c] = logits[static_cast<int64_t>(r)];
        const float* row = logq.data_ptr<float>() + r * vocab_size_;
        for (Token t : top_tokens(row, vocab_size_, top_k)) {
          fresh.push_back(static_cast<int32_t>(cands.size()));
          cands.push_back({t, c, cands[c].score + row[t]});
        }
      }
      grow(cands.size());
      // The next frontier: the top_k of the top_k^2 new candidates (ties to the earlier candidate).
      std::stable_sort(fresh.begin(), fresh.end(),
                       [&](int32_t a, int32_t b) { return cands[a].score > cands[b].score; });
      fresh.resize(std::min<size_t>(fresh.size(), static_cast<size_t>(top_k)));
      frontier = std::move(fresh);
    }

    // Rerank: the best `total` candidates by score, in creation order (parents first). A child's score is
    // at most its parent's and the parent was created first, so with ties broken by creation order every
    // kept node's parent is kept too.
    std::vector<int32_t> order(cands.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return cands[a].score > cands[b].score; });
    order.resize(std::min<size_t>(order.size(), static_cast<size_t>(std::max(total, 0))));
    std::sort(order.begin(), order.end());
    std::vector<int32_t> node_of(cands.size(), -1);
    TokenTree tree;
    tree.scheme = SiblingScheme::deterministic;
    for (int32_t c : order) {
      const int32_t p = cands[c].parent;
      if (p >= 0 && node_of[p] < 0) fail("EAGLE-2 rerank: node kept without its parent (internal error)");
      node_of[c] = tree.size();
      tree.add(cands[c].token, p < 0 ? -1 : node_of[p]);
    }
    if (mutant_on(Mutant::dynamic_tree_tested_with_q)) {
      // NOT exact: the value-chosen candidates treated as draws without replacement from the draft's q.
      tree.scheme = SiblingScheme::without_replacement;
      tree.draft_q.assign(tree.size() + 1, {});
      auto record = [&](int32_t row, const torch::Tensor& logits) {
        const torch::Tensor q = torch::softmax(logits, -1).to(torch::kCPU).contiguous();
        tree.draft_q[row].assign(q.data_ptr<float>(), q.data_ptr<float>() + vocab_size_);
      };
      record(0, root_logits);
      for (int32_t c : order)
        if (row_logits[c].defined()) record(node_of[c] + 1, row_logits[c]);
    }
    return tree;
  }

  KVCache kv_;
  int64_t pairs_ = 0;                // committed pairs in kv_ (slots 0..pairs_-1)
  std::vector<Token> pair_context_;  // the context those pairs were built from
};

}  // namespace

// ---------------------------------------------------------------------------------------------------------

HeadDrafterFactory::HeadDrafterFactory(const HeadDrafterOptions& options, const LanguageModel* target)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.options = options;
  s.heads_config = read_draft_heads_config(options.heads_dir);
  const std::string where = options.kind + ":" + options.heads_dir;
  if (s.heads_config.kind != options.kind)
    fail_parameter("draft", " ", where, ": the folder holds ", s.heads_config.kind, " heads, not ", options.kind);
  s.target_dir =
      options.target_dir.empty() ? heads_target_folder(options.heads_dir, s.heads_config) : options.target_dir;
  // The heads' target is read once: its config first, then either the --target's own module (the same
  // checkpoint: one copy of the weights, never two even while loading) or a copy of its own, whose matrices
  // take the --target's dtype (as --weights-dtype made it) or, without a --target, the stored one.
  const CheckpointConfig target_config = read_checkpoint_config(s.target_dir);
  const TransformerConfig c = target_config.model;
  check_heads_target_config(s.heads_config, s.target_dir, target_config, where);
  const TransformerLanguageModel* transformer = nullptr;
  Transformer target_module{nullptr};
  if (target) {
    transformer = dynamic_cast<const TransformerLanguageModel*>(target);
    if (!transformer)
      fail_parameter("draft", " ", where, ": ", options.kind,
                     " heads read a transformer target's features; the target ", target->description(),
                     " is not a transformer (use --target transformer:", s.target_dir, ")");
    if (transformer->vocab_size() != c.vocab_size || transformer->max_seq_len() != c.max_seq_len ||
        transformer->parameter_count() != c.parameter_count())
      fail_parameter("draft", " ", where, ": the heads' target ", s.target_dir, " (", c.describe(),
                     ") is not the --target ", target->description());
    target_module = transformer_module(*transformer);
    s.libtorch_operations = !target_module->decode_step();
    if (s.libtorch_operations) s.device = target_module->embedding->weight.device();
    std::error_code ec1, ec2;
    s.shares_target = transformer->kind() == "transformer" &&
                      std::filesystem::weakly_canonical(transformer->checkpoint_dir(), ec1) ==
                          std::filesystem::weakly_canonical(s.target_dir, ec2) &&
                      !ec1 && !ec2;
  }
  if (s.shares_target) {
    s.target = target_module;
  } else {
    const std::string dtype = transformer ? dtype_string(target_module->embedding->weight.scalar_type()) : "auto";
    s.target = load_checkpoint(s.target_dir, dtype).model;
    if (s.libtorch_operations) place_for_libtorch_operations(s.target, s.device);  // placed as the --target is
  }
  if (options.kind == "medusa") {
    s.medusa = MedusaHeads(s.heads_config.medusa_heads, c.d_model, c.vocab_size);
    load_draft_heads_weights(options.heads_dir, s.heads_config, *s.medusa);
  } else {
    s.eagle = EagleHead(c);
    load_draft_heads_weights(options.heads_dir, s.heads_config, *s.eagle);
  }
  // Heads are trained in float32 and stored as their config says (matrices_dtype); kept as weights_dtype says
  // (the kernel widens 16-bit matrices).
  s.heads_dtype = weights_dtype_for(options.weights_dtype == "target" ? "auto" : options.weights_dtype,
                                    s.target->embedding->weight.scalar_type());
  if (s.medusa) store_matrices_as(*s.medusa, s.heads_dtype);
  if (s.eagle) store_matrices_as(*s.eagle, s.heads_dtype);
  if (s.libtorch_operations) {  // beside the target, in their dtype (16-bit GEMMs on a GPU)
    if (s.medusa) s.medusa->to(s.device);
    if (s.eagle) s.eagle->to(s.device);
  } else {  // packed for the few-row kernel, as the target's are; a target loaded here (not shared) too
    if (s.medusa) pack_matrices_for_decoding(*s.medusa);
    if (s.eagle) pack_matrices_for_decoding(*s.eagle);
    if (!s.shares_target) pack_matrices_for_decoding(*s.target);
  }
  if (!options.tree_file.empty()) {
    s.tree_template = read_rank_tree_file(options.tree_file);
    // Head k predicts the token k positions ahead: a deeper path has no head to rank it.
    if (s.medusa && s.tree_template->max_depth() > static_cast<int32_t>(s.medusa->count))
      fail_parameter("draft", " ", where, ": tree ", options.tree_file, " is ", s.tree_template->max_depth(),
                     " levels deep, but the ", s.medusa->count, " Medusa heads of ", options.heads_dir,
                     " draft at most ", s.medusa->count);
  }
}

HeadDrafterFactory::~HeadDrafterFactory() = default;

std::unique_ptr<Drafter> HeadDrafterFactory::create() const {
  if (state_->options.kind == "medusa") return std::make_unique<MedusaDrafter>(state_);
  return std::make_unique<EagleDrafter>(state_);
}

int32_t HeadDrafterFactory::vocab_size() const { return state_->target->config().vocab_size; }

int32_t HeadDrafterFactory::max_draft_depth() const {
  // A tree file was checked against the heads when it was read, and a request's shape does not apply to it.
  return head_draft_bound(state_->options.kind, state_->tree_template.has_value(),
                          state_->medusa ? static_cast<int32_t>(state_->medusa->count) : 0);
}

std::string HeadDrafterFactory::description() const {
  const State& s = *state_;
  std::ostringstream os;
  os << s.options.kind << ":" << s.options.heads_dir << " (";
  if (s.options.kind == "medusa")
    os << s.heads_config.medusa_heads << " Medusa heads";
  else
    os << "EAGLE head";
  os << ", " << dtype_string(s.heads_dtype) << " matrices, on transformer:" << s.target_dir
     << (s.shares_target ? " (the target's own module)"
                         : " (own copy, " + dtype_string(s.target->embedding->weight.scalar_type()) + " matrices)")
     << (s.libtorch_operations ? ", LibTorch's operations on " + s.device.str() : std::string()) << "; ";
  if (s.options.dynamic) {
    os << "EAGLE-2 dynamic tree, top_k " << s.options.top_k << ", depth "
       << (s.options.depth ? std::to_string(s.options.depth) : std::string("= --tree depth")) << ", total_tokens "
       << (s.options.total_tokens ? std::to_string(s.options.total_tokens) : std::string("= --tree nodes"));
  } else if (s.tree_template) {
    os << "static tree " << s.options.tree_file << " (" << s.tree_template->size() << " nodes)";
  } else {
    os << "static tree = --tree shape";
  }
  os << "; point-mass verification)";
  return os.str();
}

TargetFeatureStats HeadDrafterFactory::feature_stats() const {
  return {state_->feature_forwards.load(), state_->feature_rows.load()};
}

std::shared_ptr<const DrafterFactory> load_head_drafter(const std::string& spec,
                                                        const std::shared_ptr<const LanguageModel>& target) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  return std::make_shared<HeadDrafterFactory>(parse_head_drafter_spec(kind, rest, spec), target.get());
}

std::shared_ptr<const DrafterFactory> make_head_drafter(const DrafterSpec& spec) {
  return load_head_drafter(spec.spec, spec.target);
}

}  // namespace specula
