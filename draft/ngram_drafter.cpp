#include "draft/ngram_drafter.h"

#include <chrono>
#include <cmath>

#include "draft/candidate_sampling.h"
#include "draft/draft_vocabulary.h"
#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

class NgramDrafter : public Drafter {
 public:
  NgramDrafter(const NgramModel& model, const SamplerPipeline& pipeline, const SamplerPipeline& ranking_pipeline)
      : model_(model), pipeline_(pipeline), ranking_pipeline_(ranking_pipeline) {}

  std::string name() const override { return "ngram"; }

  // No model forward passes: n_forward stays 0 (a lookup per row is all the n-gram costs).
  TokenTree propose(const DraftRequest& request) override {
    const auto start = std::chrono::steady_clock::now();
    const int32_t V = model_.vocab_size();
    const std::vector<Token>& context = *request.context;
    const size_t keep = static_cast<size_t>(model_.order() - 1);  // tokens of history the model reads
    std::vector<double> kn(V);
    std::vector<float> logits(V);
    std::vector<Token> history;
    // Each row's law under `pipeline`: the draft's (a ranked tree's at temperature 1), and a greedy draft's at
    // temperature 1 for the chain's doubt (stops_after_doubt).
    const auto laws_under = [&](const SamplerPipeline& pipeline) {
      return [&](const TokenTree& tree, const std::vector<int32_t>& rows, std::vector<std::vector<float>>& laws) {
        for (size_t i = 0; i < rows.size(); ++i) {
          const int32_t row = rows[i];
          const std::vector<Token> path = row == 0 ? std::vector<Token>{} : tree.path(row - 1);
          const size_t from = context.size() - std::min(context.size(), keep > path.size() ? keep - path.size() : 0);
          history.assign(context.begin() + from, context.end());
          history.insert(history.end(), path.begin(), path.end());
          model_.distribution(history.data(), history.size(), kn.data());
          for (int32_t x = 0; x < V; ++x) logits[x] = static_cast<float>(std::log(kn[x]));
          // The draft pipeline sees the row's own path; ancestors advance with the law they were drawn from.
          const TokenHistory h =
              path_history(pipeline, *request.history, tree, row, [&](int32_t r) { return tree.draft_q[r].data(); });
          laws[i].resize(V);
          pipeline.process(logits.data(), h, laws[i].data());
        }
      };
    };
    const bool greedy = pipeline_.params().temperature == 0.0f;
    TokenTree tree = sample_draft_tree(request, V, laws_under(ranked_tree(request) ? ranking_pipeline_ : pipeline_),
                                       greedy ? RowLaws(laws_under(ranking_pipeline_)) : RowLaws());
    return counted(std::move(tree), start);
  }

 private:
  const NgramModel& model_;
  const SamplerPipeline& pipeline_;
  const SamplerPipeline& ranking_pipeline_;
};

}  // namespace

NgramDrafterFactory::NgramDrafterFactory(std::shared_ptr<const NgramModel> model, SamplingParams draft_params,
                                         std::string description)
    : model_(std::move(model)),
      pipeline_(draft_params, model_->vocab_size()),
      ranking_pipeline_(at_unit_temperature(draft_params), model_->vocab_size()),
      description_(std::move(description)) {}

std::unique_ptr<Drafter> NgramDrafterFactory::create() const {
  return std::make_unique<NgramDrafter>(*model_, pipeline_, ranking_pipeline_);
}

void check_ngram_spec(const DrafterSpec& spec) {
  if (spec.rest.empty())
    fail_parameter("draft", ": 'ngram:' needs a path, e.g. ngram:model.ngram (from specula train-ngram)");
  try {
    open_input_file(spec.rest, "n-gram model");  // a folder or a missing file, before the target loads
  } catch (const Error& e) {
    fail_parameter("draft", " ", spec.spec, ": ", e.what());
  }
}

std::shared_ptr<const DrafterFactory> make_ngram_drafter(const DrafterSpec& spec) {
  check_ngram_spec(spec);
  auto model = std::make_shared<NgramModel>(NgramModel::load(spec.rest));
  if (spec.target) check_draft_vocabulary(*spec.target, model->vocab_size(), spec.spec);
  return std::make_shared<NgramDrafterFactory>(std::move(model), spec.draft_params, spec.spec);
}

}  // namespace specula
