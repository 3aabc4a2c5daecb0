// Beam search (`--method beam`), a deterministic baseline beside sampling and speculative decoding, on
// the same models, sampler pipeline and sessions.
//
//   * Scores. A hypothesis's log-probability is the sum of log p(token) under the PROCESSED distribution
//     of its own history (the sampler pipeline: masks, constraint, penalties, temperature, filters), so
//     a --regex or --json-schema constraint, bad words and penalties apply to beams exactly as to
//     sampling; tokens the pipeline removes (p = 0) are never expanded. Hypotheses are ranked by
//     logprob / length^alpha (length penalty alpha, Wu et al. 2016's simple form, as HF's
//     `length_penalty`), the length counting the stop token when one ended the hypothesis.
//   * Stop tokens (SamplingParams::stop_tokens) end a hypothesis, as does a token after which a constraint's
//     match is complete and cannot continue (TokenConstraint::ended); one that reaches max_new_tokens ends too.
//     As in HF's BeamSearchScorer, a stop-token candidate joins the finished list only when it ranks among
//     the group's top B candidates of the step; each group keeps its B best finished hypotheses.
//     early_stopping = true: a group stops once it has B finished hypotheses; false: once no live beam
//     can still beat its worst finished one (a bound exact for any alpha: the log-probability only falls,
//     and logprob / m^alpha is monotone in the final length m).
//   * Diverse beam search (Vijayakumar et al. 2018, Alg. 1): the beams form G groups of B = width / G;
//     at each step groups choose in order, and group g ranks its candidates by
//     logprob + log p(x) - lambda * (number of times x was chosen by groups 0..g-1 at this step)
//     (Hamming diversity). The penalty steers selection only: a hypothesis's logprob and score are the
//     model's, so n-best scores are comparable across groups. Group 0 is plain beam search of width B.
//   * Sessions (beam_sessions.h): a target session per distinct live beam (identical beams of different groups
//     share one), each caching its own sequence, and every step is one batched target call
//     (LanguageModel::batch_tree_logits) with a row per distinct beam. A beam continues in its parent's session, so
//     its step runs one new token; a sibling takes the session of a beam that left (pruned or ended) whose sequence
//     shares the longest prefix with it, and runs the rest once; a new session is first given the prompt alone,
//     which a transformer's prompt cache serves. A step's cost does not grow with how long ago the beams diverged,
//     as one session's tree of every beam's suffix would. Sessions are bounded before the search: beam_width of
//     them, in the host's memory.
#pragma once

#include <memory>
#include <vector>

#include "harness/generation/generation_metrics.h"
#include "harness/models/language_model.h"
#include "verify/sampling/sampler_pipeline.h"

namespace specula {

// The most beams a search keeps: each holds its own history and cache, so the width is bounded before any work.
inline constexpr int32_t kMaxBeamWidth = 1024;

struct BeamSearchConfig {
  int32_t beam_width = 4;          // beams kept per step, over all groups
  int32_t num_groups = 1;          // G; must divide beam_width
  double diversity_penalty = 0.0;  // lambda >= 0 (used when G > 1)
  double length_penalty = 1.0;     // alpha: score = logprob / length^alpha
  bool early_stopping = true;
  int32_t num_return = 0;  // n-best list size, <= beam_width; 0 = beam_width
  int32_t max_new_tokens = 16;
};

// Throws Error naming the option for a bad configuration (what BeamSearch's constructor checks), so that a command can
// check it before any model loads.
void check_beam_config(const BeamSearchConfig& config);

struct BeamHypothesis {
  std::vector<Token> tokens;  // generated tokens; the last is the stop token (or the match's end) when `stopped`
  double logprob = 0.0;       // sum of log p(token), p the processed distribution
  double score = 0.0;         // logprob / |tokens|^alpha (0 for an empty hypothesis)
  bool stopped = false;       // ended by a stop token or the constraint's end (else by max_new_tokens)
  int32_t group = 0;
};

struct BeamSearchOutput {
  std::vector<BeamHypothesis> nbest;  // best score first; nbest[0] is the answer
  double wall_seconds = 0.0;
};

class BeamSearch {
 public:
  // Throws Error naming the option for a bad configuration.
  BeamSearch(std::shared_ptr<const LanguageModel> target, SamplingParams params, BeamSearchConfig config);

  // Adds steps, target calls and the best hypothesis's tokens to `metrics`.
  BeamSearchOutput search(const std::vector<Token>& prompt, GenerationMetrics& metrics) const;

  // logprob / length^alpha (0 for length 0).
  double score(double logprob, int32_t length) const;
  const BeamSearchConfig& config() const { return config_; }
  const SamplerPipeline& pipeline() const { return pipeline_; }

 private:
  std::shared_ptr<const LanguageModel> target_;
  SamplerPipeline pipeline_;
  BeamSearchConfig config_;
};

}  // namespace specula
