#include "harness/generation/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

#include "kernels/shared/error.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

struct Beam {
  std::vector<Token> tokens;
  TokenHistory history;
  double logprob = 0.0;
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

}  // namespace

BeamSearch::BeamSearch(std::shared_ptr<const LanguageModel> target, SamplingParams params, BeamSearchConfig config)
    : target_(std::move(target)), pipeline_(std::move(params), target_->vocab_size()), config_(config) {
  const BeamSearchConfig& c = config_;
  if (c.beam_width < 1) fail_parameter("beam_width", " must be >= 1, got ", c.beam_width);
  if (c.num_groups < 1 || c.beam_width % c.num_groups != 0)
    fail_parameter("num_beam_groups", " must be >= 1 and divide the beam width (", c.beam_width, "), got ",
                   c.num_groups);
  if (!std::isfinite(c.diversity_penalty) || c.diversity_penalty < 0)
    fail_parameter("diversity_penalty", " must be a finite number >= 0, got ", c.diversity_penalty);
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
  const int32_t B = config_.beam_width / G;
  const int32_t L = config_.max_new_tokens;
  const double lambda = G > 1 ? config_.diversity_penalty : 0.0;
  const std::vector<Token>& stops = pipeline_.params().stop_tokens;
  auto is_stop = [&](Token t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };

  std::vector<std::vector<Beam>> live(G);
  std::vector<std::vector<BeamHypothesis>> finished(G);
  std::vector<char> done(G, 0);
  Beam root;
  root.history.prompt = prompt;
  for (auto& group : live) group.push_back(root);
  auto session = target_->new_session();

  for (int32_t t = 0; t < L; ++t) {
    // Rows of this step's target call: the trie of the live beams below their longest common prefix.
    std::vector<const Beam*> beams;
    for (int32_t g = 0; g < G; ++g)
      if (!done[g])
        for (const Beam& b : live[g]) beams.push_back(&b);
    if (beams.empty()) break;
    size_t lcp = beams[0]->tokens.size();
    for (const Beam* b : beams) {
      size_t k = 0;
      while (k < lcp && k < b->tokens.size() && b->tokens[k] == beams[0]->tokens[k]) ++k;
      lcp = k;
    }
    std::vector<Token> context = prompt;
    context.insert(context.end(), beams[0]->tokens.begin(), beams[0]->tokens.begin() + lcp);
    TokenTree tree;
    std::map<std::pair<int32_t, Token>, int32_t> trie;  // (parent node, token) -> node
    std::map<const Beam*, int32_t> row_of;
    for (const Beam* b : beams) {
      int32_t node = -1;
      for (size_t k = lcp; k < b->tokens.size(); ++k) {
        const auto key = std::make_pair(node, b->tokens[k]);
        auto it = trie.find(key);
        if (it == trie.end()) {
          tree.add(b->tokens[k], node);
          it = trie.emplace(key, tree.size() - 1).first;
        }
        node = it->second;
      }
      row_of[b] = node + 1;
    }
    std::vector<float> logits(static_cast<size_t>(tree.size() + 1) * V);
    const auto t0 = Clock::now();
    session->tree_logits(context, tree, logits.data());
    metrics.target_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++metrics.target_calls;
    ++metrics.steps;
    // Processed rows, computed once per row (beams of different groups may share one).
    std::map<int32_t, std::vector<float>> probs_of_row;
    auto probs_for = [&](const Beam& b) -> const std::vector<float>& {
      const int32_t row = row_of.at(&b);
      auto it = probs_of_row.find(row);
      if (it == probs_of_row.end()) {
        std::vector<float> p(V);
        pipeline_.process(logits.data() + static_cast<size_t>(row) * V, b.history, p.data());
        it = probs_of_row.emplace(row, std::move(p)).first;
      }
      return it->second;
    };

    std::vector<int32_t> chosen_count(V, 0);  // tokens chosen by earlier groups at this step
    std::vector<std::vector<Beam>> next_live(G);
    for (int32_t g = 0; g < G; ++g) {
      if (done[g]) continue;
      std::vector<Candidate> candidates;
      for (int32_t i = 0; i < static_cast<int32_t>(live[g].size()); ++i) {
        const Beam& b = live[g][i];
        const std::vector<float>& p = probs_for(b);
        for (Token x = 0; x < V; ++x) {
          if (!(p[x] > 0.0f)) continue;
          const double lp = b.logprob + std::log(static_cast<double>(p[x]));
          candidates.push_back({i, x, lp, lp - lambda * chosen_count[x]});
        }
      }
      // Best first; ties by beam, then token id, so the search is deterministic.
      std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        if (a.selection != b.selection) return a.selection > b.selection;
        if (a.beam != b.beam) return a.beam < b.beam;
        return a.token < b.token;
      });
      for (int32_t rank = 0; rank < static_cast<int32_t>(candidates.size()); ++rank) {
        const Candidate& c = candidates[rank];
        const Beam& parent = live[g][c.beam];
        if (is_stop(c.token)) {
          if (rank >= B) continue;  // HF: a stop candidate ranked below the beam width is not kept
          BeamHypothesis h;
          h.tokens = parent.tokens;
          h.tokens.push_back(c.token);
          h.logprob = c.logprob;
          h.score = score(h.logprob, static_cast<int32_t>(h.tokens.size()));
          h.stopped = true;
          h.group = g;
          add_finished(finished[g], std::move(h), B);
          continue;
        }
        Beam next;
        next.tokens = parent.tokens;
        next.tokens.push_back(c.token);
        next.history = pipeline_.advance(parent.history, c.token, probs_for(parent).data());
        next.logprob = c.logprob;
        next_live[g].push_back(std::move(next));
        ++chosen_count[c.token];
        if (static_cast<int32_t>(next_live[g].size()) == B) break;
      }
    }
    for (int32_t g = 0; g < G; ++g) {
      if (done[g]) continue;
      live[g] = std::move(next_live[g]);
      if (t + 1 == L) {  // the length limit ends every live beam
        for (Beam& b : live[g]) {
          BeamHypothesis h;
          h.logprob = b.logprob;
          h.score = score(b.logprob, static_cast<int32_t>(b.tokens.size()));
          h.tokens = std::move(b.tokens);
          h.group = g;
          add_finished(finished[g], std::move(h), B);
        }
        live[g].clear();
      }
      bool stop = live[g].empty();
      if (!stop && static_cast<int32_t>(finished[g].size()) >= B) {
        if (config_.early_stopping) {
          stop = true;
        } else {
          // The best final score any live beam can still reach: its logprob can only fall, and
          // logprob / m^alpha is monotone in the final length m in [n + 1, L].
          double best = -std::numeric_limits<double>::infinity();
          for (const Beam& b : live[g]) {
            const int32_t n = static_cast<int32_t>(b.tokens.size());
            best = std::max({best, score(b.logprob, n + 1), score(b.logprob, L)});
          }
          stop = best <= finished[g].back().score;
        }
      }
      if (stop) {
        done[g] = 1;
        live[g].clear();
      }
    }
  }

  BeamSearchOutput out;
  if (L == 0) out.nbest.push_back(BeamHypothesis{});
  for (int32_t g = 0; g < G; ++g)
    for (BeamHypothesis& h : finished[g]) out.nbest.push_back(std::move(h));
  std::stable_sort(out.nbest.begin(), out.nbest.end(),
                   [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; });
  const size_t keep = static_cast<size_t>(config_.num_return > 0 ? config_.num_return : config_.beam_width);
  if (out.nbest.size() > keep) out.nbest.resize(keep);
  if (out.nbest.empty()) fail("beam search: no hypothesis survived (every token has probability 0)");
  out.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ++metrics.sequences;
  metrics.new_tokens += static_cast<int64_t>(out.nbest[0].tokens.size());
  metrics.emitted += static_cast<int64_t>(out.nbest[0].tokens.size());
  return out;
}

}  // namespace specula
