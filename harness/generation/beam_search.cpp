#include "harness/generation/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "harness/generation/beam_sessions.h"
#include "harness/generation/session_memory.h"
#include "kernels/shared/elapsed.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

struct Beam {
  std::vector<Token> tokens;
  TokenHistory history;
  double logprob = 0.0;
  int32_t session = -1;  // the session that ran its parent's call: it holds all of this beam but its last token
};

struct Candidate {
  int32_t beam = 0;  // index in the group's live beams
  Token token = 0;
  double logprob = 0.0;    // the beam's logprob + log p(token)
  double selection = 0.0;  // logprob minus the diversity penalty
};

// Keeps the `capacity` best finished hypotheses, best first.
void add_finished(std::vector<BeamHypothesis>& finished, BeamHypothesis h, int32_t capacity) {
  const auto at =
      std::find_if(finished.begin(), finished.end(), [&](const BeamHypothesis& f) { return h.score > f.score; });
  finished.insert(at, std::move(h));
  if (static_cast<int32_t>(finished.size()) > capacity) finished.pop_back();
}

// The step's processed rows, computed once per row (beams of different groups may share one).
class ProcessedRows {
 public:
  // `beams`: the beams given to the step, in order.
  ProcessedRows(const SamplerPipeline& pipeline, const BeamStep& step, const std::vector<const Beam*>& beams, int32_t V)
      : pipeline_(pipeline), step_(step), V_(V) {
    for (size_t i = 0; i < beams.size(); ++i) row_of_[beams[i]] = step.row_of[i];
  }
  int32_t session_of(const Beam& b) const { return step_.session_of_row[row_of_.at(&b)]; }
  const std::vector<float>& of(const Beam& b) {
    const int32_t row = row_of_.at(&b);
    auto it = probs_.find(row);
    if (it == probs_.end()) {
      std::vector<float> p(V_);
      pipeline_.process(step_.logits.data() + static_cast<size_t>(row) * V_, b.history, p.data());
      it = probs_.emplace(row, std::move(p)).first;
    }
    return it->second;
  }

 private:
  const SamplerPipeline& pipeline_;
  const BeamStep& step_;
  std::map<const Beam*, int32_t> row_of_;
  int32_t V_;
  std::map<int32_t, std::vector<float>> probs_;
};

// Every token of positive probability after every live beam of a group, best first by the diversity-penalised
// selection score; ties by beam, then token id, so the search is deterministic.
std::vector<Candidate> ranked_candidates(const std::vector<Beam>& group, ProcessedRows& rows,
                                         const std::vector<int32_t>& chosen_count, double lambda, int32_t V) {
  std::vector<Candidate> candidates;
  for (int32_t i = 0; i < static_cast<int32_t>(group.size()); ++i) {
    const Beam& b = group[i];
    const std::vector<float>& p = rows.of(b);
    for (Token x = 0; x < V; ++x) {
      if (!(p[x] > 0.0f)) continue;
      const double lp = b.logprob + std::log(static_cast<double>(p[x]));
      candidates.push_back({i, x, lp, lp - lambda * chosen_count[x]});
    }
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    if (a.selection != b.selection) return a.selection > b.selection;
    if (a.beam != b.beam) return a.beam < b.beam;
    return a.token < b.token;
  });
  return candidates;
}

// Group g's beams for the next step: its best candidates that do not end, up to B; a candidate that ends the
// output (SamplingParams::ends_with: a stop token, or the constraint's match ended) among the top B ends a hypothesis
// instead, kept in `finished`.
std::vector<Beam> extend_group(const BeamSearch& search, const std::vector<Beam>& group, int32_t g, ProcessedRows& rows,
                               std::vector<int32_t>& chosen_count, std::vector<BeamHypothesis>& finished, int32_t V) {
  const BeamSearchConfig& config = search.config();
  const SamplerPipeline& pipeline = search.pipeline();
  const int32_t B = config.beam_width / config.num_groups;
  const double lambda = config.num_groups > 1 ? config.diversity_penalty : 0.0;
  const std::vector<Candidate> candidates = ranked_candidates(group, rows, chosen_count, lambda, V);
  std::vector<Beam> next_live;
  for (int32_t rank = 0; rank < static_cast<int32_t>(candidates.size()); ++rank) {
    const Candidate& c = candidates[rank];
    const Beam& parent = group[c.beam];
    TokenHistory history = pipeline.advance(parent.history, c.token, rows.of(parent).data());
    if (pipeline.params().ends_with(c.token, history)) {
      if (rank >= B) continue;  // HF: a stop candidate ranked below the beam width is not kept
      BeamHypothesis h;
      h.tokens = parent.tokens;
      h.tokens.push_back(c.token);
      h.logprob = c.logprob;
      h.score = search.score(h.logprob, static_cast<int32_t>(h.tokens.size()));
      h.stopped = true;
      h.group = g;
      add_finished(finished, std::move(h), B);
      continue;
    }
    Beam next;
    next.tokens = parent.tokens;
    next.tokens.push_back(c.token);
    next.history = std::move(history);
    next.logprob = c.logprob;
    next.session = rows.session_of(parent);
    next_live.push_back(std::move(next));
    ++chosen_count[c.token];
    if (static_cast<int32_t>(next_live.size()) == B) break;
  }
  return next_live;
}

// The length limit ends every live beam of a group.
void end_at_length(const BeamSearch& search, std::vector<Beam>& group, int32_t g,
                   std::vector<BeamHypothesis>& finished) {
  const BeamSearchConfig& config = search.config();
  for (Beam& b : group) {
    BeamHypothesis h;
    h.logprob = b.logprob;
    h.score = search.score(b.logprob, static_cast<int32_t>(b.tokens.size()));
    h.tokens = std::move(b.tokens);
    h.group = g;
    add_finished(finished, std::move(h), config.beam_width / config.num_groups);
  }
  group.clear();
}

// Whether a group is done: no live beam, or B finished hypotheses and (without early stopping) no live beam
// that can still beat the worst of them.
bool group_done(const BeamSearch& search, const std::vector<Beam>& group, const std::vector<BeamHypothesis>& finished) {
  const BeamSearchConfig& config = search.config();
  if (group.empty()) return true;
  if (static_cast<int32_t>(finished.size()) < config.beam_width / config.num_groups) return false;
  if (config.early_stopping) return true;
  // The best final score any live beam can still reach: its logprob can only fall, and logprob / m^alpha is
  // monotone in the final length m in [n + 1, L].
  double best = -std::numeric_limits<double>::infinity();
  for (const Beam& b : group) {
    const int32_t n = static_cast<int32_t>(b.tokens.size());
    best = std::max({best, search.score(b.logprob, n + 1), search.score(b.logprob, config.max_new_tokens)});
  }
  return best <= finished.back().score;
}

// Every group's finished hypotheses, best score first, cut to the n-best size.
BeamSearchOutput best_hypotheses(const BeamSearchConfig& config, std::vector<std::vector<BeamHypothesis>>& finished,
                                 bool ended_at_start) {
  BeamSearchOutput out;
  if (config.max_new_tokens == 0 || ended_at_start) out.nbest.push_back(BeamHypothesis{{}, 0.0, 0.0, ended_at_start});
  for (std::vector<BeamHypothesis>& group : finished)
    for (BeamHypothesis& h : group) out.nbest.push_back(std::move(h));
  std::stable_sort(out.nbest.begin(), out.nbest.end(),
                   [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  const size_t keep = static_cast<size_t>(config.num_return > 0 ? config.num_return : config.beam_width);
  if (out.nbest.size() > keep) out.nbest.resize(keep);
  if (out.nbest.empty()) fail("beam search: no hypothesis survived (every token has probability 0)");
  return out;
}

}  // namespace

BeamSearch::BeamSearch(std::shared_ptr<const LanguageModel> target, SamplingParams params, BeamSearchConfig config)
    : target_(std::move(target)), pipeline_(std::move(params), target_->vocab_size()), config_(config) {
  check_beam_config(config_);
}

void check_beam_config(const BeamSearchConfig& c) {
  if (c.beam_width < 1 || c.beam_width > kMaxBeamWidth)
    fail_parameter("beam_width", " must be in 1..", kMaxBeamWidth, ", got ", c.beam_width);
  if (c.num_groups < 1 || c.beam_width % c.num_groups != 0)
    fail_parameter("num_beam_groups", " must be >= 1 and divide the beam width (", c.beam_width, "), got ",
                   c.num_groups);
  if (!std::isfinite(c.diversity_penalty) || c.diversity_penalty < 0)
    fail_parameter("diversity_penalty", " must be a finite number >= 0, got ", c.diversity_penalty);
  if (c.diversity_penalty > 0 && c.num_groups == 1)
    fail_parameter("diversity_penalty",
                   " applies between groups of beams, and there is one (num_beam_groups 1): it "
                   "would change nothing, got ",
                   c.diversity_penalty);
  if (!std::isfinite(c.length_penalty)) fail_parameter("length_penalty", " must be finite, got ", c.length_penalty);
  if (c.num_return < 0 || c.num_return > c.beam_width)
    fail_parameter("num_return", " must be in 0..the beam width (", c.beam_width, "), got ", c.num_return);
  if (c.max_new_tokens < 0) fail_parameter("max_new_tokens", " must be >= 0, got ", c.max_new_tokens);
}

double BeamSearch::score(double logprob, int32_t length) const {
  if (length == 0) return 0.0;
  return logprob / std::pow(static_cast<double>(length), config_.length_penalty);
}

BeamSearchOutput BeamSearch::search(const std::vector<Token>& prompt, GenerationMetrics& metrics) const {
  const auto start = Clock::now();
  const int32_t V = target_->vocab_size();
  const int32_t G = config_.num_groups;
  const int32_t L = config_.max_new_tokens;
  std::vector<std::vector<Beam>> live(G);
  std::vector<std::vector<BeamHypothesis>> finished(G);
  std::vector<char> done(G, 0);
  Beam root;
  root.history.prompt = prompt;
  // A pattern that matches only the empty output (with no stop token to emit) has ended before any token.
  const bool ended_at_start = pipeline_.params().match_ended(root.history);
  if (!ended_at_start)
    for (auto& group : live) group.push_back(root);
  // Bounded before work: a session a beam, alive together, in the host's memory (beam search runs on the CPU).
  if (!ended_at_start && L > 0)
    check_sessions_fit_host(*target_, config_.beam_width,
                            "beam search: " + std::to_string(config_.beam_width) + " beams",
                            "use a narrower beam_width");
  BeamSessions sessions(*target_);

  for (int32_t t = 0; t < L; ++t) {
    std::vector<const Beam*> beams;
    for (int32_t g = 0; g < G; ++g)
      if (!done[g])
        for (const Beam& b : live[g]) beams.push_back(&b);
    if (beams.empty()) break;
    std::vector<BeamRow> beam_rows;
    for (const Beam* b : beams) beam_rows.push_back({&b->tokens, b->session});
    const BeamStep rows = sessions.step(prompt, beam_rows, metrics.target_seconds);
    ++metrics.target_calls;
    ++metrics.steps;
    ProcessedRows processed(pipeline_, rows, beams, V);
    std::vector<int32_t> chosen_count(V, 0);  // tokens chosen by earlier groups at this step
    std::vector<std::vector<Beam>> next_live(G);
    for (int32_t g = 0; g < G; ++g)
      if (!done[g]) next_live[g] = extend_group(*this, live[g], g, processed, chosen_count, finished[g], V);
    for (int32_t g = 0; g < G; ++g) {
      if (done[g]) continue;
      live[g] = std::move(next_live[g]);
      if (t + 1 == L) end_at_length(*this, live[g], g, finished[g]);
      if (group_done(*this, live[g], finished[g])) {
        done[g] = 1;
        live[g].clear();
      }
    }
  }
  BeamSearchOutput out = best_hypotheses(config_, finished, ended_at_start);
  out.wall_seconds = seconds_since(start);
  ++metrics.sequences;
  if (out.nbest[0].stopped) ++metrics.stopped;  // the best hypothesis is the sequence the run reports
  metrics.new_tokens += static_cast<int64_t>(out.nbest[0].tokens.size());
  metrics.emitted += static_cast<int64_t>(out.nbest[0].tokens.size());
  return out;
}

}  // namespace specula
