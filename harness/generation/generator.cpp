#include "harness/generation/generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "draft/constrained_drafter.h"
#include "draft/draft_vocabulary.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/session_memory.h"
#include "kernels/shared/elapsed.h"
#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/device/batch_verifier.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/penalty_counts.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/token_tree.h"

namespace specula {
namespace {

using Clock = std::chrono::steady_clock;

// sum_x min(p(x), q(x)): the probability that a draw from q is accepted against p (= 1 - TV(p, q)).
// For a point-mass candidate d it is p(d).
double acceptance_probability(const float* p, const std::vector<float>& q, Token candidate, int32_t vocab_size) {
  if (q.empty()) return p[candidate];
  double s = 0.0;
  for (int32_t x = 0; x < vocab_size; ++x) s += std::min(p[x], q[x]);
  return s;
}

}  // namespace

const char* stop_reason_name(StopReason reason) { return reason == StopReason::stop ? "stop" : "length"; }

namespace {

// A mutant's draft length read off the step's own draws: a chain cut before the first token its draft drew with
// probability below 0.3, that token dropped (an early stop on the draft's confidence that forgets what the cut
// conditions on).
void cut_at_unlikely_token(TokenTree& tree) {
  for (int32_t i = 0; i < tree.size(); ++i) {
    if (tree.parent[i] != i - 1) return;  // chains only
    const std::vector<float>& q = tree.q_at_row(i);
    if (q.empty() || q[tree.tokens[i]] >= 0.3f) continue;
    tree.tokens.resize(i);
    tree.parent.resize(i);
    tree.draft_q.resize(std::min(tree.draft_q.size(), static_cast<size_t>(i) + 1));
    return;
  }
}

}  // namespace

Generator::Generator(std::shared_ptr<const LanguageModel> target, SamplingParams target_params,
                     std::shared_ptr<const DrafterFactory> drafter, GenerationConfig config)
    : target_(std::move(target)),
      pipeline_(target_params, target_->vocab_size()),
      unit_temperature_pipeline_(at_unit_temperature(target_params), target_->vocab_size()),
      drafter_(std::move(drafter)),
      config_(std::move(config)) {
  if (config_.method && !drafter_)
    fail_parameter("method", " ", verify_method_name(*config_.method), " needs a draft model");
  if (drafter_) check_draft_vocabulary(*target_, drafter_->vocab_size(), drafter_->description());
  if (config_.max_new_tokens < 0) fail_parameter("max_new_tokens", " must be >= 0, got ", config_.max_new_tokens);
  if (config_.method && config_.tree_shape.empty() && config_.num_draft_tokens < 1)
    fail_parameter("num_draft_tokens", " must be >= 1, got ", config_.num_draft_tokens);
  // Bounded before any work: a verification call holds K + 1 rows of V logits (trees: at most 4096 nodes).
  if (config_.method && config_.tree_shape.empty() && config_.num_draft_tokens > kMaxDraftTokens)
    fail_parameter("num_draft_tokens", " must be <= ", kMaxDraftTokens, ", got ", config_.num_draft_tokens);
  check_method_temperature(config_.method, pipeline_.params());
  const bool trees = config_.method && verifies_trees(*config_.method);
  if (config_.method) {
    check_draft_schedule(config_.num_draft_tokens_schedule, trees, verify_method_name(*config_.method));
    check_confidence_threshold(config_.confidence_threshold, trees, verify_method_name(*config_.method));
    if (config_.confidence_threshold > 0.0 && drafter_ && !drafter_->stops_on_confidence())
      fail_parameter("confidence_threshold", " ", config_.confidence_threshold, ": drafter ", drafter_->description(),
                     " does not stop on its confidence (a draft model, an n-gram and the synthetic drafter do)");
  }
  if (!trees && !config_.tree_shape.empty()) fail_parameter("tree", " is only used by method tree");
  for (int32_t b : config_.tree_shape)
    if (b != 1 && !trees) fail_parameter("tree", " with branching needs method tree");
  if (const int32_t most = drafter_ ? drafter_->max_draft_depth() : 0; most > 0 && draft_depth(config_) > most)
    fail_parameter(config_.tree_shape.empty() ? "num_draft_tokens" : "tree", " asks for a draft ", draft_depth(config_),
                   " deep, but ", drafter_->description(), " drafts at most ", most, " tokens ahead");
  if (config_.device != Device::cpu) {  // refused by name before any work, never done on the CPU instead
    if (config_.logprobs >= 0)
      fail_parameter("logprobs", " is not supported on device ", device_name(config_.device),
                     ": the processed target rows stay on the device");
    check_device_support(config_.method, pipeline_.params(), draft_nodes(config_), config_.device);
  }
  // Under a constraint, point-mass drafts (prompt lookup) are cut at their first illegal token.
  if (drafter_ && pipeline_.params().constraint)
    drafter_ = std::make_shared<ConstrainedDrafterFactory>(drafter_, pipeline_.params().constraint);
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
  for (const TokenLogprob& t : l.top_processed)  // tokens the filters removed are not candidates: never listed
    if (probs[t.token] > 0.0f || mutant_on(Mutant::logprobs_top_lists_removed)) out.top.push_back(t);
  return out;
}

int64_t draft_depth(const GenerationConfig& config) {
  if (!config.method) return 0;
  return config.tree_shape.empty() ? config.num_draft_tokens : static_cast<int64_t>(config.tree_shape.size());
}

int64_t draft_nodes(const GenerationConfig& config) {
  if (!config.method) return 0;
  if (config.tree_shape.empty()) return config.num_draft_tokens;
  return tree_shape_nodes(config.tree_shape);
}

StepGraphTally Generator::step_graph_tally() const {
  StepGraphTally t = target_->step_graph_tally();
  const LanguageModel* draft = drafter_ ? drafter_->draft_model() : nullptr;
  if (draft && draft != target_.get()) {
    const StepGraphTally d = draft->step_graph_tally();
    t = StepGraphTally{t.runs + d.runs, t.replays + d.replays, t.built + d.built, t.evicted + d.evicted};
  }
  return t;
}

std::optional<SamplingParams> Generator::device_draft_params() const {
  if (!drafter_) return std::nullopt;
  const std::optional<SamplingParams> draft = drafter_->device_draw_params();
  // A chain that may stop on a greedy draft's doubt is drafted on the host, as ModelDrafterFactory::draws_on_device
  // decides (its doubt reads the law at temperature 1, which the device does not keep): no draws there to size.
  if (draft && config_.confidence_threshold > 0.0 && draft->temperature == 0.0f) return std::nullopt;
  return draft;
}

int64_t Generator::device_step_bytes(int64_t sequences) const {
  const std::optional<SamplingParams> draft = device_draft_params();
  return specula::device_step_bytes(target_->vocab_size(), pipeline_.params(), config_.method, sequences,
                                    draft_nodes(config_) + 1, draft ? &*draft : nullptr);
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

// One sequence in flight: its sessions, context and history, its output so far, and the step being verified.
struct Generator::Sequence {
  const std::vector<Token>* prompt = nullptr;
  uint64_t id = 0;
  GenerationMetrics* metrics = nullptr;
  TokenSink sink;
  std::unique_ptr<ModelSession> target;
  std::unique_ptr<Drafter> drafter;
  std::vector<Token> context;
  TokenHistory history;
  SequenceOutput out;
  uint64_t step = 0;
  int32_t num_draft_tokens = 0;  // the next step's chain length (GenerationConfig::num_draft_tokens_schedule)
  int64_t draft_forwards_before = 0;
  Clock::time_point start;
  // The step in flight.
  StepRandom rng;
  TokenTree tree;
  std::vector<float> logits;
  // The step's target rows in a device's memory (rows of BatchVerifier::device_logits), when the target wrote them
  // there; null when they are in `logits`.
  const float* device_logits = nullptr;
  // The step's number when its draft's ids stayed on the device (TokenTree::device_tokens): the target's pending
  // nodes' round (TreeLogitsCall::pending_round), for its session to learn them once verification brings them back.
  uint64_t pending_round = 0;
};

void Generator::begin(Sequence& s) const {
  begin_sessions(s);
  if (!config_.method) return;
  // The prompt is processed before the decoding loop, timed apart: the target's prefill, whose logits the
  // first verification call takes from the session's cache instead of running the prompt again, and the
  // drafter's begin (a draft model's prefill).
  if (prefills(s)) {
    std::vector<float> logits(target_->vocab_size());
    s.target->next_logits(*s.prompt, logits.data());
  }
  begin_drafter(s);
  s.metrics->prompt_seconds += seconds_since(s.start);
}

void Generator::begin_sessions(Sequence& s) const {
  s.start = Clock::now();
  s.target = target_->new_session();
  s.context = *s.prompt;
  s.num_draft_tokens = config_.num_draft_tokens;
  s.history = TokenHistory{};
  s.history.prompt = *s.prompt;
  // A penalised step's rows, the target's or the draft's, read the counts instead of the whole history.
  if (pipeline_.params().penalised() || (drafter_ && drafter_->drafts_penalised()))
    s.history.counts = std::make_shared<PenaltyCounts>(PenaltyCounts::of(s.history, target_->vocab_size()));
  // A pattern that matches only the empty output (with no stop token to emit) has ended before any token.
  if (pipeline_.params().match_ended(s.history)) s.out.stop_reason = StopReason::stop;
  if (config_.method) s.metrics->resize(static_cast<int32_t>(draft_depth(config_)));
}

bool Generator::prefills(const Sequence& s) const {
  return config_.method && !s.prompt->empty() && config_.max_new_tokens > 0;
}

void Generator::begin_drafter(Sequence& s) const {
  s.drafter = drafter_->create();
  s.drafter->set_target_session(s.target.get());
  s.drafter->begin(*s.prompt);
  s.draft_forwards_before = s.drafter->counters().n_forward;
}

bool Generator::finished(const Sequence& s) const {
  return static_cast<int32_t>(s.out.tokens.size()) >= config_.max_new_tokens || s.out.stop_reason == StopReason::stop;
}

void Generator::end(Sequence& s) const {
  GenerationMetrics& m = *s.metrics;
  if (s.drafter) m.draft_calls += s.drafter->counters().n_forward - s.draft_forwards_before;
  ++m.sequences;
  if (s.out.stop_reason == StopReason::stop) ++m.stopped;
  m.new_tokens += static_cast<int64_t>(s.out.tokens.size());
  s.out.wall_seconds = seconds_since(s.start);
}

void Generator::target_logits(Sequence& s) const {
  const auto t0 = Clock::now();
  s.logits.resize(target_->vocab_size());
  s.target->next_logits(s.context, s.logits.data());
  (s.step == 0 ? s.metrics->prompt_seconds : s.metrics->target_seconds) += seconds_since(t0);
}

void Generator::commit_token(Sequence& s, Token x, const float* probs) const {
  GenerationMetrics& m = *s.metrics;
  if (config_.logprobs >= 0) s.out.logprobs.push_back(emitted_logprobs(s.logits.data(), probs, s.history, x));
  s.history = pipeline_.advance(std::move(s.history), x, probs);
  s.context.push_back(x);
  s.out.tokens.push_back(x);
  ++m.target_calls;
  ++m.steps;
  ++m.emitted;
  ++s.step;
  if (s.sink) s.sink({x});
  if (pipeline_.params().ends_with(x, s.history)) s.out.stop_reason = StopReason::stop;
}

void Generator::sample_on_cpu(Sequence& s, std::vector<float>& probs) const {
  const int32_t V = target_->vocab_size();
  probs.resize(V);
  pipeline_.process(s.logits.data(), s.history, probs.data());
  const Token x =
      sample_categorical(probs.data(), V, RandomKey{config_.seed, philox_stream(s.id, RandomRole::sample), s.step});
  commit_token(s, x, probs.data());
}

void Generator::verify_on_cpu(Sequence& s, std::vector<float>& probs) const {
  probs.resize(s.logits.size());
  process_tree_rows(pipeline_, s.logits.data(), s.history, s.tree, probs.data());
  const VerifyOutcome outcome = verify(*config_.method, probs.data(), s.tree, target_->vocab_size(), s.rng);
  commit_step(s, outcome, probs.data(), 0.0, 0);
}

void Generator::draft_and_score(Sequence& s) const {
  auto t0 = Clock::now();
  draft(s);
  s.metrics->draft_seconds += seconds_since(t0);
  t0 = Clock::now();
  s.logits.resize(static_cast<size_t>(s.tree.size() + 1) * target_->vocab_size());
  s.target->tree_logits(s.context, s.tree, s.logits.data());
  ++s.metrics->target_calls;
  s.metrics->target_seconds += seconds_since(t0);
}

DraftRequest Generator::draft_request(Sequence& s) const {
  DraftRequest request;
  request.context = &s.context;
  request.history = &s.history;
  request.num_draft_tokens = s.num_draft_tokens;
  request.confidence_threshold = static_cast<float>(config_.confidence_threshold);
  request.tree_shape = config_.tree_shape;
  request.scheme = config_.tree_sampling;
  request.rng = s.rng = StepRandom{config_.seed, s.id, s.step};
  return request;
}

void Generator::draft(Sequence& s) const {
  s.tree = s.drafter->propose(draft_request(s));
  if (mutant_on(Mutant::draft_cut_at_unlikely_token)) cut_at_unlikely_token(s.tree);
}

void Generator::commit_step(Sequence& s, const VerifyOutcome& outcome, const float* probs, double expected_sum,
                            int32_t expected_count) const {
  const int32_t V = target_->vocab_size();
  const VerifyMethod method = *config_.method;
  GenerationMetrics& metrics = *s.metrics;
  SequenceOutput& out = s.out;
  const TokenTree& tree = s.tree;
  s.drafter->accept(outcome.accepted);
  if (outcome.emitted.empty()) fail("verifier ", verify_method_name(method), " emitted no token");

  // Commit the emitted tokens up to the first stop token (or a constraint's end) and at most max_new_tokens in all:
  // token i was drawn from the row after the first i accepted nodes. Tokens past the end are discarded (§9).
  size_t kept = 0;
  std::vector<Token> committed;
  while (kept < outcome.emitted.size() && static_cast<int32_t>(out.tokens.size()) < config_.max_new_tokens) {
    const Token x = outcome.emitted[kept];
    const int32_t from_row = kept == 0 ? 0 : outcome.path[kept - 1] + 1;
    const float* row = probs ? probs + static_cast<size_t>(from_row) * V : nullptr;
    if (config_.logprobs >= 0)
      out.logprobs.push_back(emitted_logprobs(s.logits.data() + static_cast<size_t>(from_row) * V, row, s.history, x));
    s.history = pipeline_.advance(std::move(s.history), x, row);
    s.context.push_back(x);
    out.tokens.push_back(x);
    committed.push_back(x);
    ++kept;
    if (pipeline_.params().ends_with(x, s.history)) {
      out.stop_reason = StopReason::stop;
      if (!mutant_on(Mutant::stop_checked_per_step)) break;
    }
  }
  if (s.sink) s.sink(committed);

  // Counters. `emitted` counts the tokens kept; the acceptance counters describe the verifier's work and
  // count the step as verified, before any cut (an acceptance rate is not lowered by where a sequence ends).
  // A position is "tested" when the verifier reached it (every earlier one was accepted).
  const int32_t positions = static_cast<int32_t>(draft_depth(config_));
  const int32_t depth = tree.size() ? tree.max_depth() : 0;
  int32_t tested = std::min(depth, outcome.accepted + (outcome.all_accepted ? 0 : 1));
  if (mutant_on(Mutant::tree_reached_counts_every_depth)) tested = depth;
  ++metrics.steps;
  metrics.proposed += mutant_on(Mutant::tree_proposed_counts_nodes) ? tree.size() : depth;
  metrics.accepted += outcome.accepted;
  metrics.emitted += static_cast<int64_t>(kept);
  metrics.q_zero_errors += outcome.q_zero_errors;
  if (outcome.accepted < static_cast<int32_t>(metrics.accepted_histogram.size()))
    ++metrics.accepted_histogram[outcome.accepted];
  const size_t rows = static_cast<size_t>(tree.size()) + 1;
  if (metrics.verify_rows_histogram.size() <= rows) metrics.verify_rows_histogram.resize(rows + 1);
  ++metrics.verify_rows_histogram[rows];
  int32_t row = 0;
  for (int32_t i = 0; i < tested && i < positions; ++i) {
    ++metrics.position_reached[i];
    if (i < outcome.accepted) ++metrics.position_accepted[i];
    const std::vector<int32_t> kids = tree.children(row);
    if (!kids.empty() && probs) {
      expected_sum +=
          acceptance_probability(probs + static_cast<size_t>(row) * V, tree.q_at_row(row), tree.tokens[kids[0]], V);
      ++expected_count;
    }
    if (i < outcome.accepted) row = outcome.path[i] + 1;
  }
  metrics.expected_acceptance_sum += expected_sum;
  metrics.expected_acceptance_count += expected_count;
  out.accept_lengths.push_back(outcome.accepted);
  ++s.step;
  // The next K from this step's outcome, decided before the next step draws anything (verify/ALGORITHMS.md §1, "A
  // draft length that varies").
  s.num_draft_tokens = next_num_draft_tokens(config_.num_draft_tokens_schedule, s.num_draft_tokens, depth,
                                             outcome.accepted, config_.num_draft_tokens);
}

SequenceOutput Generator::generate(const std::vector<Token>& prompt, uint64_t sequence, GenerationMetrics& metrics,
                                   const TokenSink& sink) const {
  check_fits(prompt);
  std::vector<Sequence> one(1);
  Sequence& s = one[0];
  s.prompt = &prompt;
  s.id = sequence;
  s.metrics = &metrics;
  s.sink = sink;
  if (config_.device != Device::cpu) return std::move(generate_lockstep(one)[0]);
  begin(s);
  std::vector<float> probs;
  while (!finished(s)) {
    if (!config_.method) {
      target_logits(s);
      sample_on_cpu(s, probs);
      continue;
    }
    draft_and_score(s);
    const auto t0 = Clock::now();
    verify_on_cpu(s, probs);
    metrics.verify_seconds += seconds_since(t0);
  }
  end(s);
  return std::move(s.out);
}

std::vector<SequenceOutput> Generator::generate_many(const std::vector<Token>& prompt, uint64_t first, int64_t count,
                                                     GenerationMetrics& metrics) const {
  if (count > 0) check_fits(prompt);
  const auto start = Clock::now();
  std::vector<SequenceOutput> out;
  if (config_.device != Device::cpu || config_.lockstep) {
    std::vector<const std::vector<Token>*> prompts(static_cast<size_t>(count), &prompt);
    std::vector<uint64_t> ids(static_cast<size_t>(count));
    for (int64_t n = 0; n < count; ++n) ids[n] = first + static_cast<uint64_t>(n);
    std::vector<GenerationMetrics> each(static_cast<size_t>(count));
    out = generate_batch(prompts, ids, each);
    for (const GenerationMetrics& m : each) metrics.merge(m);
    metrics.wall_seconds += seconds_since(start);
    return out;
  }
  out.resize(count);
  std::vector<std::string> errors(count);
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

std::vector<SequenceOutput> Generator::generate_batch(const std::vector<const std::vector<Token>*>& prompts,
                                                      const std::vector<uint64_t>& sequences,
                                                      std::vector<GenerationMetrics>& metrics) const {
  if (prompts.size() != sequences.size() || metrics.size() != sequences.size())
    fail("generate_batch: ", prompts.size(), " prompts, ", sequences.size(), " sequence numbers and ", metrics.size(),
         " metrics");
  for (const std::vector<Token>* p : prompts) check_fits(*p);
  if (config_.device == Device::cpu && !config_.lockstep) {
    std::vector<SequenceOutput> out;
    for (size_t i = 0; i < prompts.size(); ++i) out.push_back(generate(*prompts[i], sequences[i], metrics[i]));
    return out;
  }
  std::vector<Sequence> batch(prompts.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    batch[i].prompt = prompts[i];
    batch[i].id = sequences[i];
    batch[i].metrics = &metrics[i];
  }
  return generate_lockstep(batch);
}

namespace {

// Runs f(i) for every index of `items` in parallel; the first error (in index order) is thrown after all ran.
template <class F>
void parallel_each(const std::vector<size_t>& items, F&& f) {
  std::vector<std::string> errors(items.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t k = 0; k < items.size(); ++k) {
    try {
      f(items[k]);
    } catch (const std::exception& e) {
      errors[k] = e.what();
    }
  }
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e);
}

// The target call of a sequence with no draft tree (a prefill, an `ar` step).
const TokenTree kNoTree;

// One phase's target calls: one batch_tree_logits when the target batches its forwards, else each call on its own,
// in parallel over threads.
void run_target_calls(const LanguageModel& target, const std::vector<TreeLogitsCall>& calls) {
  if (target.batches_forwards()) return target.batch_tree_logits(calls);
  std::vector<size_t> all(calls.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  parallel_each(all, [&](size_t i) { calls[i].session->tree_logits(*calls[i].context, *calls[i].tree, calls[i].out); });
}

}  // namespace

void Generator::score_lockstep(std::vector<Sequence>& batch, const std::vector<size_t>& active,
                               BatchVerifier* device) const {
  const size_t V = static_cast<size_t>(target_->vocab_size());
  // Straight into the kernels' buffer when the target can write there, so the rows never pass through the host:
  // cuda-host's device memory is the host's (every model), a GPU's only a model computing on it can write.
  const bool out_on_gpu = device && device->device() == Device::cuda && target_->writes_gpu_logits();
  const bool in_place = device && (device->device() == Device::cuda_host || out_on_gpu);
  size_t rows = 0;
  for (size_t i : active) {
    Sequence& s = batch[i];
    if (!config_.method) s.tree = kNoTree;
    rows += static_cast<size_t>(s.tree.size()) + 1;
  }
  float* next_row = in_place ? device->device_logits(static_cast<int64_t>(rows)) : nullptr;
  std::vector<TreeLogitsCall> calls;
  for (size_t i : active) {
    Sequence& s = batch[i];
    const size_t n = static_cast<size_t>(s.tree.size()) + 1;
    if (in_place) {
      s.device_logits = next_row;
      calls.push_back(TreeLogitsCall{s.target.get(), &s.context, &s.tree, next_row, out_on_gpu});
      if (s.tree.device_tokens) {  // every node's id where the draft's draws left it
        calls.back().device_tokens = s.tree.device_tokens;
        calls.back().pending_round = s.pending_round;
      }
      next_row += n * V;
    } else {
      s.device_logits = nullptr;
      s.logits.resize(n * V);
      calls.push_back(TreeLogitsCall{s.target.get(), &s.context, &s.tree, s.logits.data()});
    }
  }
  const auto t0 = Clock::now();
  run_target_calls(*target_, calls);
  // The kernels follow the stream the target's writes were ordered on when the verifier was made; writes ordered on
  // another (LibTorch's current stream changed since) would be read before they land.
  if (out_on_gpu && target_->device_stream() != device->followed_stream())
    fail("lockstep: ", target_->description(),
         " wrote a step's logits on another CUDA stream than the one the "
         "kernels follow (LibTorch's current stream changed during the run); they would be read before written");
  const double wall = seconds_since(t0);
  for (size_t i : active) {
    Sequence& s = batch[i];
    if (config_.method) ++s.metrics->target_calls;
    (!config_.method && s.step == 0 ? s.metrics->prompt_seconds : s.metrics->target_seconds) += wall;
  }
}

void Generator::count_lockstep_rows(std::vector<Sequence>& batch, const std::vector<size_t>& active) const {
  size_t widest = 0;
  for (size_t i : active) widest = std::max(widest, static_cast<size_t>(batch[i].tree.size()) + 1);
  for (size_t i : active) {
    std::vector<int64_t>& h = batch[i].metrics->lockstep_rows_histogram;
    if (h.size() <= widest) h.resize(widest + 1);
    ++h[widest];
  }
}

std::vector<SequenceOutput> Generator::generate_lockstep(std::vector<Sequence>& batch) const {
  // Bounded before work: the batch's target sessions are alive together, in the GPU's memory (a model on the
  // device) or the host's.
  const int64_t session = target_->session_bytes(), sessions = session * static_cast<int64_t>(batch.size());
  const bool sessions_on_device = config_.device != Device::cpu && target_->sessions_in_device_memory();
  // A draft's ids may stay on the device until verification brings them back (one wait a step, not two) when the
  // target's forward reads them where they lie (in GPU memory for a target on the GPU, in host memory for one on the
  // host under cuda-host); penalties count a row's path there (TokenHistory::pending_ids).
  const bool ids_may_stay = config_.device != Device::cpu && config_.method && target_->batches_forwards() &&
                            target_->reads_device_tokens_in(config_.device == Device::cuda);
  std::optional<BatchVerifier> device;
  if (config_.device != Device::cpu) {
    // On the stream the target's device writes are ordered on, when it has one (LibTorch's current stream).
    device.emplace(config_.device, pipeline_, config_.method, config_.emulation,
                   target_->writes_gpu_logits() ? target_->device_stream() : std::nullopt);
    // Every sequence's step buffers at the deepest draft (with a draft drawn there, its plans'), with the sessions
    // when they share the device.
    const int64_t sequences = static_cast<int64_t>(batch.size()), rows = draft_nodes(config_) + 1;
    device->check_fits(sequences, rows, device_step_bytes(sequences), sessions_on_device ? sessions : 0);
    const std::optional<SamplingParams> draft = device_draft_params();
    const bool tree = !config_.tree_shape.empty(),
               ranked = tree && config_.tree_sampling == SiblingScheme::deterministic;
    StepReservation r{sequences, rows, draft_depth(config_), draft ? &*draft : nullptr};
    // Trees not drawn fed (ranked ones, or siblings without replacement, from a model that does not read device ids)
    // draw a depth at a time; ranked ones keep no law.
    r.draft_depths_alone = tree && config_.tree_sampling != SiblingScheme::iid;
    r.draft_laws = !ranked;
    // Rows computed on the host reach a GPU through staging (cuda-host's models write its memory in place).
    const bool gpu = config_.device == Device::cuda;
    r.target_rows_from_host = gpu && !target_->writes_gpu_logits();
    r.draft_rows_from_host = gpu && draft && drafter_->device_draws_read_host_rows(device->followed_stream());
    // The target counts a fed draft's ids where they lie when they stay on the device.
    r.target_ids_pending = ids_may_stay;
    // q rows come from the host unless the draft is drawn on the device (its laws stay there) or ranked (none); a node
    // asking for more siblings without replacement than the device draws is drawn on the host.
    const int32_t most = device->most_ranked_children();
    const bool siblings_on_host =
        r.draft_depths_alone &&
        std::any_of(config_.tree_shape.begin(), config_.tree_shape.end(), [&](int32_t b) { return b > most; });
    // (A moving K's chains are drawn there too, at the batch's longest K, within the deepest draft's buffers.)
    r.host_q = drafter_ && (!draft || siblings_on_host) && drafter_->records_draft_laws() && !ranked;
    device->reserve(r);
  }
  if (!sessions_on_device)
    check_sessions_fit_host(*target_, static_cast<int64_t>(batch.size()),
                            "lockstep: " + std::to_string(batch.size()) + " sequences", "run fewer sequences together");
  // The sequences begin together: sessions, then (speculative methods) the target's prefill of every prompt in one
  // batched call, then the drafters (which may read the prefill's features). Every sequence starts at the phase's
  // start and is charged its wall as prompt time, as the baseline's batched first step is.
  std::vector<size_t> all(batch.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto start = Clock::now();
  parallel_each(all, [&](size_t i) { begin_sessions(batch[i]); });
  if (config_.method) {
    std::vector<std::vector<float>> logits;
    logits.reserve(batch.size());
    std::vector<TreeLogitsCall> calls;
    for (Sequence& s : batch)
      if (prefills(s)) {
        logits.emplace_back(static_cast<size_t>(target_->vocab_size()));
        calls.push_back(TreeLogitsCall{s.target.get(), s.prompt, &kNoTree, logits.back().data()});
      }
    run_target_calls(*target_, calls);
    parallel_each(all, [&](size_t i) { begin_drafter(batch[i]); });
    const double wall = seconds_since(start);
    for (Sequence& s : batch) s.metrics->prompt_seconds += wall;
  }
  for (Sequence& s : batch) s.start = start;
  static std::atomic<uint64_t> rounds{0};
  // The models' step graphs during each step, charged to each of its sequences as the device's waits are.
  StepGraphTally graphs_before = step_graph_tally();
  std::vector<size_t> stepped;  // the sequences of the step before
  const auto charge_graphs = [&] {
    const StepGraphTally now = step_graph_tally();
    for (size_t i : stepped) {
      GenerationMetrics& m = *batch[i].metrics;
      m.step_graph_runs += now.runs - graphs_before.runs;
      m.step_graph_replays += now.replays - graphs_before.replays;
      m.step_graphs_built += now.built - graphs_before.built;
      m.step_graphs_evicted += now.evicted - graphs_before.evicted;
    }
    graphs_before = now;
  };
  for (;;) {
    charge_graphs();
    std::vector<size_t> active;
    for (size_t i = 0; i < batch.size(); ++i)
      if (!finished(batch[i])) active.push_back(i);
    if (active.empty()) break;
    stepped = active;
    // The device's waits during the step (for results, and the staging guard's), charged to each of its sequences (by
    // charge_waits, before the step ends).
    const uint64_t waits_before = device ? device->waits() : 0, staging_before = device ? device->staging_waits() : 0,
                   growth_before = device ? device->growth_drains() : 0;
    const auto charge_waits = [&] {
      const int64_t asked = static_cast<int64_t>(device->requested_bytes());
      for (size_t i : active) {
        GenerationMetrics& m = *batch[i].metrics;
        m.device_waits += static_cast<int64_t>(device->waits() - waits_before);
        m.staging_waits += static_cast<int64_t>(device->staging_waits() - staging_before);
        m.growth_waits += static_cast<int64_t>(device->growth_drains() - growth_before);
        m.device_buffer_bytes = std::max(m.device_buffer_bytes, asked);
      }
    };
    // Each phase's wall time is charged to every sequence of the step: the batch waits for the phase as a whole,
    // so a sequence's times add up to its wall time, and the cost model sees a batched step beside the baseline's.
    if (config_.method) {
      const auto t0 = Clock::now();
      // A draft model: one forward per depth for the batch, its chains and trees drawn on the device when there is
      // one.
      std::vector<Drafter*> drafters;
      std::vector<DraftRequest> requests;
      for (size_t i : active) {
        drafters.push_back(batch[i].drafter.get());
        requests.push_back(draft_request(batch[i]));
        requests.back().device = device ? &*device : nullptr;
        requests.back().ids_may_stay_on_device = ids_may_stay;
        batch[i].pending_round = ids_may_stay ? ++rounds : 0;
      }
      if (drafter_->batches_proposals() || drafter_->draws_on_device(requests)) {
        std::vector<TokenTree> trees = drafter_->propose_batch(drafters, requests);
        for (size_t k = 0; k < active.size(); ++k) batch[active[k]].tree = std::move(trees[k]);
      } else {
        parallel_each(active, [&](size_t i) { draft(batch[i]); });
      }
      const double wall = seconds_since(t0);
      for (size_t i : active) batch[i].metrics->draft_seconds += wall;
    }
    score_lockstep(batch, active, device ? &*device : nullptr);
    if (config_.method) count_lockstep_rows(batch, active);
    if (!device) {  // sampled / verified on the CPU, each sequence as alone
      const auto t0 = Clock::now();
      parallel_each(active, [&](size_t i) {
        thread_local std::vector<float> probs;
        if (config_.method)
          verify_on_cpu(batch[i], probs);
        else
          sample_on_cpu(batch[i], probs);
      });
      const double wall = seconds_since(t0);
      if (config_.method)
        for (size_t i : active) batch[i].metrics->verify_seconds += wall;
      continue;
    }
    const auto step_logits = [](const Sequence& s) { return s.device_logits ? s.device_logits : s.logits.data(); };
    const LogitsAt at = batch[active[0]].device_logits ? LogitsAt::device : LogitsAt::host;
    if (!config_.method) {
      std::vector<DeviceDraw> draws;
      for (size_t i : active)
        draws.push_back(
            DeviceDraw{step_logits(batch[i]), &batch[i].history,
                       RandomKey{config_.seed, philox_stream(batch[i].id, RandomRole::sample), batch[i].step}});
      const auto t1 = Clock::now();
      const std::vector<Token> tokens = device->sample(draws, at);
      const double wall = seconds_since(t1);
      charge_waits();
      for (size_t k = 0; k < active.size(); ++k) {
        batch[active[k]].metrics->verify_seconds += wall;
        commit_token(batch[active[k]], tokens[k], nullptr);
      }
      continue;
    }
    std::vector<DeviceStep> steps;
    for (size_t i : active)
      steps.push_back(DeviceStep{step_logits(batch[i]), &batch[i].tree, &batch[i].history, batch[i].rng});
    const auto t1 = Clock::now();
    const std::vector<DeviceStepResult> results = device->verify(steps, at);
    const double wall = seconds_since(t1);
    charge_waits();
    for (size_t k = 0; k < active.size(); ++k) {
      Sequence& s = batch[active[k]];
      s.metrics->verify_seconds += wall;
      if (s.tree.device_tokens) {  // the draft's ids, back with the outcome: the sessions follow the accepted path
        // (a hole, -1, is a node never drawn; the target read token 0 there, and the drafter counts it out)
        s.tree.tokens = results[k].draft_tokens;
        s.tree.device_tokens = nullptr;
        s.drafter->tokens_known(s.tree);
        s.tree = with_placeholders(std::move(s.tree));
        s.target->tree_tokens_known(s.tree, s.pending_round);
      }
      commit_step(s, results[k].outcome, nullptr, results[k].expected_acceptance_sum,
                  results[k].expected_acceptance_count);
    }
  }
  std::vector<SequenceOutput> out;
  for (Sequence& s : batch) {
    end(s);
    out.push_back(std::move(s.out));
  }
  return out;
}

}  // namespace specula
