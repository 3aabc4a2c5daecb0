#include "draft/synthetic_drafter.h"

#include <chrono>
#include <sstream>

#include "draft/candidate_sampling.h"
#include "draft/drafter_options.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

class SyntheticDrafter : public Drafter {
 public:
  SyntheticDrafter(const LanguageModel& target, const SamplerPipeline& pipeline, double alpha)
      : session_(target.new_session()), pipeline_(pipeline), alpha_(alpha), vocab_size_(target.vocab_size()) {}

  std::string name() const override { return "synthetic"; }

  TokenTree propose(const DraftRequest& request) override {
    const auto start = std::chrono::steady_clock::now();
    const int32_t V = vocab_size_;
    std::vector<float> logits, p;  // p [rows, V]: the target's processed rows, for the path histories
    auto row_laws = [&](const TokenTree& tree, const std::vector<int32_t>& rows,
                        std::vector<std::vector<float>>& laws) {
      // One target forward per depth: logits for every row of the tree so far.
      logits.resize(static_cast<size_t>(tree.size() + 1) * V);
      session_->tree_logits(*request.context, tree, logits.data());
      ++counters_.n_forward;
      p.resize(logits.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        const int32_t row = rows[i];
        float* p_row = p.data() + static_cast<size_t>(row) * V;
        // The target pipeline's history along the path advances with the target's rows (as the verifier's).
        const TokenHistory h = path_history(pipeline_, *request.history, tree, row,
                                            [&](int32_t r) { return p.data() + static_cast<size_t>(r) * V; });
        pipeline_.process(logits.data() + static_cast<size_t>(row) * V, h, p_row);
        Token y = 0;
        for (Token x = 1; x < V; ++x)
          if (p_row[x] < p_row[y]) y = x;
        std::vector<float>& q = laws[i];
        q.resize(V);
        for (Token x = 0; x < V; ++x) q[x] = static_cast<float>(alpha_ * p_row[x] + (x == y ? 1.0 - alpha_ : 0.0));
      }
    };
    TokenTree tree = sample_draft_tree(request, V, row_laws);
    return counted(std::move(tree), start);
  }

 private:
  std::unique_ptr<ModelSession> session_;
  const SamplerPipeline& pipeline_;
  double alpha_;
  int32_t vocab_size_;
};

}  // namespace

double parse_synthetic_alpha(const std::string& text, const std::string& spec) {
  const auto options = parse_drafter_options(text, spec, {"alpha"});
  const auto it = options.find("alpha");
  if (it == options.end()) fail_parameter("draft", " ", spec, ": synthetic needs alpha, e.g. synthetic:alpha=0.7");
  const double alpha = drafter_option_real(it->second, "alpha", spec);
  if (alpha < 0.0 || alpha > 1.0) fail_parameter("draft", " ", spec, ": alpha must be in [0, 1], got ", it->second);
  return alpha;
}

SyntheticDrafterFactory::SyntheticDrafterFactory(std::shared_ptr<const LanguageModel> target,
                                                 SamplingParams target_params, double alpha)
    : target_(std::move(target)), pipeline_(std::move(target_params), target_->vocab_size()), alpha_(alpha) {
  if (!(alpha_ >= 0.0 && alpha_ <= 1.0)) fail("synthetic drafter: alpha must be in [0, 1], got ", alpha_);
}

std::unique_ptr<Drafter> SyntheticDrafterFactory::create() const {
  return std::make_unique<SyntheticDrafter>(*target_, pipeline_, alpha_);
}

std::string SyntheticDrafterFactory::description() const {
  std::ostringstream os;
  os << "synthetic:alpha=" << alpha_ << " (target " << target_->description() << ")";
  return os.str();
}

void check_synthetic_spec(const DrafterSpec& spec) { parse_synthetic_alpha(spec.rest, spec.spec); }

std::shared_ptr<const DrafterFactory> make_synthetic_drafter(const DrafterSpec& spec) {
  if (!spec.target) fail_parameter("draft", " ", spec.spec, ": needs the target model");
  return std::make_shared<SyntheticDrafterFactory>(spec.target, spec.target_params,
                                                   parse_synthetic_alpha(spec.rest, spec.spec));
}

}  // namespace specula
