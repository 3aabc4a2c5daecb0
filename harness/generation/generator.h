// The generation loop: plain autoregressive sampling from the target (`ar`, the baseline) or speculative
// decoding (draft -> one target call over the draft tree -> per-row processed p -> verifier), one
// sequence at a time per session. Sequences are independent: sequence n draws only from Philox streams
// keyed by n, so outputs do not depend on threads or batch composition.
//
// One stop rule for every method: a sequence ends when it emits one of the target's stop tokens
// (SamplingParams::stop_tokens; the stop token is emitted and counted), when its constraint's match is complete
// and no token can continue it (TokenConstraint::ended: the last token is emitted), or when it has
// max_new_tokens tokens. Tokens a verification step emits after the end are discarded. Stopping is a function of the
// emitted prefix, so the law of stopped sequences is the target's autoregressive law of stopped
// sequences whenever the unstopped law is exact (verify/ALGORITHMS.md §9).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "draft/drafter.h"
#include "harness/generation/draft_schedule.h"
#include "harness/generation/generation_metrics.h"
#include "harness/models/language_model.h"
#include "kernels/cuda_device.h"
#include "kernels/emulated_kernels.h"
#include "verify/sampling/logprobs.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/verification.h"

namespace specula {

class BatchVerifier;  // verify/device/batch_verifier.h

// The longest draft chain a verification call takes (a tree is bounded by its 4096 nodes instead).
inline constexpr int32_t kMaxDraftTokens = 256;
// The most tokens one sequence may generate (max_new_tokens): bounded before any work, so a typo cannot start a
// record that would take days and hold gigabytes (a run stops between records, harness/io/stop_signals.h).
inline constexpr int32_t kMaxNewTokens = 1 << 20;

// Draft tokens per step (K) when neither --num-draft-tokens nor [draft] num_draft_tokens says.
inline constexpr int32_t kDefaultNumDraftTokens = 4;

struct GenerationConfig {
  std::optional<VerifyMethod> method;                 // nullopt = autoregressive baseline (`ar`)
  int32_t num_draft_tokens = kDefaultNumDraftTokens;  // chain length K (the most a schedule asks for)
  // How a chain's K moves between a sequence's steps (draft_schedule.h): constant, or from K down to 1 and back.
  DraftSchedule num_draft_tokens_schedule = DraftSchedule::constant;
  // A chain stops after a draft its law gave less than this, the draft kept (0: never; draft_schedule.h).
  double confidence_threshold = 0.0;
  std::vector<int32_t> tree_shape;  // for method tree; empty = chain of K with i.i.d. draws
  SiblingScheme tree_sampling = SiblingScheme::iid;
  int32_t max_new_tokens = 16;
  uint64_t seed = 0;
  int32_t logprobs = -1;  // -1 = off; n >= 0: record every emitted token's logprobs with the top n
  // Where the target rows are sampled and verified. cpu: on the CPU, sequence by sequence (the reference path).
  // cuda, cuda_host: generate_many and generate_batch run their sequences in lockstep and sample / verify every
  // sequence's step in one device launch (verify/device/batch_verifier.h); a draft model's chains and trees are
  // drawn there too (DrafterFactory::draws_on_device).
  Device device = Device::cpu;
  // On the CPU too, generate_many and generate_batch run their sequences in lockstep: per step every unfinished
  // sequence drafts, the target runs once for all of them (LanguageModel::batch_tree_logits: one pass over its
  // weights for the batch), and each is sampled / verified on the CPU as alone. Outputs equal the sequence-by-
  // sequence path's (a transformer computes each row independently of the rows beside it). Devices always do.
  bool lockstep = false;
  EmulationOptions emulation;  // cuda_host's block emulation
};

// How far a step's drafts reach past the context: 0 for `ar`, the tree's depth, or K.
int64_t draft_depth(const GenerationConfig& config);
// How many draft tokens a step verifies at most: 0 for `ar`, the tree's nodes, or K.
int64_t draft_nodes(const GenerationConfig& config);

enum class StopReason { length, stop };           // reached max_new_tokens | emitted a stop token, or ended a match
const char* stop_reason_name(StopReason reason);  // "length" | "stop"

// Per emitted token, with GenerationConfig::logprobs >= 0: its log-probability under the target's processed
// row at its position (at temperature 0: the row processed at temperature 1, the distribution the greedy
// argmax is taken over), under the softmax of the raw logits, and the processed row's top-n.
struct EmittedLogprobs {
  Token token;
  double logprob;
  double raw_logprob;
  std::vector<TokenLogprob> top;  // most probable first (ties by id); tokens of probability 0 left out
};

struct SequenceOutput {
  std::vector<Token> tokens;  // generated: up to and including a stop token (or a match's end), <= max_new_tokens
  StopReason stop_reason = StopReason::length;
  std::vector<int32_t> accept_lengths;    // drafts the verifier accepted per step (Spec-Bench's accept_lengths)
  std::vector<EmittedLogprobs> logprobs;  // one per token, when requested
  double wall_seconds = 0.0;
};

// Called with the tokens each step commits (after the stop rule), for streaming output.
using TokenSink = std::function<void(const std::vector<Token>& committed)>;

class Generator {
 public:
  // `drafter` may be null for `ar`. Throws Error when draft and target vocabularies differ.
  Generator(std::shared_ptr<const LanguageModel> target, SamplingParams target_params,
            std::shared_ptr<const DrafterFactory> drafter, GenerationConfig config);

  // Generates sequence number `sequence` from `prompt`, adding its counters to `metrics`.
  SequenceOutput generate(const std::vector<Token>& prompt, uint64_t sequence, GenerationMetrics& metrics,
                          const TokenSink& sink = nullptr) const;

  // Generates sequences first..first+count-1: in parallel over threads on the CPU, in one lockstep batch on a
  // device or with GenerationConfig::lockstep.
  std::vector<SequenceOutput> generate_many(const std::vector<Token>& prompt, uint64_t first, int64_t count,
                                            GenerationMetrics& metrics) const;

  // Generates sequence sequences[i] from *prompts[i] for every i, adding its counters to metrics[i]. On a
  // device (or with GenerationConfig::lockstep) the sequences run in lockstep: each step drafts for every
  // unfinished sequence (in parallel over threads), runs the target once for all of them (batch_tree_logits), then
  // samples and verifies all of them in one launch (on the CPU: each on its own); otherwise they run one by one.
  // The outputs are the same either way (up to float64 summation order on the device, see kernels/README.md,
  // "Parity"; and GEMM summation order where a model on a GPU runs batched rows).
  std::vector<SequenceOutput> generate_batch(const std::vector<const std::vector<Token>*>& prompts,
                                             const std::vector<uint64_t>& sequences,
                                             std::vector<GenerationMetrics>& metrics) const;

  // Throws Error (with the numbers) when `prompt` and max_new_tokens, with the draft tree on top, need more
  // positions than the target holds: found before any work, not at the position that overflows.
  void check_fits(const std::vector<Token>& prompt) const;

  // On a device: the bytes the step buffers of `sequences` sequences decoded in lockstep ask for at most, with a draft
  // drawn there (DrafterFactory::device_draw_params); checked against free memory before the first step
  // (BatchVerifier::check_fits), and a bound on each record's device_buffer_bytes.
  int64_t device_step_bytes(int64_t sequences) const;

  const GenerationConfig& config() const { return config_; }
  const SamplerPipeline& target_pipeline() const { return pipeline_; }

 private:
  struct Sequence;  // one sequence in flight (generator.cpp)
  // The settings of the draws the drafter may make on a device (DrafterFactory::device_draw_params), or none (also
  // for chains that may stop on a greedy draft's doubt, drafted on the host).
  std::optional<SamplingParams> device_draft_params() const;
  // The target's and the draft model's step graphs so far (LanguageModel::step_graph_tally), each model once.
  StepGraphTally step_graph_tally() const;
  // A sequence's start: its sessions, the target's prefill of its prompt (speculative methods), its drafter. In
  // lockstep the three run as phases over the batch, the prefill batched.
  void begin(Sequence& s) const;
  void begin_sessions(Sequence& s) const;
  bool prefills(const Sequence& s) const;
  void begin_drafter(Sequence& s) const;
  bool finished(const Sequence& s) const;
  // Autoregressive step: the target's logits at the context, then commit the token drawn from them.
  void target_logits(Sequence& s) const;
  void commit_token(Sequence& s, Token x, const float* probs) const;
  // Autoregressive step on the CPU: sample from s.logits and commit (probs: scratch).
  void sample_on_cpu(Sequence& s, std::vector<float>& probs) const;
  // Speculative step: draft (draft), run the target over the tree (draft_and_score does both), then commit the
  // verifier's outcome (commit_step). `probs` are the processed rows on the CPU path; on a device they stay there
  // (null) and the expected acceptance comes from the kernel.
  void draft(Sequence& s) const;                  // untimed: its callers charge the time
  DraftRequest draft_request(Sequence& s) const;  // the step's request (and s.rng)
  void draft_and_score(Sequence& s) const;
  // The target rows of every sequence `active` names (its context alone for `ar`, else its draft tree), in one
  // batch_tree_logits call when the target batches forwards, else each on its own, in parallel over threads; each
  // sequence is charged the phase's wall time (the batch waits for it whole). With `device`, rows go straight into
  // its device_logits (all sequences' rows in order): always on cuda-host, on cuda when the target writes GPU logits.
  void score_lockstep(std::vector<Sequence>& batch, const std::vector<size_t>& active, BatchVerifier* device) const;
  // Counts the step in each active sequence's lockstep_rows_histogram, at the rows of the step's widest call.
  void count_lockstep_rows(std::vector<Sequence>& batch, const std::vector<size_t>& active) const;
  // Verification on the CPU of a step whose target rows are in s.logits, then commit (probs: scratch); untimed.
  void verify_on_cpu(Sequence& s, std::vector<float>& probs) const;
  void commit_step(Sequence& s, const VerifyOutcome& outcome, const float* probs, double expected_sum,
                   int32_t expected_count) const;
  void end(Sequence& s) const;
  std::vector<SequenceOutput> generate_lockstep(std::vector<Sequence>& batch) const;
  // The logprobs of `token` emitted from the row with raw logits `logits` and processed law `probs` after `history`.
  EmittedLogprobs emitted_logprobs(const float* logits, const float* probs, const TokenHistory& history,
                                   Token token) const;

  std::shared_ptr<const LanguageModel> target_;
  SamplerPipeline pipeline_;
  SamplerPipeline unit_temperature_pipeline_;  // the target's settings at temperature 1 (greedy rows' logprobs)
  std::shared_ptr<const DrafterFactory> drafter_;
  GenerationConfig config_;
};

}  // namespace specula
