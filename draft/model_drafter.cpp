#include "draft/model_drafter.h"

#include <chrono>

#include "draft/candidate_sampling.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/sampling/logprobs.h"
#include "verify/verifiers/target_rows.h"

namespace specula {
namespace {

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

  TokenTree propose(const DraftRequest& request) override {
    const auto start = std::chrono::steady_clock::now();
    std::vector<int32_t> shape = request.tree_shape;
    if (shape.empty()) shape.assign(request.num_draft_tokens, 1);
    TokenTree tree;
    tree.scheme = request.tree_shape.empty() ? SiblingScheme::iid : request.scheme;
    tree.draft_q.emplace_back();
    std::vector<int32_t> frontier = {0};  // rows whose children are drawn next
    uint32_t slot = 0;
    const SamplerPipeline& pipeline = ranked_tree(request) ? ranking_pipeline_ : pipeline_;
    for (int32_t branching : shape) {
      // One draft forward per depth: logits for every row of the tree so far.
      std::vector<float> logits(static_cast<size_t>(tree.size() + 1) * vocab_size_);
      session_->tree_logits(*request.context, tree, logits.data());
      ++counters_.n_forward;
      std::vector<float> probs(logits.size());
      std::vector<int32_t> next_frontier;
      for (int32_t row : frontier) {
        float* q = probs.data() + static_cast<size_t>(row) * vocab_size_;
        // Row histories need the processed rows of ancestors (mirostat); those were stored in draft_q.
        const TokenHistory h =
            path_history(pipeline, *request.history, tree, row, [&](int32_t r) { return tree.draft_q[r].data(); });
        pipeline.process(logits.data() + static_cast<size_t>(row) * vocab_size_, h, q);
        for (Token c : draw_children(q, vocab_size_, branching, tree.scheme, request.rng, slot)) {
          tree.add(c, row - 1);
          tree.draft_q.emplace_back();
          next_frontier.push_back(tree.size());
        }
        std::vector<float>& recorded = tree.draft_q[row];
        if (mutant_on(Mutant::draft_q_from_raw_logits)) {
          const std::vector<double> raw =
              log_softmax(logits.data() + static_cast<size_t>(row) * vocab_size_, vocab_size_);
          recorded.resize(vocab_size_);
          for (int32_t x = 0; x < vocab_size_; ++x) recorded[x] = static_cast<float>(std::exp(raw[x]));
        } else {
          recorded.assign(q, q + vocab_size_);
        }
      }
      frontier = std::move(next_frontier);
      if (frontier.empty()) break;
    }
    // Deterministic candidates are verified as point masses: their recorded q is not a sampling law.
    if (tree.scheme == SiblingScheme::deterministic) tree.draft_q.clear();
    tree.draft_q.resize(tree.size() + 1);
    return counted(std::move(tree), start);
  }

 private:
  std::unique_ptr<ModelSession> session_;
  const SamplerPipeline& pipeline_;
  const SamplerPipeline& ranking_pipeline_;
  int32_t vocab_size_;
};

}  // namespace

ModelDrafterFactory::ModelDrafterFactory(std::shared_ptr<const LanguageModel> model, SamplingParams draft_params)
    : model_(std::move(model)),
      pipeline_(draft_params, model_->vocab_size()),
      ranking_pipeline_(at_unit_temperature(draft_params), model_->vocab_size()) {}

std::unique_ptr<Drafter> ModelDrafterFactory::create() const {
  return std::make_unique<ModelDrafter>(*model_, pipeline_, ranking_pipeline_);
}

}  // namespace specula
