#include "draft/model_drafter.h"

#include <algorithm>
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
    }
    p.frontier = std::move(next_frontier);
  }

  // On the device (propose_on_device): the next depth's forward written to `out` (every row of the tree so far),
  // then the frontier's token drawn there added.
  TreeLogitsCall device_call(Proposal& p, float* out, bool out_on_gpu) {
    return TreeLogitsCall{session_.get(), p.request->context, &p.tree, out, out_on_gpu};
  }
  // drawn[k * branching + j]: child j of frontier row k, in the order draw_children draws them (its slots), added as
  // grow() adds them; then the next frontier and slot.
  void add_drawn(Proposal& p, const Token* drawn, int32_t branching) {
    ++counters_.n_forward;
    std::vector<int32_t> next_frontier;
    for (size_t k = 0; k < p.frontier.size(); ++k)
      for (int32_t j = 0; j < branching; ++j) {
        p.tree.add(drawn[k * branching + j], p.frontier[k] - 1);
        next_frontier.push_back(p.tree.size());
        ++p.slot;
      }
    p.frontier = std::move(next_frontier);
    ++p.depth;
  }
  TokenTree finish_on_device(Proposal& p, const float* laws) {
    p.tree.draft_q.clear();
    p.tree.device_q = laws;
    return counted(std::move(p.tree), p.start);
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
};

ModelDrafterFactory::ModelDrafterFactory(std::shared_ptr<const LanguageModel> model, SamplingParams draft_params)
    : model_(std::move(model)),
      pipeline_(draft_params, model_->vocab_size()),
      ranking_pipeline_(at_unit_temperature(draft_params), model_->vocab_size()) {}

std::unique_ptr<Drafter> ModelDrafterFactory::create() const {
  return std::make_unique<ModelDrafter>(*model_, pipeline_, ranking_pipeline_);
}

bool ModelDrafterFactory::draws_on_device(const std::vector<DraftRequest>& requests) const {
  if (requests.empty() || !requests[0].device) return false;
  const DraftRequest& first = requests[0];
  // Chains of one length, or trees of one shape whose siblings are i.i.d. draws (a sampler's draws, each from its
  // own key) or ranked (a processed row's most probable tokens); siblings drawn without replacement are not.
  const bool chain = first.tree_shape.empty() && first.num_draft_tokens >= 1;
  const bool iid_tree = !first.tree_shape.empty() && first.scheme == SiblingScheme::iid;
  const bool ranked = ranked_tree(first);
  // Every depth has children (a shape of 0 children would end the CPU's proposal early), and a ranked node all it
  // asks for (the CPU's ranking stops at V).
  const int32_t most = ranked ? first.device->most_ranked_children() : std::numeric_limits<int32_t>::max();
  const bool branches =
      std::all_of(first.tree_shape.begin(), first.tree_shape.end(), [&](int32_t b) { return b >= 1 && b <= most; });
  return (chain || ((iid_tree || ranked) && branches)) && !unsupported_on_cuda(pipeline_.params()) &&
         std::all_of(requests.begin(), requests.end(), [&](const DraftRequest& r) {
           return r.device == first.device && r.tree_shape == first.tree_shape &&
                  (chain ? r.num_draft_tokens == first.num_draft_tokens : r.scheme == first.scheme);
         });
}

// Chains, i.i.d. and ranked trees drawn on the device: depth by depth, one forward of the draft model for the batch,
// written into the verifier's logits buffer where it can (cuda-host: any model; cuda: a model on the GPU, on the stream
// the verifier follows), then one launch of the fused sampler with the draft's pipeline drawing every child of every
// frontier row of every sequence, keeping each processed row where verification reads it
// (BatchVerifier::draft_laws). Only the drawn tokens come back. The draws are the CPU
// path's: the same keys (RandomRole::draft, the slots draw_children takes: frontier rows in order, a row's children
// in turn) and sample_categorical's rule. Ranked trees the same way, each frontier row processed once by the ranking
// pipeline and its children chosen by rank (BatchVerifier::rank_drafts); they keep no law.
std::vector<TokenTree> ModelDrafterFactory::propose_on_device(const std::vector<ModelDrafter*>& own,
                                                              const std::vector<DraftRequest>& requests) const {
  BatchVerifier& device = *requests[0].device;
  const std::vector<int32_t> shape = draft_shape(requests[0]);
  // N: every sequence's tree is full (i.i.d. siblings always draw their count).
  const int32_t nodes = static_cast<int32_t>(tree_shape_nodes(shape));
  const int64_t B = static_cast<int64_t>(own.size()), V = model_->vocab_size();
  const bool out_on_gpu = device.device() == Device::cuda && model_->writes_gpu_logits() &&
                          model_->device_stream() == device.followed_stream();
  const bool in_place = device.device() == Device::cuda_host || out_on_gpu;
  const bool ranked = ranked_tree(requests[0]);
  const SamplerPipeline& pipeline = ranked ? ranking_pipeline_ : pipeline_;
  float* const laws = ranked ? nullptr : device.draft_laws(B, nodes);
  std::vector<ModelDrafter::Proposal> proposals;
  for (int64_t i = 0; i < B; ++i) proposals.push_back(own[i]->start(requests[i]));
  std::vector<float> host_rows;  // when the model writes to the host: every sequence's rows, uploaded by draw_drafts
  for (size_t d = 0; d < shape.size(); ++d) {
    const int64_t rows = proposals[0].tree.size() + 1;  // the tree so far, the same shape in every sequence
    const std::vector<int32_t> frontier = proposals[0].frontier;
    const int32_t branching = shape[d];
    float* out = in_place ? device.device_logits(B * rows) : nullptr;
    if (!in_place) {
      host_rows.resize(static_cast<size_t>(B * rows * V));
      out = host_rows.data();
    }
    std::vector<TreeLogitsCall> calls;
    for (int64_t i = 0; i < B; ++i) calls.push_back(own[i]->device_call(proposals[i], out + i * rows * V, out_on_gpu));
    model_->batch_tree_logits(calls);
    // Every child of the depth in one launch: for sequence i, frontier row k and child j, its slot among
    // draw_children's (a row's children in turn), and where its processed row goes. The first child's is row k's law,
    // which verification reads; a later child's, the same law again, goes to the row of the node that child becomes
    // (it is scratch: no two draws of a launch may share a row), a row whose own law, if it has children, the next
    // depth writes and which, if it is a leaf, verification does not read.
    std::vector<std::vector<TokenHistory>> histories(frontier.size());  // [k][i]
    std::vector<DraftDraw> draws;
    for (size_t k = 0; k < frontier.size(); ++k) {
      const int32_t row = frontier[k];
      // Mirostat, the one stage whose history reads its ancestors' laws, is refused on the device: no law is read.
      histories[k].reserve(static_cast<size_t>(B));
      for (int64_t i = 0; i < B; ++i)
        histories[k].push_back(path_history(pipeline, *requests[i].history, proposals[i].tree, row,
                                            [](int32_t) -> const float* { return nullptr; }));
    }
    const LogitsAt at = in_place ? LogitsAt::device : LogitsAt::host;
    // Sequence i's children are the i-th run of frontier.size() * branching tokens, in the order add_drawn takes them.
    const size_t per_sequence = frontier.size() * static_cast<size_t>(branching);
    if (ranked) {
      std::vector<DeviceDraw> ranked_rows;
      for (int64_t i = 0; i < B; ++i)
        for (size_t k = 0; k < frontier.size(); ++k)
          ranked_rows.push_back(
              DeviceDraw{out + (i * rows + frontier[k]) * V, &histories[k][static_cast<size_t>(i)], RandomKey{}});
      const std::vector<Token> tokens = device.rank_drafts(pipeline, ranked_rows, branching, at);
      for (int64_t i = 0; i < B; ++i)
        own[i]->add_drawn(proposals[i], tokens.data() + static_cast<size_t>(i) * per_sequence, branching);
      continue;
    }
    const int32_t next_node = proposals[0].tree.size() + 1;  // the row of the depth's first new node
    for (int64_t i = 0; i < B; ++i)
      for (size_t k = 0; k < frontier.size(); ++k)
        for (int32_t j = 0; j < branching; ++j) {
          const uint32_t child = static_cast<uint32_t>(k) * branching + j;
          const uint32_t slot = proposals[i].slot + (mutant_on(Mutant::device_siblings_share_key) ? child - j : child);
          const int32_t law_row = j == 0 ? frontier[k] : next_node + static_cast<int32_t>(child);
          draws.push_back(
              DraftDraw{DeviceDraw{out + (i * rows + frontier[k]) * V, &histories[k][static_cast<size_t>(i)],
                                   requests[i].rng.key(RandomRole::draft, slot)},
                        i, law_row});
        }
    const std::vector<Token> tokens = device.draw_drafts(pipeline, draws, at);
    for (int64_t i = 0; i < B; ++i)
      own[i]->add_drawn(proposals[i], tokens.data() + static_cast<size_t>(i) * per_sequence, branching);
  }
  std::vector<TokenTree> out;
  for (int64_t i = 0; i < B; ++i)
    out.push_back(ranked ? own[i]->finish(proposals[i])
                         : own[i]->finish_on_device(proposals[i], laws + i * (nodes + 1) * V));
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
