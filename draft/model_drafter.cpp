#include "draft/model_drafter.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>

#include "draft/candidate_sampling.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/device/batch_verifier.h"
#include "verify/device/sampler_batch.h"
#include "verify/sampling/logprobs.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/token_tree.h"

namespace specula {

class ModelDrafter : public Drafter {
 public:
  ModelDrafter(const LanguageModel& model, const SamplerPipeline& pipeline, const SamplerPipeline& ranking_pipeline)
      : session_(model.new_session()),
        pipeline_(pipeline),
        ranking_pipeline_(ranking_pipeline),
        vocab_size_(model.vocab_size()) {}

  std::string name() const override { return "model"; }

  // Prefill: run the prompt now (its logits are cached), so the first proposal drafts only.
  void begin(const std::vector<Token>& prompt) override {
    if (prompt.empty()) return;
    std::vector<float> logits(vocab_size_);
    session_->next_logits(prompt, logits.data());
    ++counters_.n_forward;
  }

  // A proposal in progress: the tree so far and the rows whose children are drawn at the next depth. One draft
  // forward per depth (step) gives the logits of every row of the tree so far.
  struct Proposal {
    const DraftRequest* request = nullptr;
    std::chrono::steady_clock::time_point start;
    std::vector<int32_t> shape;  // branching per depth
    size_t depth = 0;
    TokenTree tree;
    std::vector<int32_t> frontier = {0};
    uint32_t slot = 0;
    const SamplerPipeline* pipeline = nullptr;
    std::vector<float> logits;  // [tree.size() + 1, V]: the next forward's rows
    bool done() const { return depth >= shape.size() || frontier.empty(); }
  };

  Proposal start(const DraftRequest& request) const {
    Proposal p;
    p.request = &request;
    p.start = std::chrono::steady_clock::now();
    p.shape = request.tree_shape;
    if (p.shape.empty()) p.shape.assign(request.num_draft_tokens, 1);
    p.tree.scheme = request.tree_shape.empty() ? SiblingScheme::iid : request.scheme;
    p.tree.draft_q.emplace_back();
    p.pipeline = ranked_tree(request) ? &ranking_pipeline_ : &pipeline_;
    return p;
  }

  // The call of the next depth's forward (p.logits sized for it).
  TreeLogitsCall next_call(Proposal& p) {
    p.logits.resize(static_cast<size_t>(p.tree.size() + 1) * vocab_size_);
    return TreeLogitsCall{session_.get(), p.request->context, &p.tree, p.logits.data()};
  }

  // After that forward: the frontier's rows processed and their children drawn.
  void grow(Proposal& p) {
    ++counters_.n_forward;
    const SamplerPipeline& pipeline = *p.pipeline;
    TokenTree& tree = p.tree;
    const int32_t branching = p.shape[p.depth++];
    std::vector<float> probs(p.logits.size());
    std::vector<int32_t> next_frontier;
    for (int32_t row : p.frontier) {
      float* q = probs.data() + static_cast<size_t>(row) * vocab_size_;
      // Row histories need the processed rows of ancestors (mirostat); those were stored in draft_q.
      const TokenHistory h =
          path_history(pipeline, *p.request->history, tree, row, [&](int32_t r) { return tree.draft_q[r].data(); });
      pipeline.process(p.logits.data() + static_cast<size_t>(row) * vocab_size_, h, q);
      for (Token c : draw_children(q, vocab_size_, branching, tree.scheme, p.request->rng, p.slot)) {
        tree.add(c, row - 1);
        tree.draft_q.emplace_back();
        next_frontier.push_back(tree.size());
      }
      std::vector<float>& recorded = tree.draft_q[row];
      if (mutant_on(Mutant::draft_q_from_raw_logits)) {
        const std::vector<double> raw =
            log_softmax(p.logits.data() + static_cast<size_t>(row) * vocab_size_, vocab_size_);
        recorded.resize(vocab_size_);
        for (int32_t x = 0; x < vocab_size_; ++x) recorded[x] = static_cast<float>(std::exp(raw[x]));
      } else {
        recorded.assign(q, q + vocab_size_);
      }
      if (stops_after_doubt(*p.request, doubt_law(p, row, q, h), tree)) next_frontier.clear();
    }
    p.frontier = std::move(next_frontier);
  }

  // The law a chain's draft from row `row` is doubted with (stops_after_doubt): the one it was drawn from, `q`, or,
  // when the draft samples at temperature 0 (a point mass, which never doubts), the row at temperature 1 (the ranking
  // pipeline's), as Hugging Face reads a greedy assistant's softmax. Either is a function of the drafts so far.
  const float* doubt_law(const Proposal& p, int32_t row, const float* q, const TokenHistory& h) {
    if (p.request->confidence_threshold <= 0.0f || p.pipeline->params().temperature != 0.0f) return q;
    doubt_row_.resize(static_cast<size_t>(vocab_size_));
    ranking_pipeline_.process(p.logits.data() + static_cast<size_t>(row) * vocab_size_, h, doubt_row_.data());
    return doubt_row_.data();
  }

  // On the device (propose_on_device): the next depth's forward, of which `out` gets the frontier's rows alone (the
  // nodes the last depth added, the tree's last rows; row 0 at the first depth), then the tokens drawn there added.
  TreeLogitsCall device_call(Proposal& p, float* out, bool out_on_gpu) {
    return TreeLogitsCall{session_.get(), p.request->context, &p.tree, out, out_on_gpu, first_frontier_row(p)};
  }
  // The frontier is the tree's last rows (add_drawn adds them in turn); a frontier that ran out (no law had mass)
  // asks for the last row, which nobody reads.
  static int64_t first_frontier_row(const Proposal& p) {
    const int64_t last = p.tree.size(), first = last + 1 - static_cast<int64_t>(p.frontier.size());
    if (p.frontier.empty()) return last;
    if (p.frontier.front() != first || p.frontier.back() != last)
      fail("model drafter: the frontier is not the tree's last rows");
    return first;
  }
  // drawn[k * branching + j]: child j of frontier row k, in the order draw_children draws them (its slots), added as
  // grow() adds them; -1 once a row's law ran out of mass (siblings without replacement), its later children not
  // drawn, that draw's slot spent as draw_children spends it. Then the next frontier and slot.
  void add_drawn(Proposal& p, const Token* drawn, int32_t branching) {
    ++counters_.n_forward;
    std::vector<int32_t> next_frontier;
    for (size_t k = 0; k < p.frontier.size(); ++k)
      for (int32_t j = 0; j < branching; ++j) {
        const Token t = drawn[k * branching + j];
        ++p.slot;
        if (t < 0) break;
        p.tree.add(t, p.frontier[k] - 1);
        next_frontier.push_back(p.tree.size());
      }
    p.frontier = std::move(next_frontier);
    ++p.depth;
  }
  // Fed drafting (propose_fed): the call of a depth whose frontier's tokens are still on the device, the newest nodes'
  // ids at `tokens` (none at the first depth), of proposal `round`.
  TreeLogitsCall fed_call(Proposal& p, float* out, bool out_on_gpu, const int32_t* tokens, int64_t newest,
                          uint64_t round) {
    TreeLogitsCall call = device_call(p, out, out_on_gpu);
    if (tokens) {
      call.device_tokens = tokens;
      call.device_tokens_from = p.tree.size() - newest;
    }
    call.pending_round = round;
    return call;
  }
  // `branching` pending children of every frontier row (their ids still on the device), in draw_children's order
  // and slots. Then the next frontier and slot.
  void add_pending(Proposal& p, int32_t branching) {
    ++counters_.n_forward;
    std::vector<int32_t> next_frontier;
    for (int32_t row : p.frontier)
      for (int32_t j = 0; j < branching; ++j) {
        ++p.slot;
        p.tree.add(kPendingToken, row - 1);
        next_frontier.push_back(p.tree.size());
      }
    p.frontier = std::move(next_frontier);
    ++p.depth;
  }
  // The pending tokens of round `round` known: the tree's, and the session's remembered tree's.
  void tokens_known(Proposal& p, const Token* tokens, uint64_t round) {
    std::copy(tokens, tokens + p.tree.size(), p.tree.tokens.begin());
    session_->tree_tokens_known(p.tree, round);
  }
  // A proposal of round `round` whose ids stay on the device, at `ids`: its tree (a chain cut by `doubts`, as
  // finish_on_device cuts it), pending until tokens_known(tree).
  TokenTree finish_with_ids_on_device(Proposal& p, const float* laws, const int32_t* ids, uint64_t round,
                                      const std::vector<float>& doubts) {
    pending_round_ = round;
    TokenTree tree = laws ? finish_on_device(p, laws, doubts) : finish(p);
    tree.device_tokens = ids;
    return tree;
  }
  // A tree of siblings without replacement comes back at its full shape, its nodes never drawn -1 (holes): they were
  // never proposed, and the session is told the placeholder its forwards read for them (TreeLogitsCall::device_tokens).
  void tokens_known(const TokenTree& tree) override {
    const auto holes = std::count(tree.tokens.begin(), tree.tokens.end(), Token{-1});
    counters_.n_draft_tokens -= holes;
    if (pending_round_ != 0) session_->tree_tokens_known(holes ? with_placeholders(tree) : tree, pending_round_);
    pending_round_ = 0;
  }
  // A proposal drawn at a full shape whose nodes never drawn are left out: `tree` (its laws at `laws`, in its rows).
  TokenTree finish_drawn_tree(Proposal& p, TokenTree tree, const float* laws) {
    tree.draft_q.clear();
    tree.device_q = laws;
    return counted(std::move(tree), p.start);
  }
  TokenTree finish_on_device(Proposal& p, const float* laws, const std::vector<float>& doubts = {}) {
    cut_to_request(p, doubts);
    p.tree.draft_q.clear();
    p.tree.device_q = laws;
    return counted(std::move(p.tree), p.start);
  }

  // A chain drawn at a batch's longest length (propose_on_device, propose_fed: chains of a moving K) cut to its own
  // request's K, and, where the request may stop on the draft's doubt, after the first draft whose value in `doubts`
  // (its probability under the law it was drawn from: chain_doubts) is below the threshold, keeping that draft, as
  // stops_after_doubt stops the CPU's chain. Its first K draws are a K chain's, key for key and law for law (the same
  // slots, from the same rows); K was set before any draw, and whether a draft is kept depends on the drafts before it
  // alone, so the cut chain is the one the CPU draws (verify/ALGORITHMS.md §1). Its forwards are counted as the CPU's,
  // one a depth of its own.
  void cut_to_request(Proposal& p, const std::vector<float>& doubts) {
    if (!p.request->tree_shape.empty() || mutant_on(Mutant::device_chains_not_cut)) return;
    size_t k = std::min(static_cast<size_t>(p.request->num_draft_tokens), p.tree.tokens.size());
    for (size_t d = 0; d < std::min(k, doubts.size()); ++d)
      if (doubts[d] < p.request->confidence_threshold) {
        // NOT exact under the mutant: the stop decided by the draft it drops (stops_after_doubt's).
        k = mutant_on(Mutant::confidence_stop_drops_draft) ? d : d + 1;
        break;
      }
    if (p.tree.tokens.size() <= k) return;
    counters_.n_forward -= static_cast<int64_t>(p.tree.tokens.size() - k);
    p.tree.tokens.resize(k);
    p.tree.parent.resize(k);
    if (p.tree.draft_q.size() > k + 1) p.tree.draft_q.resize(k + 1);
  }

  TokenTree finish(Proposal& p) {
    // Deterministic candidates are verified as point masses: their recorded q is not a sampling law.
    if (p.tree.scheme == SiblingScheme::deterministic) p.tree.draft_q.clear();
    p.tree.draft_q.resize(p.tree.size() + 1);
    return counted(std::move(p.tree), p.start);
  }

  TokenTree propose(const DraftRequest& request) override {
    Proposal p = start(request);
    while (!p.done()) {
      const TreeLogitsCall call = next_call(p);
      session_->tree_logits(*call.context, *call.tree, call.out);
      grow(p);
    }
    return finish(p);
  }

 private:
  std::unique_ptr<ModelSession> session_;
  const SamplerPipeline& pipeline_;
  const SamplerPipeline& ranking_pipeline_;
  int32_t vocab_size_;
  uint64_t pending_round_ = 0;    // the round of the last proposal whose ids stayed on the device, until told them
  std::vector<float> doubt_row_;  // doubt_law's row at temperature 1
};

ModelDrafterFactory::ModelDrafterFactory(std::shared_ptr<const LanguageModel> model, SamplingParams draft_params)
    : model_(std::move(model)),
      pipeline_(draft_params, model_->vocab_size()),
      ranking_pipeline_(at_unit_temperature(draft_params), model_->vocab_size()) {}

std::unique_ptr<Drafter> ModelDrafterFactory::create() const {
  return std::make_unique<ModelDrafter>(*model_, pipeline_, ranking_pipeline_);
}

std::optional<SamplingParams> ModelDrafterFactory::device_draw_params() const {
  if (unsupported_on_cuda(pipeline_.params())) return std::nullopt;
  return pipeline_.params();
}

bool ModelDrafterFactory::draws_on_device(const std::vector<DraftRequest>& requests) const {
  if (requests.empty() || !requests[0].device) return false;
  const DraftRequest& first = requests[0];
  // A chain that may stop on the draft's doubt is drawn whole and cut by its drafts' probabilities under the laws the
  // device keeps (chain_doubts). A greedy draft doubts with its law at temperature 1 (ModelDrafter::doubt_law), which
  // the device does not keep: drawn on the host.
  if (first.confidence_threshold > 0.0f && pipeline_.params().temperature == 0.0f) return false;
  // Chains (of any lengths: drawn at the longest, each cut to its own), or trees of one shape whose siblings are
  // i.i.d. draws (a sampler's draws, each from its own key), ranked (a processed row's most probable tokens) or drawn
  // without replacement.
  const bool chain = first.tree_shape.empty() && first.num_draft_tokens >= 1;
  const bool iid_tree = !first.tree_shape.empty() && first.scheme == SiblingScheme::iid;
  // Every depth has children (a shape of 0 children would end the CPU's proposal early); a ranked node, or one drawn
  // without replacement, at most what the device takes (the CPU's stop at V).
  const int32_t most = iid_tree ? std::numeric_limits<int32_t>::max() : first.device->most_ranked_children();
  const bool branches =
      std::all_of(first.tree_shape.begin(), first.tree_shape.end(), [&](int32_t b) { return b >= 1 && b <= most; });
  return (chain || (!first.tree_shape.empty() && branches)) && !unsupported_on_cuda(pipeline_.params()) &&
         std::all_of(requests.begin(), requests.end(), [&](const DraftRequest& r) {
           return r.device == first.device && r.tree_shape == first.tree_shape &&
                  (chain ? r.num_draft_tokens >= 1 : r.scheme == first.scheme);
         });
}

// Whether a draft model's chains and trees are drawn fed (propose_fed): the model reads pending
// token ids where the draws leave them, in the memory its logits go to (the GPU's for a model writing there on the
// verifier's stream; host memory for a model on the host under cuda-host). Its rows' histories need no token on the
// host: penalties count the pending ids on the device (TokenHistory::pending_ids), and mirostat and constraints never
// draw on the device.
namespace {
bool draws_fed(const LanguageModel& model, const BatchVerifier& device, bool out_on_gpu) {
  return (out_on_gpu || device.device() == Device::cuda_host) && model.reads_device_tokens_in(out_on_gpu);
}

// The probability each draft of a chain drawn on the device had under the law it was drawn from (draft d of sequence i
// from row d of its draft laws), up to its request's own K, for the chains whose requests may stop on the draft's
// doubt; none for the others. One gather and one download for the batch, of the drafts' tokens known on the host
// (BatchVerifier::draft_law_values) or of their ids kept on the device (`kept`: kept_law_values, before the target's
// forward and verification read them).
std::vector<std::vector<float>> chain_doubts(BatchVerifier& device,
                                             const std::vector<ModelDrafter::Proposal>& proposals, bool kept) {
  std::vector<DraftLawEntry> entries;
  for (size_t i = 0; i < proposals.size(); ++i) {
    const ModelDrafter::Proposal& p = proposals[i];
    if (p.request->confidence_threshold <= 0.0f || !p.request->tree_shape.empty()) continue;
    const int32_t own = std::min(p.request->num_draft_tokens, p.tree.size());
    for (int32_t d = 0; d < own; ++d)
      entries.push_back(
          DraftLawEntry{static_cast<int64_t>(i), d, kept ? Token{-1} : p.tree.tokens[static_cast<size_t>(d)], d});
  }
  const std::vector<float> values = kept ? device.kept_law_values(entries) : device.draft_law_values(entries);
  std::vector<std::vector<float>> doubts(proposals.size());
  for (size_t e = 0; e < entries.size(); ++e) doubts[static_cast<size_t>(entries[e].sequence)].push_back(values[e]);
  return doubts;
}

// The shape a batch's requests are drawn at on the device: their tree's, or a chain of the longest K among them.
std::vector<int32_t> batch_draft_shape(const std::vector<DraftRequest>& requests) {
  if (!requests[0].tree_shape.empty()) return requests[0].tree_shape;
  int32_t longest = 0;
  for (const DraftRequest& r : requests) longest = std::max(longest, r.num_draft_tokens);
  return std::vector<int32_t>(static_cast<size_t>(longest), 1);
}

// Child j of the k-th frontier row (row `frontier_row` of a sequence whose tree has `nodes` nodes so far), drawn i.i.d.
// from `row`'s logits: its key is draw_children's slot (`first_slot`, then a row's children in turn), and its processed
// row is kept at the frontier row's law (the first child) or, as the launch's scratch, at the row of the node it
// becomes (no two draws of a launch may share a row; the next depth rewrites it, or it is a leaf's, which
// verification does not read).
DraftDraw iid_child(DeviceDraw row, int64_t sequence, const StepRandom& rng, uint32_t first_slot, int32_t frontier_row,
                    int32_t nodes, int64_t k, int32_t j, int32_t branching) {
  const int64_t child = k * branching + j;
  row.key =
      rng.key(RandomRole::draft,
              first_slot + static_cast<uint32_t>(mutant_on(Mutant::device_siblings_share_key) ? child - j : child));
  return DraftDraw{row, sequence, j == 0 ? frontier_row : nodes + 1 + static_cast<int32_t>(child)};
}
}  // namespace

// Chains and trees drawn on the device: depth by depth, one forward of the draft model for the batch,
// written into the verifier's logits buffer where it can (cuda-host: any model; cuda: a model on the GPU, on the stream
// the verifier follows), then one launch of the fused sampler with the draft's pipeline drawing every child of every
// frontier row of every sequence, keeping each processed row where verification reads it
// (BatchVerifier::draft_laws). Only the drawn tokens come back. The draws are the CPU
// path's: the same keys (RandomRole::draft, the slots draw_children takes: frontier rows in order, a row's children
// in turn) and sample_categorical's rule. Ranked trees the same way, each frontier row processed once by the ranking
// pipeline and its children chosen by rank (BatchVerifier::rank_drafts); they keep no law. Siblings without
// replacement: each frontier row's law kept, its siblings drawn from it in turn (BatchVerifier::draw_siblings).
std::vector<TokenTree> ModelDrafterFactory::propose_on_device(const std::vector<ModelDrafter*>& own,
                                                              const std::vector<DraftRequest>& requests) const {
  BatchVerifier& device = *requests[0].device;
  const std::vector<int32_t> shape = batch_draft_shape(requests);
  const SiblingScheme scheme = requests[0].tree_shape.empty() ? SiblingScheme::iid : requests[0].scheme;
  const bool ranked = scheme == SiblingScheme::deterministic;
  // N: the nodes of a full tree (i.i.d. and ranked siblings always come in their count; siblings drawn without
  // replacement stop where a law runs out of mass, so those trees may be smaller, and differ between sequences).
  const int32_t nodes = static_cast<int32_t>(tree_shape_nodes(shape));
  const int64_t B = static_cast<int64_t>(own.size()), V = model_->vocab_size();
  const bool out_on_gpu = device.device() == Device::cuda && model_->writes_gpu_logits() &&
                          model_->device_stream() == device.followed_stream();
  const bool in_place = device.device() == Device::cuda_host || out_on_gpu;
  const LogitsAt at = in_place ? LogitsAt::device : LogitsAt::host;
  const SamplerPipeline& pipeline = ranked ? ranking_pipeline_ : pipeline_;
  if (draws_fed(*model_, device, out_on_gpu)) return propose_fed(own, requests, out_on_gpu);
  float* const laws = ranked ? nullptr : device.draft_laws(B, nodes);
  std::vector<ModelDrafter::Proposal> proposals;
  for (int64_t i = 0; i < B; ++i) proposals.push_back(own[i]->start(requests[i]));
  std::vector<float> host_rows;  // when the model writes to the host: the frontier rows, uploaded by draw_drafts
  for (size_t d = 0; d < shape.size(); ++d) {
    const int32_t branching = shape[d];
    // Sequence i's frontier rows from row first_row[i] of the depth's logits, in the frontier's order (a frontier
    // that ran out still gets the row its call writes).
    std::vector<int64_t> first_row(static_cast<size_t>(B) + 1, 0);
    for (int64_t i = 0; i < B; ++i)
      first_row[i + 1] = first_row[i] + std::max<int64_t>(static_cast<int64_t>(proposals[i].frontier.size()), 1);
    float* out = in_place ? device.device_logits(first_row[B]) : nullptr;
    if (!in_place) {
      host_rows.resize(static_cast<size_t>(first_row[B] * V));
      out = host_rows.data();
    }
    std::vector<TreeLogitsCall> calls;
    for (int64_t i = 0; i < B; ++i)
      calls.push_back(own[i]->device_call(proposals[i], out + first_row[i] * V, out_on_gpu));
    model_->batch_tree_logits(calls);
    // The path history of each frontier row (histories[i][k]). Mirostat, the one stage whose history reads its
    // ancestors' laws, is refused on the device: no law is read.
    std::vector<std::vector<TokenHistory>> histories(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i)
      for (int32_t row : proposals[i].frontier)
        histories[i].push_back(path_history(pipeline, *requests[i].history, proposals[i].tree, row,
                                            [](int32_t) -> const float* { return nullptr; }));
    const auto frontier_row = [&](int64_t i, size_t k, const RandomKey& key) {
      return DeviceDraw{out + (first_row[i] + static_cast<int64_t>(k)) * V, &histories[i][k], key};
    };
    // Sequence i's children: its frontier rows in order, `branching` each, in the order add_drawn takes them.
    std::vector<Token> tokens;
    if (ranked) {
      std::vector<DeviceDraw> rows;
      for (int64_t i = 0; i < B; ++i)
        for (size_t k = 0; k < proposals[i].frontier.size(); ++k) rows.push_back(frontier_row(i, k, RandomKey{}));
      tokens = device.rank_drafts(pipeline, rows, branching, at);
    } else if (scheme == SiblingScheme::without_replacement) {
      // Each frontier row's law kept at its row; its siblings drawn from it in turn, every sequence's from its next
      // draft slots (a draw that finds no mass left takes one too, as draw_children's).
      std::vector<DraftDraw> rows;
      std::vector<double> uniforms;
      for (int64_t i = 0; i < B; ++i) {
        const size_t n = proposals[i].frontier.size() * static_cast<size_t>(branching);
        for (size_t a = 0; a < n; ++a)
          uniforms.push_back(
              requests[i].rng.key(RandomRole::draft, proposals[i].slot + static_cast<uint32_t>(a)).uniform());
        for (size_t k = 0; k < proposals[i].frontier.size(); ++k)
          rows.push_back(DraftDraw{frontier_row(i, k, RandomKey{}), i, proposals[i].frontier[k]});
      }
      tokens = device.draw_siblings(pipeline, rows, branching, uniforms, at);
    } else {
      // Every child of the depth in one launch (iid_child).
      std::vector<DraftDraw> draws;
      for (int64_t i = 0; i < B; ++i)
        for (size_t k = 0; k < proposals[i].frontier.size(); ++k)
          for (int32_t j = 0; j < branching; ++j)
            draws.push_back(iid_child(frontier_row(i, k, RandomKey{}), i, requests[i].rng, proposals[i].slot,
                                      proposals[i].frontier[k], proposals[i].tree.size(), static_cast<int64_t>(k), j,
                                      branching));
      tokens = device.draw_drafts(pipeline, draws, at);
    }
    size_t next = 0;
    for (int64_t i = 0; i < B; ++i) {
      const size_t n = proposals[i].frontier.size() * static_cast<size_t>(branching);
      own[i]->add_drawn(proposals[i], tokens.data() + next, branching);
      next += n;
    }
  }
  const std::vector<std::vector<float>> doubts = chain_doubts(device, proposals, false);
  std::vector<TokenTree> out;
  for (int64_t i = 0; i < B; ++i)
    out.push_back(ranked ? own[i]->finish(proposals[i])
                         : own[i]->finish_on_device(proposals[i], laws + i * (nodes + 1) * V, doubts[i]));
  return out;
}

// Chains and trees drawn fed: every depth's draws are known before the first forward (their keys are the slots
// draw_children takes, their laws' rows the nodes', their logits the frontier rows each depth's forward writes side by
// side; a ranked row gives all its children, as min(V, 256) bounds them; siblings without replacement are drawn at the
// full shape, their slots carried across the depths on the device), so they are uploaded at once
// (BatchVerifier::plan_drafts, plan_ranked, plan_siblings), and each depth's forward reads the ids of the nodes the
// depth before drew where that depth's launches left them (TreeLogitsCall::device_tokens). On a GPU the host enqueues
// the whole proposal without waiting and waits once, for every depth's ids, at the end, or not at all when they may
// stay on the device (DraftRequest::ids_may_stay_on_device: BatchVerifier::keep_planned_ids, the trees' device_tokens;
// siblings without replacement then stay at their full shape, with holes; a chain that may stop on the draft's doubt
// then waits for its drafts' probabilities alone, chain_doubts); the draws are propose_on_device's, key for key.
std::vector<TokenTree> ModelDrafterFactory::propose_fed(const std::vector<ModelDrafter*>& own,
                                                        const std::vector<DraftRequest>& requests,
                                                        bool out_on_gpu) const {
  static std::atomic<uint64_t> rounds{0};
  const uint64_t round = ++rounds;
  BatchVerifier& device = *requests[0].device;
  const std::vector<int32_t> shape = batch_draft_shape(requests);
  const bool ranked = !requests[0].tree_shape.empty() && requests[0].scheme == SiblingScheme::deterministic;
  const bool siblings = !requests[0].tree_shape.empty() && requests[0].scheme == SiblingScheme::without_replacement;
  const int32_t nodes = static_cast<int32_t>(tree_shape_nodes(shape));
  const int64_t B = static_cast<int64_t>(own.size()), V = model_->vocab_size();
  const size_t K = shape.size();
  // Depth d: f[d] frontier rows a sequence, n[d] = f[d] * shape[d] children, before[d] nodes before it.
  std::vector<int64_t> f(K), n(K), before(K + 1, 0);
  for (size_t d = 0; d < K; ++d) {
    f[d] = d == 0 ? 1 : n[d - 1];
    n[d] = f[d] * shape[d];
    before[d + 1] = before[d] + n[d];
  }
  float* const laws = ranked ? nullptr : device.draft_laws(B, nodes);
  // The logits buffer at its largest depth's rows before the plan: later depths take fewer, so it never moves.
  const float* const logits = device.device_logits(B * *std::max_element(f.begin(), f.end()));
  // Frontier row k's history at depth d: its path's ids are pending, at the plan's draws (node m of depth e of sequence
  // i is draw B * before[e] + i * n[e] + m, a ranked plan's child likewise), so a penalised pipeline counts them on the
  // device; its length is read for min_tokens.
  std::vector<std::vector<std::vector<TokenHistory>>> histories(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i)
    for (size_t d = 0; d < K; ++d) {
      histories[i].emplace_back();
      for (int64_t k = 0; k < f[d]; ++k) {
        std::vector<int32_t> path;
        for (int64_t e = static_cast<int64_t>(d) - 1, m = k; e >= 0; m /= shape[e], --e)
          path.push_back(static_cast<int32_t>(B * before[e] + i * n[e] + m));
        std::reverse(path.begin(), path.end());
        histories[i][d].push_back(
            pending_history(ranked ? ranking_pipeline_ : pipeline_, *requests[i].history, std::move(path)));
      }
    }
  // A ranked row: processed once by the ranking pipeline, its children its best tokens (no key, no law).
  std::vector<std::vector<DeviceDraw>> ranked_rows(ranked ? K : 0);
  for (size_t d = 0; d < ranked_rows.size(); ++d)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 0; k < f[d]; ++k)
        ranked_rows[d].push_back(DeviceDraw{logits + (i * f[d] + k) * V, &histories[i][d][k], RandomKey{}});
  // Siblings without replacement: a frontier row's law kept at its node's row, its siblings drawn from it; every
  // depth at the full shape, sequence i's draws taking its draft slots in turn across the depths (at most one a node),
  // a row under a node never drawn drawing nothing (BatchVerifier::plan_siblings).
  std::vector<std::vector<DraftDraw>> sibling_rows(siblings ? K : 0);
  std::vector<std::vector<double>> uniforms(siblings ? B : 0);
  for (size_t i = 0; i < uniforms.size(); ++i)
    for (int32_t a = 0; a < nodes; ++a)
      uniforms[i].push_back(requests[i].rng.key(RandomRole::draft, static_cast<uint32_t>(a)).uniform());
  for (size_t d = 0; d < sibling_rows.size(); ++d)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 0; k < f[d]; ++k) {
        const int32_t frontier_row = static_cast<int32_t>(d == 0 ? 0 : before[d] + 1 - f[d] + k);
        const DeviceDraw row{logits + (i * f[d] + k) * V, &histories[i][d][k], RandomKey{}};
        sibling_rows[d].push_back(DraftDraw{row, i, frontier_row});
      }
  std::vector<std::vector<DraftDraw>> depths(ranked || siblings ? 0 : K);
  for (size_t d = 0; d < depths.size(); ++d)
    for (int64_t i = 0; i < B; ++i)
      for (int64_t k = 0; k < f[d]; ++k)
        for (int32_t j = 0; j < shape[d]; ++j) {
          // The frontier's rows: row 0 first, then the nodes the depth before added (the tree's last rows); the slots
          // so far, one a node.
          const int32_t frontier_row = static_cast<int32_t>(d == 0 ? 0 : before[d] + 1 - f[d] + k);
          const DeviceDraw row{logits + (i * f[d] + k) * V, &histories[i][d][k], RandomKey{}};
          depths[d].push_back(iid_child(row, i, requests[i].rng, static_cast<uint32_t>(before[d]), frontier_row,
                                        static_cast<int32_t>(before[d]), k, j, shape[d]));
        }
  if (ranked)
    device.plan_ranked(ranking_pipeline_, ranked_rows, shape);
  else if (siblings)
    device.plan_siblings(pipeline_, sibling_rows, shape, uniforms);
  else
    device.plan_drafts(pipeline_, depths);
  std::vector<ModelDrafter::Proposal> proposals;
  for (int64_t i = 0; i < B; ++i) proposals.push_back(own[i]->start(requests[i]));
  const int32_t* drawn = nullptr;  // the depth before's ids, sequence by sequence
  for (size_t d = 0; d < K; ++d) {
    float* const out = device.device_logits(B * f[d]);
    const int64_t fed_rows = d == 0 ? 0 : n[d - 1];
    const int32_t* const fed =
        mutant_on(Mutant::fed_drafts_read_first_depth) && d > 1 ? drawn - B * before[d - 1] : drawn;
    std::vector<TreeLogitsCall> calls;
    for (int64_t i = 0; i < B; ++i)
      calls.push_back(own[i]->fed_call(proposals[i], out + i * f[d] * V, out_on_gpu, fed ? fed + i * fed_rows : nullptr,
                                       fed_rows, round));
    model_->batch_tree_logits(calls);
    drawn = device.launch_planned(d);
    for (int64_t i = 0; i < B; ++i) own[i]->add_pending(proposals[i], shape[d]);
  }
  if (requests[0].ids_may_stay_on_device) {
    // No wait for the ids: the target's forward and verification read them on the device, sequence by sequence
    // (siblings without replacement at their full shape, a node never drawn a hole that verification leaves out). A
    // chain that may stop on the draft's doubt waits for its drafts' probabilities alone, to be cut.
    const int32_t* const ids = device.keep_planned_ids(B);
    const std::vector<std::vector<float>> doubts = chain_doubts(device, proposals, true);
    std::vector<TokenTree> out;
    for (int64_t i = 0; i < B; ++i)
      out.push_back(own[i]->finish_with_ids_on_device(proposals[i], ranked ? nullptr : laws + i * (nodes + 1) * V,
                                                      ids + i * nodes, round, doubts[i]));
    return out;
  }
  // One wait: every depth's ids, depth d's of sequence i at B * before[d] + i * n[d].
  const std::vector<Token> tokens = device.planned_tokens();
  // Node m of a full shape of siblings without replacement (depth d, frontier row k of it) has its parent at row
  // parent_row[m].
  std::vector<int32_t> parent_row(siblings ? static_cast<size_t>(nodes) : 0);
  for (size_t d = 0; d < K && siblings; ++d)
    for (int64_t t = 0; t < n[d]; ++t)
      parent_row[static_cast<size_t>(before[d] + t)] =
          static_cast<int32_t>(d == 0 ? 0 : before[d] + 1 - f[d] + t / shape[d]);
  std::vector<std::vector<Token>> own_tokens(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) {
    for (size_t d = 0; d < K; ++d) {
      const auto first = tokens.begin() + B * before[d] + i * n[d];
      own_tokens[i].insert(own_tokens[i].end(), first, first + n[d]);
    }
    if (!siblings) own[i]->tokens_known(proposals[i], own_tokens[i].data(), round);
  }
  const std::vector<std::vector<float>> doubts = chain_doubts(device, proposals, false);
  std::vector<TokenTree> out;
  for (int64_t i = 0; i < B; ++i) {
    if (!siblings) {
      out.push_back(ranked ? own[i]->finish(proposals[i])
                           : own[i]->finish_on_device(proposals[i], laws + i * (nodes + 1) * V, doubts[i]));
      continue;
    }
    // The full shape's ids (-1: never drawn): the session is told what its forwards read for them.
    const std::vector<Token>& drawn = own_tokens[static_cast<size_t>(i)];
    own[i]->tokens_known(proposals[i], with_placeholders(drawn).data(), round);
    // The tree of the nodes drawn, in the plan's order (the CPU's: a depth's drawn nodes are the next frontier, each
    // row's children in turn), each law moved to its row there.
    TokenTree tree;
    tree.scheme = SiblingScheme::without_replacement;
    std::vector<int32_t> row(static_cast<size_t>(nodes) + 1, -1);  // the full shape's row -> the tree's
    row[0] = 0;
    std::vector<std::pair<int32_t, int32_t>> moves;
    for (int32_t m = 0; m < nodes; ++m) {
      if (drawn[static_cast<size_t>(m)] < 0) continue;
      const int32_t parent = row[static_cast<size_t>(parent_row[static_cast<size_t>(m)])];
      if (parent < 0) fail(description(), ": a fed tree's node ", m, " was drawn under a node never drawn");
      tree.add(drawn[static_cast<size_t>(m)], parent - 1);
      row[static_cast<size_t>(m) + 1] = tree.size();
      if (m < before[K - 1]) moves.emplace_back(m + 1, tree.size());  // a node with children: its law
    }
    device.move_draft_laws(i, moves);
    out.push_back(own[i]->finish_drawn_tree(proposals[i], std::move(tree), laws + i * (nodes + 1) * V));
  }
  return out;
}

std::vector<TokenTree> ModelDrafterFactory::propose_batch(const std::vector<Drafter*>& drafters,
                                                          const std::vector<DraftRequest>& requests) const {
  if (drafters.size() != requests.size())
    fail("propose_batch: ", drafters.size(), " drafters for ", requests.size(), " requests");
  std::vector<ModelDrafter*> own;
  for (Drafter* d : drafters) {
    auto* m = dynamic_cast<ModelDrafter*>(d);
    if (!m) fail(description(), ": propose_batch was given a drafter of another kind");
    own.push_back(m);
  }
  if (draws_on_device(requests)) return propose_on_device(own, requests);
  std::vector<ModelDrafter::Proposal> proposals;
  for (size_t i = 0; i < own.size(); ++i) proposals.push_back(own[i]->start(requests[i]));
  // Depth by depth: one forward of the draft model for every proposal still growing.
  for (;;) {
    std::vector<size_t> growing;
    std::vector<TreeLogitsCall> calls;
    for (size_t i = 0; i < own.size(); ++i)
      if (!proposals[i].done()) {
        growing.push_back(i);
        calls.push_back(own[i]->next_call(proposals[i]));
      }
    if (growing.empty()) break;
    model_->batch_tree_logits(calls);
    for (size_t i : growing) own[i]->grow(proposals[i]);
  }
  std::vector<TokenTree> out;
  for (size_t i = 0; i < own.size(); ++i) out.push_back(own[i]->finish(proposals[i]));
  return out;
}

}  // namespace specula
