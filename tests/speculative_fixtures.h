// Shared fixtures for the exact-law tests of speculative decoding: random table models (order 1 or 2)
// with a draft = target + Gaussian noise, the exact law of every continuation under the sampler pipeline,
// and helpers that run the real Generator and tally its output.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "harness/generation/generator.h"
#include "harness/models/table_model.h"
#include "kernels/shared/philox.h"
#include "tests/statistics/goodness_of_fit.h"
#include "verify/sampling/token_constraint.h"

namespace specula::testing {

// Standard normal from Philox (Box-Muller), independent of the standard library's distributions.
inline double philox_gaussian(uint64_t seed, uint64_t index, uint64_t stream = 977) {
  const double u1 = philox_uniform(seed, stream, 2 * index);
  const double u2 = philox_uniform(seed, stream, 2 * index + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

struct TablePair {
  std::shared_ptr<TableModel> target, draft;
  std::vector<float> target_logits;
};

// Target logits ~ N(0, target_scale^2); draft = target + N(0, noise^2).
inline TablePair random_pair(int32_t order, int32_t V, uint64_t seed, double target_scale, double noise) {
  size_t rows = 1;
  for (int32_t i = 0; i < order; ++i) rows *= V;
  TablePair pair;
  pair.target_logits.resize(rows * V);
  for (size_t i = 0; i < pair.target_logits.size(); ++i)
    pair.target_logits[i] = static_cast<float>(target_scale * philox_gaussian(seed, i));
  std::vector<float> draft(pair.target_logits);
  for (size_t i = 0; i < draft.size(); ++i) draft[i] += static_cast<float>(noise * philox_gaussian(seed + 1, i));
  pair.target = std::make_shared<TableModel>(order, V, pair.target_logits, "target-table");
  pair.draft = std::make_shared<TableModel>(order, V, draft, "draft-table");
  return pair;
}

// Exact law of every continuation of at most L tokens of autoregressive sampling from `model` through
// `pipeline` (penalties, mirostat, etc. see the whole history), with the stop rule of the Generator: a
// continuation ends at its first stop token (pipeline.params().stop_tokens), or where its constraint's match has
// ended (TokenConstraint::ended). Enumerated directly: a frame that ended is not extended. Cells are indexed as
// sequence_index below, over V^L cells; a stopped continuation is padded with its stop token, so cells with a non-stop
// token after a stop have law 0.
inline std::vector<double> exact_sequence_law(const TableModel& model, const SamplerPipeline& pipeline,
                                              const std::vector<Token>& prompt, int32_t L) {
  const int32_t V = model.vocab_size();
  const std::vector<Token>& stops = pipeline.params().stop_tokens;
  const TokenConstraint* constraint = pipeline.params().constraint.get();
  auto ends = [&](Token t, const TokenHistory& after) {
    return std::find(stops.begin(), stops.end(), t) != stops.end() ||
           (constraint && constraint->ended(after.constraint_state));
  };
  std::vector<double> law;
  std::vector<float> probs(V);
  struct Frame {
    std::vector<Token> context;
    TokenHistory history;
    double mass;
    bool stopped;
  };
  std::vector<Frame> level = {{prompt, TokenHistory{prompt, {}, std::nan("")}, 1.0, false}};
  for (int32_t t = 0; t < L; ++t) {
    std::vector<Frame> next;
    next.reserve(level.size() * V);
    for (const Frame& f : level) {
      if (f.stopped) {  // ended: its mass stays in the cell that repeats the stop token
        for (Token x = 0; x < V; ++x) {
          next.push_back(Frame{f.context, f.history, x == f.context.back() ? f.mass : 0.0, true});
          next.back().context.push_back(x);
        }
        continue;
      }
      pipeline.process(model.row_after(f.context), f.history, probs.data());
      for (Token x = 0; x < V; ++x) {
        Frame g{f.context, pipeline.advance(f.history, x, probs.data()), f.mass * probs[x], false};
        g.stopped = ends(x, g.history);
        g.context.push_back(x);
        next.push_back(std::move(g));
      }
    }
    level = std::move(next);
  }
  for (const Frame& f : level) law.push_back(f.mass);
  const double total = std::accumulate(law.begin(), law.end(), 0.0);
  for (double& p : law) p /= total;  // float32 probabilities: renormalise the product's rounding
  return law;
}

// The cell of a continuation among V^L: base-V digits, a continuation shorter than L padded with its last
// token (the stop token that ended it).
inline size_t sequence_index(const std::vector<Token>& tokens, int32_t V, int32_t L = -1) {
  // An empty output has no token to pad with: its cell would be ambiguous.
  if (tokens.empty() && L > 0) throw std::logic_error("sequence_index: an empty output has no cell");
  size_t index = 0;
  for (Token t : tokens) index = index * V + t;
  for (int32_t i = static_cast<int32_t>(tokens.size()); i < L; ++i) index = index * V + tokens.back();
  return index;
}

struct RunResult {
  std::vector<int64_t> counts;
  std::vector<SequenceOutput> outputs;
  GenerationMetrics metrics;
};

inline RunResult run_generator(const Generator& generator, const std::vector<Token>& prompt, int64_t n, int32_t V) {
  RunResult r;
  r.outputs = generator.generate_many(prompt, 0, n, r.metrics);
  size_t cells = 1;
  for (int32_t t = 0; t < generator.config().max_new_tokens; ++t) cells *= V;
  r.counts.assign(cells, 0);
  const int32_t L = generator.config().max_new_tokens;
  for (const SequenceOutput& s : r.outputs) {
    REQUIRE(s.tokens.size() <= static_cast<size_t>(L));
    REQUIRE((s.tokens.size() == static_cast<size_t>(L) || s.stop_reason == StopReason::stop));
    ++r.counts[sequence_index(s.tokens, V, L)];
  }
  return r;
}

inline double total_variation(const std::vector<int64_t>& counts, const std::vector<double>& law) {
  const double n = static_cast<double>(std::accumulate(counts.begin(), counts.end(), int64_t{0}));
  double tv = 0.0;
  for (size_t i = 0; i < law.size(); ++i) tv += std::fabs(counts[i] / n - law[i]);
  return tv / 2;
}

}  // namespace specula::testing
