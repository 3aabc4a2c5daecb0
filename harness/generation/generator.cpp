#include "harness/generation/generator.h"

#include <algorithm>
#include <chrono>

#include "draft/constrained_drafter.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/sampling/categorical.h"
#include "verify/verifiers/target_rows.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// sum_x min(p(x), q(x)): the probability that a draw from q is accepted against p (= 1 - TV(p, q)).
// For a point-mass candidate d it is p(d).
double acceptance_probability(const float* p, const std::vector<float>& q, Token candidate, int32_t vocab_size) {
  if (q.empty()) return p[candidate];
  double s = 0.0;
  for (int32_t x = 0; x < vocab_size; ++x) s += std::min(p[x], q[x]);
  return s;
}

// The distribution greedy decoding takes its argmax over: masks, bias and penalties, then a softmax at
// temperature 1 (greedy decoding runs no filter, so none runs here either).
SamplingParams at_unit_temperature(SamplingParams params) {
  if (!params.greedy()) return params;
  params.temperature = 1.0f;
  params.dynatemp_range = 0.0f;
  params.min_p = 0.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.typical_p = 1.0f;
  params.tfs_z = 1.0f;
  params.mirostat = 0;
  return params;
}

}  // namespace

const char* stop_reason_name(StopReason reason) { return reason == StopReason::stop ? "stop" : "length"; }

Generator::Generator(std::shared_ptr<const LanguageModel> target, SamplingParams target_params,
                     std::shared_ptr<const DrafterFactory> drafter, GenerationConfig config)
    : target_(std::move(target)),
      pipeline_(target_params, target_->vocab_size()),
      unit_temperature_pipeline_(at_unit_temperature(std::move(target_params)), target_->vocab_size()),
      drafter_(std::move(drafter)),
      config_(std::move(config)) {
  if (config_.method && !drafter_)
    fail_parameter("method", " ", verify_method_name(*config_.method), " needs a draft model");
  if (drafter_ && drafter_->vocab_size() != target_->vocab_size())
    fail("vocabulary mismatch: target ", target_->description(), " has ", target_->vocab_size(), " tokens but draft ",
         drafter_->description(), " has ", drafter_->vocab_size());
  if (config_.max_new_tokens < 0) fail_parameter("max_new_tokens", " must be >= 0, got ", config_.max_new_tokens);
  if (config_.method && config_.tree_shape.empty() && config_.num_draft_tokens < 1)
    fail_parameter("num_draft_tokens", " must be >= 1, got ", config_.num_draft_tokens);
  // Bounded before any work: a verification call holds K + 1 rows of V logits (trees: at most 4096 nodes).
  if (config_.method && config_.tree_shape.empty() && config_.num_draft_tokens > kMaxDraftTokens)
    fail_parameter("num_draft_tokens", " must be <= ", kMaxDraftTokens, ", got ", config_.num_draft_tokens);
  if (config_.method == VerifyMethod::greedy && !pipeline_.params().greedy())
    fail_parameter("method", " greedy verifies greedy decoding: use temperature 0 (got ",
                   pipeline_.params().temperature, ")");
  if (config_.method != VerifyMethod::tree && !config_.tree_shape.empty())
    fail_parameter("tree", " is only used by method tree");
  for (int32_t b : config_.tree_shape)
    if (b != 1 && config_.method != VerifyMethod::tree) fail_parameter("tree", " with branching needs method tree");
  if (const int32_t most = drafter_ ? drafter_->max_draft_depth() : 0; most > 0 && draft_depth(config_) > most)
    fail_parameter(config_.tree_shape.empty() ? "num_draft_tokens" : "tree", " asks for a draft ", draft_depth(config_),
                   " deep, but ", drafter_->description(), " drafts at most ", most, " tokens ahead");
  // Under a constraint, point-mass drafts (prompt lookup) are cut at their first illegal token.
  if (drafter_ && pipeline_.params().constraint)
    drafter_ = std::make_shared<ConstrainedDrafterFactory>(drafter_, pipeline_.params().constraint);
}

bool Generator::is_stop(Token t) const {
  const std::vector<Token>& stops = pipeline_.params().stop_tokens;
  return std::find(stops.begin(), stops.end(), t) != stops.end();
}

EmittedLogprobs Generator::emitted_logprobs(const float* logits, const float* probs, const TokenHistory& history,
                                            Token token) const {
  const int32_t V = target_->vocab_size();
  std::vector<float> unit;
  if (pipeline_.params().greedy()) {  // the one-hot row says nothing: report the row the argmax is taken over
    unit.resize(V);
    unit_temperature_pipeline_.process(logits, history, unit.data());
    probs = unit.data();
  }
  const Logprobs l = compute_logprobs(logits, probs, V, token, config_.logprobs);
  EmittedLogprobs out{token, l.sampled_processed.logprob, l.sampled_raw.logprob, {}};
  for (const TokenLogprob& t : l.top_processed)
    if (probs[t.token] > 0.0f) out.top.push_back(t);
  return out;
}

int64_t draft_depth(const GenerationConfig& config) {
  if (!config.method) return 0;
  return config.tree_shape.empty() ? config.num_draft_tokens : static_cast<int64_t>(config.tree_shape.size());
}

void Generator::check_fits(const std::vector<Token>& prompt) const {
  const int64_t limit = target_->max_positions();
  if (limit <= 0 || config_.max_new_tokens == 0) return;
  // The last step runs from a context of prompt + max_new_tokens - 1 tokens, with its draft tree on top.
  const int64_t depth = draft_depth(config_);
  const int64_t needed = static_cast<int64_t>(prompt.size()) + config_.max_new_tokens - 1 + depth;
  if (needed > limit)
    fail("the target ", target_->description(), " holds ", limit, " positions, but a prompt of ", prompt.size(),
         " tokens, --max-new-tokens ", config_.max_new_tokens, " and a draft depth of ", depth, " need ", needed,
         ": shorten the prompt or the generation");
}

SequenceOutput Generator::generate(const std::vector<Token>& prompt, uint64_t sequence, GenerationMetrics& metrics,
                                   const TokenSink& sink) const {
  check_fits(prompt);
  auto target = target_->new_session();
  if (!config_.method) return generate_autoregressive(*target, prompt, sequence, metrics, sink);
  // The prompt is processed before the decoding loop, timed apart: the target's prefill, whose logits the
  // first verification call takes from the session's cache instead of running the prompt again, and the
  // drafter's begin (a draft model's prefill).
  const auto start = Clock::now();
  if (!prompt.empty() && config_.max_new_tokens > 0) {
    std::vector<float> logits(target_->vocab_size());
    target->next_logits(prompt, logits.data());
  }
  auto drafter = drafter_->create();
  drafter->set_target_session(target.get());
  drafter->begin(prompt);
  metrics.prompt_seconds += seconds_since(start);
  SequenceOutput out = generate_speculative(*target, *drafter, prompt, sequence, metrics, sink);
  out.wall_seconds = seconds_since(start);
  return out;
}

std::vector<SequenceOutput> Generator::generate_many(const std::vector<Token>& prompt, uint64_t first, int64_t count,
                                                     GenerationMetrics& metrics) const {
  if (count > 0) check_fits(prompt);
  std::vector<SequenceOutput> out(count);
  std::vector<std::string> errors(count);
  const auto start = Clock::now();
#pragma omp parallel
  {
    GenerationMetrics local;
#pragma omp for schedule(dynamic, 16)
    for (int64_t n = 0; n < count; ++n) {
      try {
        out[n] = generate(prompt, first + static_cast<uint64_t>(n), local);
      } catch (const std::exception& e) {
        errors[n] = e.what();
      }
    }
#pragma omp critical
    metrics.merge(local);
  }
  metrics.wall_seconds += seconds_since(start);
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);
  return out;
}

SequenceOutput Generator::generate_autoregressive(ModelSession& target, const std::vector<Token>& prompt,
                                                  uint64_t sequence, GenerationMetrics& metrics,
                                                  const TokenSink& sink) const {
  const auto start = Clock::now();
  const int32_t V = target_->vocab_size();
  SequenceOutput out;
  std::vector<Token> context = prompt;
  TokenHistory history;
  history.prompt = prompt;
  std::vector<float> logits(V), probs(V);
  const uint64_t stream = philox_stream(sequence, RandomRole::sample);
  for (int32_t t = 0; t < config_.max_new_tokens; ++t) {
    const auto t0 = Clock::now();
    target.next_logits(context, logits.data());
    (t == 0 ? metrics.prompt_seconds : metrics.target_seconds) += seconds_since(t0);
    pipeline_.process(logits.data(), history, probs.data());
    const Token x = sample_categorical(probs.data(), V, RandomKey{config_.seed, stream, static_cast<uint64_t>(t)});
    if (config_.logprobs >= 0) out.logprobs.push_back(emitted_logprobs(logits.data(), probs.data(), history, x));
    history = pipeline_.advance(history, x, probs.data());
    context.push_back(x);
    out.tokens.push_back(x);
    ++metrics.target_calls;
    ++metrics.steps;
    ++metrics.emitted;
    if (sink) sink({x});
    if (is_stop(x)) {
      out.stop_reason = StopReason::stop;
      break;
    }
  }
  ++metrics.sequences;
  if (out.stop_reason == StopReason::stop) ++metrics.stopped;
  metrics.new_tokens += static_cast<int64_t>(out.tokens.size());
  out.wall_seconds = seconds_since(start);
  return out;
}

SequenceOutput Generator::generate_speculative(ModelSession& target, Drafter& drafter, const std::vector<Token>& prompt,
                                               uint64_t sequence, GenerationMetrics& metrics,
                                               const TokenSink& sink) const {
  const auto start = Clock::now();
  const int32_t V = target_->vocab_size();
  const VerifyMethod method = *config_.method;
  const int32_t positions =
      config_.tree_shape.empty() ? config_.num_draft_tokens : static_cast<int32_t>(config_.tree_shape.size());
  metrics.resize(positions);
  SequenceOutput out;
  std::vector<Token> context = prompt;
  TokenHistory history;
  history.prompt = prompt;
  const int64_t draft_forwards_before = drafter.counters().n_forward;

  for (uint64_t step = 0;
       static_cast<int32_t>(out.tokens.size()) < config_.max_new_tokens && out.stop_reason != StopReason::stop;
       ++step) {
    DraftRequest request;
    request.context = &context;
    request.history = &history;
    request.num_draft_tokens = config_.num_draft_tokens;
    request.tree_shape = config_.tree_shape;
    request.scheme = config_.tree_sampling;
    request.rng = StepRandom{config_.seed, sequence, step};
    auto t0 = Clock::now();
    const TokenTree tree = drafter.propose(request);
    metrics.draft_seconds += seconds_since(t0);

    t0 = Clock::now();
    std::vector<float> logits(static_cast<size_t>(tree.size() + 1) * V), probs(logits.size());
    target.tree_logits(context, tree, logits.data());
    ++metrics.target_calls;
    metrics.target_seconds += seconds_since(t0);

    t0 = Clock::now();
    process_tree_rows(pipeline_, logits.data(), history, tree, probs.data());
    const VerifyOutcome outcome = verify(method, probs.data(), tree, V, request.rng);
    metrics.verify_seconds += seconds_since(t0);
    drafter.accept(outcome.accepted);
    if (outcome.emitted.empty()) fail("verifier ", verify_method_name(method), " emitted no token");

    // Commit the emitted tokens up to the first stop token and at most max_new_tokens in all: token i was drawn
    // from the row after the first i accepted nodes. Tokens past a stop token are discarded (§9).
    size_t kept = 0;
    std::vector<Token> committed;
    while (kept < outcome.emitted.size() && static_cast<int32_t>(out.tokens.size()) < config_.max_new_tokens) {
      const Token x = outcome.emitted[kept];
      const int32_t from_row = kept == 0 ? 0 : outcome.path[kept - 1] + 1;
      const float* row = probs.data() + static_cast<size_t>(from_row) * V;
      if (config_.logprobs >= 0)
        out.logprobs.push_back(emitted_logprobs(logits.data() + static_cast<size_t>(from_row) * V, row, history, x));
      history = pipeline_.advance(history, x, row);
      context.push_back(x);
      out.tokens.push_back(x);
      committed.push_back(x);
      ++kept;
      if (is_stop(x)) {
        out.stop_reason = StopReason::stop;
        if (!mutant_on(Mutant::stop_checked_per_step)) break;
      }
    }
    if (sink) sink(committed);

    // Counters. `emitted` counts the tokens kept; the acceptance counters describe the verifier's work and
    // count the step as verified, before any cut (an acceptance rate is not lowered by where a sequence ends).
    // A position is "tested" when the verifier reached it (every earlier one was accepted).
    const int32_t depth = tree.size() ? tree.max_depth() : 0;
    const int32_t tested = std::min(depth, outcome.accepted + (outcome.all_accepted ? 0 : 1));
    ++metrics.steps;
    metrics.proposed += depth;
    metrics.accepted += outcome.accepted;
    metrics.emitted += static_cast<int64_t>(kept);
    metrics.q_zero_errors += outcome.q_zero_errors;
    if (outcome.accepted < static_cast<int32_t>(metrics.accepted_histogram.size()))
      ++metrics.accepted_histogram[outcome.accepted];
    int32_t row = 0;
    for (int32_t i = 0; i < tested && i < positions; ++i) {
      ++metrics.position_reached[i];
      if (i < outcome.accepted) ++metrics.position_accepted[i];
      const std::vector<int32_t> kids = tree.children(row);
      if (!kids.empty()) {
        metrics.expected_acceptance_sum += acceptance_probability(probs.data() + static_cast<size_t>(row) * V,
                                                                  tree.q_at_row(row), tree.tokens[kids[0]], V);
        ++metrics.expected_acceptance_count;
      }
      if (i < outcome.accepted) row = outcome.path[i] + 1;
    }
    out.accept_lengths.push_back(outcome.accepted);
  }
  metrics.draft_calls += drafter.counters().n_forward - draft_forwards_before;
  ++metrics.sequences;
  if (out.stop_reason == StopReason::stop) ++metrics.stopped;
  metrics.new_tokens += static_cast<int64_t>(out.tokens.size());
  out.wall_seconds = seconds_since(start);
  return out;
}

}  // namespace specula
