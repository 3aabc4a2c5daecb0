// A decoding step of many sequences on a device (--device cuda | cuda-host): the target rows of every
// sequence go through the fused sampler (the sampler pipeline on the device) and then through one
// verification launch for the whole batch. Per step: the raw logits, either uploaded from the host or
// already in device memory (LogitsAt::device: a model on the device wrote them into device_logits(), and they
// are read in place), the recorded draft laws q (uploaded, or read in place where draw_drafts left them) and the
// rows' histories (bitmaps and counts where penalties need them) uploaded, two launches, and one download of the
// emitted tokens and counters. Buffers persist across steps (KernelStream).
//
// Semantics are the CPU generator's: p rows are SamplerPipeline::process of each tree row with that row's
// history (verify/verifiers/target_rows.h), q rows are the drafter's recorded laws (processed by the draft's own
// pipeline where the draft was sampled: on the CPU, or here for a draft model's chains and trees, draw_drafts), and
// greedy/chain/block/tree follow verify_greedy/verify_chain/verify_block/verify_tree draw for draw (the same Philox
// keys). Greedy verification is the chain kernel on greedy (one-hot) rows with point-mass drafts, which decides exactly
// as verify_greedy. What the kernels cannot do is refused by name before any work (check_device_support).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cuda_device.h"
#include "kernels/emulated_kernels.h"
#include "kernels/kernel_stream.h"
#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/token_tree.h"
#include "verify/verifiers/verification.h"

namespace specula {

// Throws ParameterError naming what the device path cannot do for these settings: a lossy method
// (typical), what the fused sampler cannot apply (unsupported_on_cuda), a chain of more than kMaxVerifyDraft
// drafts or a tree of more than kMaxVerifyTreeNodes nodes (`draft_nodes`: K, or the tree's nodes). `method`
// nullopt is the autoregressive baseline.
void check_device_support(const std::optional<VerifyMethod>& method, const SamplingParams& target, int64_t draft_nodes,
                          Device device);

// Bytes of the device buffers a batch's steps ask for at most (the sum over BatchVerifier's slots of each one's
// largest request, KernelStream::requested_device_bytes): `sequences` steps of at most `rows_per_sequence` target rows
// each, at vocabulary `vocab`, with `draft` the settings of a draft drawn on the device (null: none).
int64_t device_step_bytes(int32_t vocab, const SamplingParams& target, const std::optional<VerifyMethod>& method,
                          int64_t sequences, int64_t rows_per_sequence, const SamplingParams* draft = nullptr);
// The device memory buffers asked for `step_bytes` by steps of at most `rows` rows may hold: each slot grows to half
// again past its request, and takes at least the reservation's floor (BatchVerifier::reserve).
int64_t held_device_bytes(int64_t step_bytes, int64_t rows);

// Where the logits of a verify() or sample() call are. host: anywhere in host memory, uploaded by the call.
// device: in device_logits(rows), the calls' rows in order (a step's tree rows sequence by sequence, or one row
// per draw), read in place; a pointer elsewhere is refused.
enum class LogitsAt { host, device };

// One sequence's step.
struct DeviceStep {
  const float* logits = nullptr;          // [tree->size() + 1, V] raw target logits of the tree's rows
  const TokenTree* tree = nullptr;        // drafts (a chain for greedy, chain and block)
  const TokenHistory* history = nullptr;  // the committed history (row 0's)
  StepRandom rng;                         // the step's keys (seed, sequence, step)
};

struct DeviceStepResult {
  VerifyOutcome outcome;
  // The tree's node ids when they were in device memory (TokenTree::device_tokens), its size's, brought back with the
  // outcome (-1 for a hole: a node of siblings without replacement never drawn, on no accepted path); empty otherwise.
  std::vector<Token> draft_tokens;
  double expected_acceptance_sum = 0.0;  // GenerationMetrics::expected_acceptance_sum of this step
  int32_t expected_acceptance_count = 0;
};

// One autoregressive draw.
struct DeviceDraw {
  const float* logits = nullptr;          // [V] raw target logits
  const TokenHistory* history = nullptr;  // the history the row is processed with
  RandomKey key;                          // sample_categorical's key on the CPU path
};

// One draw of a draft model's draft on the device (BatchVerifier::draw_drafts): which sequence's laws it belongs to,
// and the row of them where its processed row is kept.
struct DraftDraw {
  DeviceDraw draw;
  int64_t sequence = 0;
  int32_t law_row = 0;
};

// A draft's probability under the law it was drawn from: row `row` of sequence `sequence`'s draft laws, at the draft's
// token: `token` (BatchVerifier::draft_law_values), or the id of node `node` among the sequence's kept ids
// (BatchVerifier::kept_law_values).
struct DraftLawEntry {
  int64_t sequence = 0;
  int32_t row = 0;
  Token token = -1;
  int32_t node = -1;
};

// Where a fused-sampler launch of BatchVerifier reads and writes rows, other than one logits row and one scratch row
// each in order: a draft model's draws (draw_drafts). SamplerKernelParams::logits_rows / probs_rows.
struct SamplerRowMaps {
  const std::vector<int32_t>* input_rows = nullptr;   // row r is processed with history input_rows[r] (its bitmaps
                                                      // and counts built and uploaded once for all its rows)
  const std::vector<int32_t>* logits_rows = nullptr;  // row r reads row logits_rows[r]: of device_logits
                                                      // (LogitsAt::device), or of the uploaded `logits`
  float* probs = nullptr;                             // where the processed rows go (null: the step's scratch)
  const std::vector<int32_t>* probs_rows = nullptr;   // row r's processed row: row probs_rows[r] of `probs`
};

// A device array of `count` token ids that histories' pending ids index (TokenHistory::pending_ids).
struct PendingIds {
  const int32_t* ids = nullptr;
  int64_t count = 0;
};

// What a run's largest step stages on the device (BatchVerifier::reserve): `sequences` steps of at most
// `rows_per_sequence` rows each, and what its settings add to every step's arrays.
struct StepReservation {
  int64_t sequences = 0;
  int64_t rows_per_sequence = 0;
  // The most ids a row's path may leave pending on the device (the draft's depth): two int32 each, staged for a
  // penalised pipeline's counts.
  int64_t path_ids = 0;
  // The settings of a draft drawn on the device (DrafterFactory::device_draw_params), whose plans stage their own
  // inputs; with `draft_depths_alone` (ranked trees, or siblings drawn without replacement, a depth at a time where the
  // draft model does not read its ids on the device) in the target's slots too; `draft_laws`: whether its draws keep
  // their laws there (all but ranked trees).
  const SamplingParams* draft = nullptr;
  bool draft_depths_alone = false;
  bool draft_laws = true;
  // Rows a model computes on the host (LogitsAt::host), staged and uploaded through a host array of [rows, V]: the
  // target's (a target off the GPU), and a draft's drawn on the device (a draft model off it).
  bool target_rows_from_host = false;
  bool draft_rows_from_host = false;
  // Whether the target's rows count ids still pending on the device (a fed draft's ids kept for verification).
  bool target_ids_pending = false;
  // q rows a host drafter records (a sampled draft verified by a method that reads q), staged and uploaded with each
  // verification: [rows, V] on both sides.
  bool host_q = false;
};

class BatchVerifier {
 public:
  // Throws "no CUDA device: ..." for cuda without a GPU. `method` nullopt: only sample() is used.
  // `cuda_stream` (cuda): the stream the caller's device writes are ordered on (make_kernel_stream), so that the
  // kernels read logits a model wrote there without a host synchronisation.
  BatchVerifier(Device device, const SamplerPipeline& target, std::optional<VerifyMethod> method,
                const EmulationOptions& emulation = {}, std::optional<void*> cuda_stream = std::nullopt);

  // Refuses, before any work, a batch whose step buffers would not fit the device's free memory: `sequences` steps
  // of at most `rows_per_sequence` rows each asking for `step_bytes` (device_step_bytes; held_device_bytes of them),
  // plus `session_bytes` the batch's model sessions will take there (KV caches of a model on the GPU; 0 when they
  // live on the host).
  void check_fits(int64_t sequences, int64_t rows_per_sequence, int64_t step_bytes, int64_t session_bytes = 0) const;
  // Allocates, before a run's first step, what its largest step takes (StepReservation): the [rows, V] arrays every
  // step uses, and a floor under every other buffer that holds a per-row array at its largest
  // (KernelStream::set_allocation_floor). A reserved run's buffers do not grow, so no step drains the stream to grow
  // one (growth_drains).
  void reserve(const StepReservation& r);

  std::vector<DeviceStepResult> verify(const std::vector<DeviceStep>& steps, LogitsAt at = LogitsAt::host);
  std::vector<Token> sample(const std::vector<DeviceDraw>& draws, LogitsAt at = LogitsAt::host);

  // The device array [rows, V] a model writes a call's raw logits into for LogitsAt::device. Kept across calls
  // and grown geometrically (KernelStream::device_buffer); valid until a call asks for more rows.
  float* device_logits(int64_t rows);

  // A draft model's chains and trees drawn on the device (draft/model_drafter.cpp), so that no draft law q
  // crosses to the host: draft_laws(B, N) before a batch's proposal makes room for the laws of B drafts of N nodes
  // (chains of N drafts, or trees of N nodes), laid out as verify() reads q rows (sequence b's row r at b * (N + 1) +
  // r: the layout of B steps of N nodes each); each draw_drafts then draws one depth of every sequence in one launch,
  // keeping each processed row (the law its tokens were drawn from) at its row of that sequence's laws. A step whose
  // tree has TokenTree::device_q at its row of those laws is verified reading them in place. The laws are valid until
  // the next draft_laws call.
  float* draft_laws(int64_t sequences, int32_t drafts);
  // One draw each (its raw logits processed by `draft`'s pipeline with its history, drawn with its key), all in one
  // launch; a row drawn from several times (a tree's children of one node) is read once per draw. Each draw keeps its
  // processed row at row `law_row` of sequence `sequence`'s laws, no two at one row. LogitsAt::device: every draw's
  // logits are a row of device_logits (anywhere among them); host: uploaded, each distinct row once. Throws Error
  // naming the row and sequence on a failed row, as the CPU's pipeline would.
  std::vector<Token> draw_drafts(const SamplerPipeline& draft, const std::vector<DraftDraw>& draws, LogitsAt at);
  // A draft model's ranked trees (SiblingScheme::deterministic): each row's raw logits processed by `ranking`'s
  // pipeline with its history, then its `children` most probable tokens, best first, the lowest id on ties
  // (draw_children's order), in two launches and one wait; row r's children at [r * children, (r + 1) * children).
  // No law is kept: ranked candidates are verified as point masses. Rows' logits as for draw_drafts; the draws' keys
  // go unread. Throws Error naming the row's index in `rows` on a failed one, with the CPU pipeline's reason.
  std::vector<Token> rank_drafts(const SamplerPipeline& ranking, const std::vector<DeviceDraw>& rows, int32_t children,
                                 LogitsAt at);
  // A draft model's trees with siblings drawn without replacement (SiblingScheme::without_replacement): each row's raw
  // logits processed by `draft`'s pipeline with its history, its law kept at its law row as draw_drafts keeps it, and
  // its `children` siblings drawn from that law one after another, each from what the siblings before it left
  // (draw_children's rule), in two launches and one wait. A sequence's rows come together, in the order of its slots;
  // the draws of the sequence whose rows start at row f take uniforms[f * children + a] in turn (its draft keys' slots
  // from the depth's first), a draw that finds no mass left taking one too. Row r's siblings at
  // [r * children, (r + 1) * children), -1 past the last once its law has no mass left (fewer than asked, as on the
  // CPU). Throws Error naming the row and sequence on a failed one.
  std::vector<Token> draw_siblings(const SamplerPipeline& draft, const std::vector<DraftDraw>& rows, int32_t children,
                                   const std::vector<double>& uniforms, LogitsAt at);
  // draw_drafts for every depth of a proposal at once, with no wait between depths: for a draft model that reads its
  // next forward's token ids where the draws leave them (LanguageModel::reads_device_tokens), so that a depth's forward
  // is enqueued behind the draws before it and the host waits once a proposal, not once a depth. plan_drafts uploads
  // every depth's draws (`depths[d]`, each as draw_drafts takes them, with LogitsAt::device: the rows of
  // device_logits that depth's forward writes, so device_logits must already hold the most rows any depth asks for and
  // must not grow before the last launch); launch_planned(d) launches depth d's draws alone and returns the device
  // array of their tokens, in the order of depths[d] (valid until the next plan); planned_tokens() waits once and
  // returns every launched depth's tokens in order, throwing, as draw_drafts does, on the first failed draw. The plan
  // ends there, at keep_planned_ids, or at any other call that launches the sampler (its buffers are rewritten).
  // A depth's row whose history ends in ids drawn by the depths before it gives them as TokenHistory::pending_ids,
  // their indices among the plan's draws in order (refused unless drawn before its depth); a penalised pipeline's
  // counts of them are added on the device just before the depth's launch (kernels/pending_counts.h), so no wait.
  void plan_drafts(const SamplerPipeline& draft, const std::vector<std::vector<DraftDraw>>& depths);
  // The same for rank_drafts: depth d's rows `depths[d]`, `children[d]` ranked children each; launch_planned(d) then
  // makes both of rank_drafts' launches and returns the depth's children (row r's at [r * children[d], ..)), and
  // planned_tokens every depth's children in order. Pending ids index the plan's children in order.
  void plan_ranked(const SamplerPipeline& ranking, const std::vector<std::vector<DeviceDraw>>& depths,
                   const std::vector<int32_t>& children);
  // The same for draw_siblings, for a tree of a fixed shape: depth d's rows `depths[d]` (each frontier row's law kept
  // at its law row, as draw_siblings keeps it), `children[d]` siblings each, and the rows of depth d + 1 the children
  // of depth d, in order (row r's node is child r), every sequence 0 .. S - 1 at every depth, in order. Sequence s
  // draws with `uniforms[s]` in turn across the depths (its draft keys' slots from its first, as many as its rows may
  // take, each sequence's alike in number), each row from where its sequence's rows before it stopped, as
  // draw_children's slots run. A row whose node was never drawn (its token -1: an ancestor's law ran out of mass) draws
  // nothing, its children all -1, so a sequence's children that are not -1 are the CPU's tree's nodes, in its order
  // (move_draft_laws then brings their laws to the rows of that smaller tree). planned_tokens checks the statuses of
  // the drawn rows only. Pending ids index the plan's children in order. keep_planned_ids keeps them at the full shape,
  // -1 where a node was never drawn: verify() takes such a tree's -1 nodes as holes (kVerifyRowHoles), verifying the
  // tree of its drawn nodes with that tree's keys, so neither the ids nor the laws need move.
  void plan_siblings(const SamplerPipeline& draft, const std::vector<std::vector<DraftDraw>>& depths,
                     const std::vector<int32_t>& children, const std::vector<std::vector<double>>& uniforms);
  // Moves sequence `sequence`'s laws in draft_laws from row `from` to row `to` for each (from, to) of `moves`, on the
  // stream behind the draws that wrote them: a fixed-shape proposal's laws to the rows of its tree without the nodes
  // never drawn. Each row moves to a row no later than itself, the rows and their destinations in increasing order.
  void move_draft_laws(int64_t sequence, const std::vector<std::pair<int32_t, int32_t>>& moves);
  // The value of each entry in draft_laws, gathered on the device behind the draws that wrote them and downloaded
  // together (one wait): what a chain drawn there whose request may stop on the draft's doubt is cut by
  // (DraftRequest::confidence_threshold). draft_law_values reads each entry's `token`, uploaded; kept_law_values the
  // id of its `node` where keep_planned_ids keeps it, before verification reads them, so those ids need not come back
  // first. Throws Error for an entry outside the laws or the kept ids, and for a value that is not a probability (a
  // failed draw's).
  std::vector<float> draft_law_values(const std::vector<DraftLawEntry>& entries);
  std::vector<float> kept_law_values(const std::vector<DraftLawEntry>& entries);
  const int32_t* launch_planned(size_t depth);
  std::vector<Token> planned_tokens();
  // Instead of planned_tokens, once every depth is launched: ends the plan keeping its ids in device memory, regrouped
  // sequence by sequence (each depth's ids split evenly among `sequences` in order, sequence i's W ids at
  // [i * W, (i + 1) * W), depth by depth: a fed proposal's tree nodes in order), with its draws' statuses, and returns
  // that array (valid until the next keep_planned_ids). A verify() whose trees have TokenTree::device_tokens there
  // (sequence b's at b * W: W nodes, or its first ones when a chain was cut to its own K or after the draft's doubt,
  // any or all of them shorter than W; its host tokens pending) reads the ids in place, for the draft tokens as the
  // target's forward did for its rows, and brings them back with its results (DeviceStepResult::draft_tokens), refusing
  // them as planned_tokens does when a draw failed: the proposal and its verification wait once in all (once more for
  // a chain cut after the draft's doubt: kept_law_values). A penalised target's rows count their paths' ids there too
  // (TokenHistory::pending_ids into the kept ids). A sibling plan's ids come back with their holes (-1), checked as
  // planned_tokens checks them.
  const int32_t* keep_planned_ids(int64_t sequences);
  // The most children rank_drafts chooses (or draw_siblings draws) a row: min(V, kMaxRankedChildren).
  int32_t most_ranked_children() const;
  // The stream's byte counters (KernelStream::uploaded_bytes): what the steps so far moved each way.
  uint64_t uploaded_bytes() const { return stream_->uploaded_bytes(); }
  uint64_t downloaded_bytes() const { return stream_->downloaded_bytes(); }
  uint64_t downloads() const { return stream_->downloads(); }
  // KernelStream::staging_waits: staging buffers written again while their uploads may have been in flight (0 when
  // every step's slots are laid out apart, as they should be).
  uint64_t staging_waits() const { return stream_->staging_waits(); }
  // Times the host waited for the device's results (each drains the stream on a GPU): one a verification or
  // autoregressive draw, one a draft depth drawn on the device, one a fed proposal (plan_drafts) whose ids come back
  // before verification (planned_tokens; none when they stay for it, keep_planned_ids).
  uint64_t waits() const { return waits_; }

  Device device() const { return stream_->device(); }
  // The caller's stream the kernels follow (the constructor's `cuda_stream`): a model whose writes move to another
  // stream must not hand its rows in place (Generator::score_lockstep checks every step).
  std::optional<void*> followed_stream() const { return followed_stream_; }
  // KernelStream::requested_device_bytes and growth_drains of the verifier's stream.
  uint64_t requested_bytes() const { return stream_->requested_device_bytes(); }
  uint64_t growth_drains() const { return stream_->growth_drains(); }

 private:
  // Processes one row per key (with the history `maps.input_rows` gives it, else its own) through the fused sampler:
  // uploads the rows' logits (LogitsAt::host; in place for device, after checking that row r is row r of device_logits
  // unless `maps` places them) and the sampler arrays, and launches it; returns the device array of processed
  // distributions [R, V]. `pipeline`: the target's unless a draft's.
  // `pending`: the device array the histories' pending ids index (TokenHistory::pending_ids), whose counts a penalised
  // pipeline adds there before the launch (kernels/pending_counts.h).
  const float* process_rows(const std::vector<const float*>& logits, LogitsAt at,
                            const std::vector<const TokenHistory*>& histories, const std::vector<RandomKey>& keys,
                            int32_t** device_tokens, int32_t** device_status, const SamplerPipeline* pipeline = nullptr,
                            const SamplerRowMaps& maps = {}, PendingIds pending = {});
  // One (input row, index) pair an id the histories have pending, for a penalised pipeline (none otherwise), each index
  // checked below the ids that lie on the device before its row (`ids_before[h]`); `what` names the caller.
  std::vector<int32_t> pending_entries(const SamplerPipeline& pipeline,
                                       const std::vector<const TokenHistory*>& histories,
                                       const std::vector<int64_t>& ids_before, const char* what) const;
  // Uploads `entries` (in a plan's staging slots with `plan_staging`) and returns the launch adding the ids at `ids` to
  // the output counts of `sampler`'s `input_rows` rows.
  PendingCountsParams stage_pending_counts(const SamplerKernelParams& sampler, int64_t input_rows,
                                           const std::vector<int32_t>& entries, const int32_t* ids, bool plan_staging);
  // The plan of draws `depths` (plan_drafts', or draw_drafts' one depth) with their logits `at`; `what` names the
  // caller in a refusal.
  struct PlannedDrafts;
  PlannedDrafts plan_of_draws(const SamplerPipeline& draft, const std::vector<std::vector<DraftDraw>>& depths,
                              LogitsAt at, const char* what);
  // process_rows' uploads, and the launch's parameters, without the launch. `plan_staging`: a plan's, staged in host
  // buffers of its own (its uploads may still be in flight when verification stages its inputs).
  SamplerKernelParams sampler_params(const std::vector<const float*>& logits, LogitsAt at,
                                     const std::vector<const TokenHistory*>& histories,
                                     const std::vector<RandomKey>& keys, const SamplerPipeline* pipeline,
                                     const SamplerRowMaps& maps, bool plan_staging = false);
  // Rows given as (logits, history) for process_rows' maps: the distinct logits rows (`sources`, uploaded in order
  // for LogitsAt::host; empty for device), the distinct (logits, history) inputs, and each row's index among them
  // (input_rows), and its row of logits (logits_rows: of `sources`, or of device_logits, anywhere among them).
  struct MappedInputs {
    std::vector<const float*> sources;
    std::vector<const TokenHistory*> histories;
    std::vector<int32_t> input_rows, logits_rows;
  };
  MappedInputs map_inputs(const std::vector<DeviceDraw>& rows, LogitsAt at);
  // A plan's pending counts (`plan.pending`, `plan.pending_first`): its rows' pending ids index `ids`, the plan's draws
  // or children in order, of which ids_before_depth[d] are drawn before depth d.
  void plan_pending_counts(PlannedDrafts& plan, const SamplerPipeline& pipeline, const MappedInputs& m,
                           const std::vector<int64_t>& ids_before_depth, const int32_t* ids, const char* what);
  // The first row of each sequence among `rows` (a sequence's rows together, each of [0, sequences)), then their count:
  // draw_siblings' `first`.
  static std::vector<int32_t> sequence_firsts(const std::vector<DraftDraw>& rows, int64_t sequences, const char* what);
  // Where each draw keeps its law among draft_laws' rows (sequence * (N + 1) + law_row), checked: in range, no two at
  // one row. `what` names the caller.
  std::vector<int32_t> law_rows(const std::vector<DraftDraw>& draws, const char* what) const;
  // Refuses a draft's (`which`: "draft", "ranking") pipeline over another vocabulary than the target's.
  void check_vocabulary(const SamplerPipeline& pipeline, const char* which) const;
  // Refuses children a row outside [1, most_ranked_children()]; `what` words the refusal.
  void check_children(int32_t children, const char* what) const;
  // The tokens and statuses of `rows` draws process_rows launched, brought back with one wait.
  std::vector<Token> download_draws(int32_t* device_tokens, int32_t* device_status, int64_t rows,
                                    std::vector<int32_t>& status);

  // The children [rows * children] a draft-children kernel wrote and the rows' sampler statuses (process_rows'),
  // brought back with one wait.
  std::vector<Token> download_children(const int32_t* device_children, const int32_t* device_status, int64_t rows,
                                       int32_t children, std::vector<int32_t>& status);
  // `ids` ids and `rows` statuses, brought back with one wait.
  std::vector<Token> download_ids(const int32_t* device_ids, int64_t ids, const int32_t* device_status, int64_t rows,
                                  std::vector<int32_t>& status);

  // process_rows over every target row of a verification batch, each with its history along its draft path.
  // `rows` is the batch's total row count (the sum of tree sizes + 1).
  const float* process_step_rows(const std::vector<DeviceStep>& steps, LogitsAt at, int64_t rows,
                                 int32_t** device_status);

  std::unique_ptr<KernelStream> stream_;
  std::optional<void*> followed_stream_;
  const SamplerPipeline& target_;
  std::optional<VerifyMethod> method_;
  int32_t vocab_;
  int64_t logits_rows_ = 0;  // rows of the last device_logits call
  float* draft_laws_ = nullptr;
  int64_t draft_sequences_ = 0;
  int32_t draft_depth_ = 0;  // N, the nodes of each draft whose laws draft_laws holds
  // plan_drafts' (or plan_ranked's, plan_siblings') launch over every depth's rows, each depth's from row
  // first_draw[d], and its draws (to name a failed one); launched: the depths launched since. Ranked and siblings:
  // depth d's children from first_child[d] of `children` (children[d] a row; a ranked plan's processed rows are the
  // launch's scratch rows, probs row r for row r; a sibling plan's its laws). Siblings: `siblings` holds the arrays of
  // every depth, depth d's rows' sequences from sequence_first[d] of its `first` (each depth's row indices from 0).
  struct PlannedDrafts {
    SamplerKernelParams params;
    std::vector<int64_t> first_draw;
    std::vector<DraftDraw> draws;
    std::vector<uint8_t> launched;
    bool ranked = false;
    bool siblings = false;
    std::vector<int32_t> children_per_row;
    std::vector<int64_t> first_child;
    int32_t* children = nullptr;
    SiblingDrawParams sibling;
    std::vector<int64_t> sequence_first;
    int32_t* carried = nullptr;  // [(depths + 1) * S]: the uniforms each sequence spent before depth d, at d * S
    // The additions of pending ids' counts (n = 0: none), depth d's entries from pending_first[d], launched before it.
    PendingCountsParams pending;
    std::vector<int32_t> pending_first;
  };
  std::optional<PlannedDrafts> planned_;
  // Throws, as draw_drafts would, naming the first of the plan's launched rows (`rows` of them) whose status is not 0.
  void check_planned_statuses(const PlannedDrafts& plan, const int32_t* status, int64_t rows) const;
  // A sibling plan's `launched` depths, as draw_siblings checks them: `children` (host, the plan's order) and `status`
  // (its launched rows', host; those of rows whose node was never drawn are cleared, as they drew nothing).
  void check_planned_siblings(const PlannedDrafts& plan, const Token* children, int32_t* status,
                              int64_t launched) const;
  // A plan keep_planned_ids ended: its ids [sequences, width] and its launched rows' statuses in device memory.
  struct KeptIds {
    PlannedDrafts plan;
    int64_t rows = 0;
    int64_t sequences = 0;
    int64_t width = 0;
    int32_t* ids = nullptr;
    int32_t* status = nullptr;
  };
  std::optional<KeptIds> kept_;
  // A kept sibling plan's ids (host, [sequences, width]) and statuses, checked by check_planned_siblings.
  void check_kept_siblings(const KeptIds& kept, const int32_t* ids, int32_t* status) const;
  // The kept ids verify() reads in place for `steps` (null when no step's tree has device_tokens), checked: every
  // tree there, at its sequence's ids, in a batch of the kept plan's sequences.
  const int32_t* kept_draft_ids(const std::vector<DeviceStep>& steps) const;
  // draft_law_values' and kept_law_values' gather: entry e's row, and its id at ids[id_index[e]].
  std::vector<float> law_values(const std::vector<DraftLawEntry>& entries, const int32_t* ids,
                                const std::vector<int64_t>& id_index);
  uint64_t waits_ = 0;
};

}  // namespace specula
