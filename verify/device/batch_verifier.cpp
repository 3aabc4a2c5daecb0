#include "verify/device/batch_verifier.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <type_traits>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/device/sampler_batch.h"
#include "verify/device/tree_scheme.h"
#include "verify/sampling/filter_stages.h"
#include "verify/verifiers/target_rows.h"
#include "verify/verifiers/verify_methods.h"

namespace specula {
namespace {

// The KernelStream buffer slots of a step.
enum Slot : int {
  kLogits,
  kProbs,
  kRowParams,
  kAllowed,
  kBanned,
  kPrompt,
  kCounts,
  kBias,
  kSamplerTokens,
  kSamplerStatus,
  kQ,
  kQPresent,
  kFirstRow,
  kDraft,
  kParents,
  kVerifyRows,
  kEmitted,
  kNumEmitted,
  kNumAccepted,
  kBonus,
  kQZero,
  kStatus,
  kPath,
  kOverlapSum,
  kOverlapCount,
  kDraftLaws,
  kInputRows,
  kLogitsRows,
  kProbsRows,
  kDraftChildren,
  kSiblingRows,
  kSiblingFirst,
  kSiblingUniforms,
  kSiblingSpent,
  kSiblingCarried,
  kQFirstRow,
  kKeptIds,
  kKeptStatus,
  kPendingEntries,
  kLawIds,
  kLawEntries,
  kLawValues,
  // A plan's sampler inputs are staged in slots of their own, from kPlanStaging + the slot's number: its uploads may
  // still be in flight when verification stages its own (no wait between them once the ids stay on the device).
  kPlanStaging,
};

std::string device_label(Device d) { return std::string("device ") + device_name(d); }

// The least bytes any buffer of a reserved run takes, per row of its largest step (BatchVerifier::reserve): a row's
// parameters (64 bytes) and every smaller per-row array (row maps, tokens, statuses, ids, uniforms) fit.
constexpr int64_t kReservedBytesPerRow = 64;

// The first of a row's `count` siblings (without replacement) that cannot be as drawn, or -1: a row whose node was
// drawn has a processed law with mass, so its first sibling is a token, and after a -1 (no mass left) only -1; a row
// whose node was never drawn (a fixed-shape plan's) draws nothing, all -1.
int32_t bad_sibling(const Token* siblings, int32_t count, int32_t vocab, bool drawn = true) {
  for (int32_t j = 0; j < count; ++j) {
    const Token t = siblings[j], before = j > 0 ? siblings[j - 1] : 0;
    if (t < -1 || t >= vocab || (drawn && t == -1 && j == 0) || (t >= 0 && (before < 0 || !drawn))) return j;
  }
  return -1;
}

}  // namespace

void check_device_support(const std::optional<VerifyMethod>& method, const SamplingParams& s, int64_t draft_nodes,
                          Device device) {
  const std::string on = " is not supported on " + device_label(device);
  if (method && !has_device_kernel(*method)) {
    std::string kernels;
    for (VerifyMethod m : verify_methods())
      if (has_device_kernel(m)) kernels += std::string(kernels.empty() ? "" : ", ") + verify_method_name(m);
    fail_parameter("method", " ", verify_method_name(*method), on, " (the kernels verify ", kernels, ")");
  }
  if (const std::optional<UnsupportedSetting> u = unsupported_on_cuda(s)) {
    if (u->parameter == "device")  // a constraint
      fail_parameter("device", " ", device_name(device), ": constrained decoding (regex / json schema)", on);
    if (u->parameter == "logit_bias") fail_parameter("logit_bias", ": not supported on cuda: ", u->what);
    std::string applied = "masks, logit bias, penalties, temperature";
    for (const FilterStageRow& row : filter_stages())
      if (row.device) applied += std::string(", ") + row.name;
    fail_parameter(u->parameter, u->value.empty() ? "" : " " + u->value, on, " (the fused sampler applies ", applied,
                   ")");
  }
  if (!method) return;
  if (device_kernel(*method) == VerifyKernel::tree) {
    if (draft_nodes > kMaxVerifyTreeNodes)
      fail_parameter("tree", " has ", draft_nodes, " nodes; the verification kernels take at most ",
                     kMaxVerifyTreeNodes, " (", device_label(device), ")");
  } else if (draft_nodes > kMaxVerifyDraft) {
    fail_parameter("num_draft_tokens", " must be <= ", kMaxVerifyDraft, " on ", device_label(device), ", got ",
                   draft_nodes);
  }
}

BatchVerifier::BatchVerifier(Device device, const SamplerPipeline& target, std::optional<VerifyMethod> method,
                             const EmulationOptions& emulation, std::optional<void*> cuda_stream)
    : stream_(make_kernel_stream(device, emulation, cuda_stream)),
      followed_stream_(cuda_stream),
      target_(target),
      method_(method),
      vocab_(target.vocab_size()) {
  check_device_support(method, target.params(), 0, device);
}

float* BatchVerifier::device_logits(int64_t rows) {
  if (rows <= 0) fail("batch verifier: device_logits needs at least one row, got ", rows);
  logits_rows_ = rows;
  return stream_->device_array<float>(kLogits, static_cast<size_t>(rows) * static_cast<size_t>(vocab_));
}

float* BatchVerifier::draft_laws(int64_t sequences, int32_t drafts) {
  if (sequences < 1 || drafts < 1)
    fail("batch verifier: draft laws for ", sequences, " sequences of ", drafts, " drafts");
  draft_sequences_ = sequences;
  draft_depth_ = drafts;
  draft_laws_ = stream_->device_array<float>(
      kDraftLaws, static_cast<size_t>(sequences) * static_cast<size_t>(drafts + 1) * static_cast<size_t>(vocab_));
  return draft_laws_;
}

BatchVerifier::MappedInputs BatchVerifier::map_inputs(const std::vector<DeviceDraw>& draws, LogitsAt at) {
  const int64_t R = static_cast<int64_t>(draws.size()), V = vocab_;
  MappedInputs m;
  std::map<const float*, int32_t> source_index;
  std::vector<int32_t> source_of(static_cast<size_t>(R));
  std::map<std::pair<const float*, const TokenHistory*>, int32_t> input_index;
  m.input_rows.resize(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    const DeviceDraw& d = draws[static_cast<size_t>(r)];
    const auto [source, new_source] = source_index.emplace(d.logits, static_cast<int32_t>(m.sources.size()));
    if (new_source) m.sources.push_back(d.logits);
    source_of[static_cast<size_t>(r)] = source->second;
    const auto [input, new_input] =
        input_index.emplace(std::make_pair(d.logits, d.history), static_cast<int32_t>(m.histories.size()));
    if (new_input) m.histories.push_back(d.history);
    m.input_rows[static_cast<size_t>(r)] = input->second;
  }
  if (at == LogitsAt::host) {
    m.logits_rows = std::move(source_of);  // the distinct rows, uploaded in order
    return m;
  }
  // Rows of the rows device_logits' last caller asked for, wherever they are among them.
  m.logits_rows.resize(static_cast<size_t>(R));
  const float* base = stream_->device_array<float>(kLogits, static_cast<size_t>(logits_rows_ * V));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t offset = draws[static_cast<size_t>(r)].logits - base;
    if (logits_rows_ <= 0 || offset < 0 || offset % V != 0 || offset / V >= logits_rows_)
      fail("batch verifier: draft row ", r, " said to be in place is not a row of device_logits");
    m.logits_rows[static_cast<size_t>(r)] = static_cast<int32_t>(offset / V);
  }
  m.sources.clear();  // nothing is uploaded
  return m;
}

std::vector<int32_t> BatchVerifier::law_rows(const std::vector<DraftDraw>& draws, const char* what) const {
  const int64_t R = static_cast<int64_t>(draws.size()), N = draft_depth_;
  if (!draft_laws_ || R < 1) fail("batch verifier: ", what, " needs draws, after draft_laws made room for their laws");
  std::vector<int32_t> rows(static_cast<size_t>(R));
  std::vector<uint8_t> taken(static_cast<size_t>(draft_sequences_ * (N + 1)), 0);
  for (int64_t r = 0; r < R; ++r) {
    const DraftDraw& d = draws[static_cast<size_t>(r)];
    if (d.sequence < 0 || d.sequence >= draft_sequences_ || d.law_row < 0 || d.law_row > N)
      fail("batch verifier: a draw keeps its law at row ", d.law_row, " of sequence ", d.sequence,
           ", but draft_laws made room for ", draft_sequences_, " drafts of ", N, " nodes");
    // The mutant swaps the laws of rows 2m and 2m + 1 (a row past N keeps its own): verification reads row 0's law at
    // row 1 and row 1's at row 0, whatever the rows no draw writes hold (left over from earlier use).
    const int64_t swapped = d.law_row ^ 1;
    const int64_t row = mutant_on(Mutant::device_draft_laws_misplaced) && swapped <= N ? swapped : d.law_row;
    const int64_t law = d.sequence * (N + 1) + row;
    if (taken[static_cast<size_t>(law)]++)
      fail("batch verifier: two draws keep their laws at row ", d.law_row, " of sequence ", d.sequence);
    rows[static_cast<size_t>(r)] = static_cast<int32_t>(law);
  }
  return rows;
}

// One depth drawn at once: a plan of that depth, launched and brought back.
std::vector<Token> BatchVerifier::draw_drafts(const SamplerPipeline& draft, const std::vector<DraftDraw>& draws,
                                              LogitsAt at) {
  planned_.reset();
  planned_ = plan_of_draws(draft, {draws}, at, "draw_drafts");
  launch_planned(0);
  return planned_tokens();
}

void BatchVerifier::plan_drafts(const SamplerPipeline& draft, const std::vector<std::vector<DraftDraw>>& depths) {
  planned_.reset();
  for (const std::vector<DraftDraw>& depth : depths)
    if (depth.empty()) fail("batch verifier: plan_drafts was given a depth of no draws");
  if (depths.empty()) fail("batch verifier: plan_drafts needs depths");
  planned_ = plan_of_draws(draft, depths, LogitsAt::device, "plan_drafts");
}

BatchVerifier::PlannedDrafts BatchVerifier::plan_of_draws(const SamplerPipeline& draft,
                                                          const std::vector<std::vector<DraftDraw>>& depths,
                                                          LogitsAt at, const char* what) {
  // Each depth one launch: its laws at distinct rows within it (law_rows checks the whole plan's, which may share a
  // row across depths, a later child's scratch copy rewritten by the depth after: checked a depth at a time).
  std::vector<int32_t> law_rows;
  for (const std::vector<DraftDraw>& depth : depths) {
    const std::vector<int32_t> rows = this->law_rows(depth, what);
    law_rows.insert(law_rows.end(), rows.begin(), rows.end());
  }
  check_vocabulary(draft, "draft");
  PlannedDrafts plan;
  plan.first_draw = {0};
  for (const std::vector<DraftDraw>& depth : depths) {
    plan.draws.insert(plan.draws.end(), depth.begin(), depth.end());
    plan.first_draw.push_back(static_cast<int64_t>(plan.draws.size()));
  }
  std::vector<DeviceDraw> rows;
  std::vector<RandomKey> keys;
  for (const DraftDraw& d : plan.draws) {
    rows.push_back(d.draw);
    keys.push_back(d.draw.key);
  }
  // The distinct rows the draws read (a frontier row once for all its children) and the distinct inputs (a row's
  // logits with the history it is processed with: a frontier row's children share both).
  const MappedInputs m = map_inputs(rows, at);
  plan.params = sampler_params(m.sources, at, m.histories, keys, &draft,
                               SamplerRowMaps{&m.input_rows, &m.logits_rows, draft_laws_, &law_rows}, true);
  // Pending ids index the plan's draws in order (a depth's rows read those of the depths before it).
  plan_pending_counts(plan, draft, m, plan.first_draw, plan.params.tokens, what);
  plan.launched.assign(depths.size(), 0);
  return plan;
}

void BatchVerifier::plan_pending_counts(PlannedDrafts& plan, const SamplerPipeline& pipeline, const MappedInputs& m,
                                        const std::vector<int64_t>& ids_before_depth, const int32_t* ids,
                                        const char* what) {
  // Each input row's depth: its draws' (a row pending ids belong to is read at one depth only, since the ids it adds
  // are drawn before that depth's launch).
  const size_t depths = plan.first_draw.size() - 1;
  std::vector<int32_t> depth_of(m.histories.size(), -1);
  for (size_t d = 0; d < depths; ++d)
    for (int64_t r = plan.first_draw[d]; r < plan.first_draw[d + 1]; ++r) {
      const int32_t h = m.input_rows[static_cast<size_t>(r)];
      if (depth_of[h] < 0) depth_of[h] = static_cast<int32_t>(d);
      if (depth_of[h] != static_cast<int32_t>(d) && !m.histories[h]->pending_ids.empty())
        fail("batch verifier: ", what, ": a history with pending ids is read at depths ", depth_of[h], " and ", d);
    }
  std::vector<int64_t> ids_before(m.histories.size());
  for (size_t h = 0; h < m.histories.size(); ++h) ids_before[h] = ids_before_depth[static_cast<size_t>(depth_of[h])];
  const std::vector<int32_t> entries = pending_entries(pipeline, m.histories, ids_before, what);
  // Depth d's entries from pending_first[d]: the entries come row by row, so depth by depth.
  plan.pending_first.assign(depths + 1, 0);
  for (size_t e = 0; e < entries.size(); e += 2) {
    const int32_t d = depth_of[static_cast<size_t>(entries[e])];
    if (e > 0 && d < depth_of[static_cast<size_t>(entries[e - 2])])
      fail("batch verifier: ", what, ": rows with pending ids are not in the order of their depths");
    ++plan.pending_first[static_cast<size_t>(d) + 1];
  }
  std::partial_sum(plan.pending_first.begin(), plan.pending_first.end(), plan.pending_first.begin());
  if (!entries.empty())
    plan.pending = stage_pending_counts(plan.params, static_cast<int64_t>(m.histories.size()), entries, ids, true);
}

void BatchVerifier::plan_ranked(const SamplerPipeline& ranking, const std::vector<std::vector<DeviceDraw>>& depths,
                                const std::vector<int32_t>& children) {
  planned_.reset();
  if (children.size() != depths.size())
    fail("batch verifier: plan_ranked was given ", children.size(), " child counts for ", depths.size(), " depths");
  check_vocabulary(ranking, "ranking");
  PlannedDrafts plan;
  plan.ranked = true;
  plan.first_draw = {0};
  plan.first_child = {0};
  std::vector<DeviceDraw> rows;
  for (size_t d = 0; d < depths.size(); ++d) {
    if (depths[d].empty()) fail("batch verifier: plan_ranked was given a depth of no rows");
    check_children(children[d], "ranked children a row; the device takes");
    rows.insert(rows.end(), depths[d].begin(), depths[d].end());
    plan.first_draw.push_back(static_cast<int64_t>(rows.size()));
    plan.first_child.push_back(plan.first_child.back() + static_cast<int64_t>(depths[d].size()) * children[d]);
  }
  if (rows.empty()) fail("batch verifier: plan_ranked needs depths");
  const MappedInputs m = map_inputs(rows, LogitsAt::device);
  // The sampler's own draws go unread (ranked children are chosen, not drawn): any key does.
  const std::vector<RandomKey> keys(rows.size());
  plan.params = sampler_params(m.sources, LogitsAt::device, m.histories, keys, &ranking,
                               SamplerRowMaps{&m.input_rows, &m.logits_rows, nullptr, nullptr}, true);
  plan.children_per_row = children;
  plan.children = stream_->device_array<int32_t>(kDraftChildren, static_cast<size_t>(plan.first_child.back()));
  // Pending ids index the plan's children in order.
  plan_pending_counts(plan, ranking, m, plan.first_child, plan.children, "plan_ranked");
  plan.launched.assign(depths.size(), 0);
  planned_ = std::move(plan);
}

void BatchVerifier::plan_siblings(const SamplerPipeline& draft, const std::vector<std::vector<DraftDraw>>& depths,
                                  const std::vector<int32_t>& children,
                                  const std::vector<std::vector<double>>& uniforms) {
  planned_.reset();
  if (depths.empty()) fail("batch verifier: plan_siblings needs depths");
  if (children.size() != depths.size())
    fail("batch verifier: plan_siblings was given ", children.size(), " sibling counts for ", depths.size(), " depths");
  check_vocabulary(draft, "draft");
  const int64_t S = static_cast<int64_t>(uniforms.size());
  if (S < 1 || S > draft_sequences_)
    fail("batch verifier: plan_siblings was given uniforms for ", S, " sequences, but draft_laws made room for ",
         draft_sequences_);
  PlannedDrafts plan;
  plan.siblings = true;
  plan.first_draw = {0};
  plan.first_child = {0};
  plan.sequence_first = {0};
  std::vector<int32_t> firsts;
  std::vector<int64_t> most(static_cast<size_t>(S), 0);  // the draws each sequence's rows may take in all
  int64_t widest = 0;
  for (size_t d = 0; d < depths.size(); ++d) {
    const int64_t R = static_cast<int64_t>(depths[d].size());
    if (R == 0) fail("batch verifier: plan_siblings was given a depth of no rows");
    check_children(children[d], "siblings a row; the device draws");
    // A fixed shape: depth d's rows are the depth before's children, in order (row r's node is its child r).
    if (d > 0 && R != plan.first_child[d] - plan.first_child[d - 1])
      fail("batch verifier: plan_siblings' depth ", d, " has ", R, " rows for the ",
           plan.first_child[d] - plan.first_child[d - 1], " children of the depth before");
    const std::vector<int32_t> first = sequence_firsts(depths[d], S, "plan_siblings");
    // Every sequence at every depth, in order (a launch's sequence s takes the uniforms of sequence s).
    if (static_cast<int64_t>(first.size()) != S + 1)
      fail("batch verifier: plan_siblings' depth ", d, " has the rows of ", first.size() - 1, " sequences, not ", S);
    for (int64_t i = 0; i < S; ++i) {
      if (depths[d][static_cast<size_t>(first[static_cast<size_t>(i)])].sequence != i)
        fail("batch verifier: plan_siblings' depth ", d, " has sequence ",
             depths[d][static_cast<size_t>(first[static_cast<size_t>(i)])].sequence,
             "'s rows in the place of sequence ", i, "'s");
      most[static_cast<size_t>(i)] += (first[static_cast<size_t>(i) + 1] - first[static_cast<size_t>(i)]) * children[d];
    }
    firsts.insert(firsts.end(), first.begin(), first.end());
    plan.sequence_first.push_back(static_cast<int64_t>(firsts.size()));
    plan.draws.insert(plan.draws.end(), depths[d].begin(), depths[d].end());
    plan.first_draw.push_back(static_cast<int64_t>(plan.draws.size()));
    plan.first_child.push_back(plan.first_child.back() + R * children[d]);
    widest = std::max(widest, R);
  }
  // Each sequence's uniforms in turn across the depths, as many as its rows may draw (one array a sequence, all alike).
  const size_t U = uniforms[0].size();
  std::vector<double> all_uniforms;
  for (int64_t i = 0; i < S; ++i) {
    if (uniforms[static_cast<size_t>(i)].size() != U || static_cast<int64_t>(U) < most[static_cast<size_t>(i)])
      fail("batch verifier: plan_siblings was given ", uniforms[static_cast<size_t>(i)].size(),
           " uniforms for sequence ", i, ", whose rows may draw ", most[static_cast<size_t>(i)], " (and sequence 0 ", U,
           ")");
    all_uniforms.insert(all_uniforms.end(), uniforms[static_cast<size_t>(i)].begin(),
                        uniforms[static_cast<size_t>(i)].end());
  }
  // Every frontier row keeps its law at its own node's row: distinct across the whole plan.
  const std::vector<int32_t> law_rows = this->law_rows(plan.draws, "plan_siblings");
  std::vector<DeviceDraw> rows;
  for (const DraftDraw& d : plan.draws) rows.push_back(d.draw);
  const MappedInputs m = map_inputs(rows, LogitsAt::device);
  // The sampler's own draws go unread (the siblings are drawn from the laws it keeps): any key does.
  const std::vector<RandomKey> keys(rows.size());
  plan.params = sampler_params(m.sources, LogitsAt::device, m.histories, keys, &draft,
                               SamplerRowMaps{&m.input_rows, &m.logits_rows, draft_laws_, &law_rows}, true);
  KernelStream& s = *stream_;
  plan.children_per_row = children;
  plan.children = s.device_array<int32_t>(kDraftChildren, static_cast<size_t>(plan.first_child.back()));
  plan.sibling.probs = draft_laws_;
  plan.sibling.rows = s.upload(kSiblingRows, law_rows);
  plan.sibling.first = s.upload(kSiblingFirst, firsts);
  plan.sibling.uniforms = s.upload(kSiblingUniforms, all_uniforms);
  plan.sibling.uniforms_per_sequence = static_cast<int32_t>(U);
  plan.sibling.spent = s.device_array<int32_t>(kSiblingSpent, static_cast<size_t>(widest));
  // The uniforms each sequence spent before depth d at [d * S, (d + 1) * S): none before the first.
  // (Uploaded zeros; the kernels write the later depths' in the stream's own device array.)
  plan.carried = const_cast<int32_t*>(
      s.upload(kSiblingCarried, std::vector<int32_t>((depths.size() + 1) * static_cast<size_t>(S), 0)));
  plan.sibling.vocab = vocab_;
  // Pending ids index the plan's children in order.
  plan_pending_counts(plan, draft, m, plan.first_child, plan.children, "plan_siblings");
  plan.launched.assign(depths.size(), 0);
  planned_ = std::move(plan);
}

void BatchVerifier::move_draft_laws(int64_t sequence, const std::vector<std::pair<int32_t, int32_t>>& moves) {
  const int64_t N = draft_depth_, V = vocab_;
  if (!draft_laws_ || sequence < 0 || sequence >= draft_sequences_)
    fail("batch verifier: move_draft_laws for sequence ", sequence, ", but draft_laws made room for ",
         draft_sequences_);
  const size_t row = static_cast<size_t>(V) * sizeof(float);
  int32_t last_from = -1, last_to = -1;
  for (const auto& [from, to] : moves) {
    // Each row moves towards the front, in the order of the rows, to rows of its own: none is written before it is
    // read, and no two land on one row.
    if (from < 0 || from > N || to < 0 || to > from || from <= last_from || to <= last_to)
      fail("batch verifier: move_draft_laws moves row ", from, " to row ", to, " (rows 0 to ", N,
           ", each to a row before it, in order)");
    last_from = from;
    last_to = to;
    if (to == from) continue;
    float* const base = draft_laws_ + sequence * (N + 1) * V;
    stream_->copy_within_device(base + to * V, row, base + from * V, row, row, 1);
  }
}

namespace {

bool is_probability(float v) { return v >= 0.0f && v <= 1.0f; }

// A processed law's value is a probability: anything else is a failed draw's (-1), refused before a chain is cut.
std::vector<float> check_law_values(const std::vector<DraftLawEntry>& entries, std::vector<float> values) {
  for (size_t e = 0; e < values.size(); ++e)
    if (!is_probability(values[e]))
      fail("batch verifier: the draft drawn from row ", entries[e].row, " of sequence ", entries[e].sequence,
           " has the value ", values[e], " in its law, not a probability (a failed draw)");
  return values;
}

}  // namespace

std::vector<float> BatchVerifier::draft_law_values(const std::vector<DraftLawEntry>& entries) {
  std::vector<int32_t> tokens;
  std::vector<int64_t> index;
  for (const DraftLawEntry& e : entries) {
    if (e.token < 0 || e.token >= vocab_)
      fail("batch verifier: draft_law_values reads token ", e.token, ", not a token of [0, ", vocab_, ")");
    index.push_back(static_cast<int64_t>(tokens.size()));
    tokens.push_back(e.token);
  }
  return check_law_values(entries, law_values(entries, stream_->upload(kLawIds, tokens), index));
}

std::vector<float> BatchVerifier::kept_law_values(const std::vector<DraftLawEntry>& entries) {
  if (!kept_) fail("batch verifier: kept_law_values without kept ids (keep_planned_ids)");
  std::vector<int64_t> index;
  for (const DraftLawEntry& e : entries) {
    if (e.sequence < 0 || e.sequence >= kept_->sequences || e.node < 0 || e.node >= kept_->width)
      fail("batch verifier: kept_law_values reads node ", e.node, " of sequence ", e.sequence, ", but ",
           kept_->sequences, " sequences' ids of ", kept_->width, " nodes were kept");
    index.push_back(e.sequence * kept_->width + e.node);
  }
  const std::vector<float> values = law_values(entries, kept_->ids, index);
  if (std::all_of(values.begin(), values.end(), is_probability)) return values;
  // A failed draw leaves -1: named by its status, as verification names it (the kept statuses, downloaded).
  KernelStream& s = *stream_;
  int32_t* status = s.host_array<int32_t>(kKeptStatus, static_cast<size_t>(kept_->rows));
  s.to_host(status, kept_->status, static_cast<size_t>(kept_->rows) * sizeof(int32_t));
  s.synchronize();
  ++waits_;
  check_planned_statuses(kept_->plan, status, kept_->rows);
  return check_law_values(entries, values);
}

std::vector<float> BatchVerifier::law_values(const std::vector<DraftLawEntry>& entries, const int32_t* ids,
                                             const std::vector<int64_t>& id_index) {
  if (entries.empty()) return {};
  const int64_t N = draft_depth_;
  if (!draft_laws_) fail("batch verifier: draft law values before draft_laws");
  std::vector<int64_t> pairs;
  for (size_t e = 0; e < entries.size(); ++e) {
    const DraftLawEntry& entry = entries[e];
    if (entry.sequence < 0 || entry.sequence >= draft_sequences_ || entry.row < 0 || entry.row > N)
      fail("batch verifier: a draft law value of row ", entry.row, " of sequence ", entry.sequence,
           ", but draft_laws made room for ", draft_sequences_, " sequences of rows 0 to ", N);
    pairs.push_back(entry.sequence * (N + 1) + entry.row);
    pairs.push_back(id_index[e]);
  }
  KernelStream& s = *stream_;
  const size_t n = entries.size();
  LawValuesParams p;
  p.laws = draft_laws_;
  p.ids = ids;
  p.entries = s.upload(kLawEntries, pairs);
  p.values = s.device_array<float>(kLawValues, n);
  p.n = static_cast<int32_t>(n);
  p.rows = draft_sequences_ * (N + 1);
  p.vocab = vocab_;
  s.law_values(p);
  float* values = s.host_array<float>(kLawValues, n);
  s.to_host(values, p.values, n * sizeof(float));
  s.synchronize();
  ++waits_;
  return std::vector<float>(values, values + n);
}

const int32_t* BatchVerifier::launch_planned(size_t depth) {
  if (!planned_ || depth + 1 >= planned_->first_draw.size())
    fail("batch verifier: launch_planned(", depth, ") without a plan of that depth");
  PlannedDrafts& plan = *planned_;
  // Once each, in order: a depth's pending ids are the depths' before it, and its counts are added once.
  if (plan.launched[depth]) fail("batch verifier: launch_planned(", depth, ") again");
  if (depth > 0 && !plan.launched[depth - 1])
    fail("batch verifier: launch_planned(", depth, ") before depth ", depth - 1);
  const int64_t first = plan.first_draw[depth], n = plan.first_draw[depth + 1] - first;
  // The pending ids' counts of the depth's rows first: the depths before it drew them.
  if (const int32_t begin = plan.pending_first[depth], end = plan.pending_first[depth + 1]; end > begin) {
    PendingCountsParams c = plan.pending;
    c.entries += 2 * static_cast<int64_t>(begin);
    c.n = end - begin;
    stream_->pending_counts(c);
  }
  // The depth's draws alone: every per-draw array from its first draw (input rows index the plan's inputs).
  SamplerKernelParams p = plan.params;
  p.rows += first;
  p.input_rows += first;
  p.logits_rows += first;
  p.tokens += first;
  p.status += first;
  p.batch = static_cast<int32_t>(n);
  if (p.probs_rows)
    p.probs_rows += first;
  else
    p.probs += first * vocab_;  // the launch's scratch rows: row r's processed row at row r
  stream_->fused_sampler(p);
  if (plan.siblings) {
    // The depth's siblings from the laws just kept, each row's a depth's worth of its sequence's uniforms (the spent
    // counts are scratch: the launch before has read them, in stream order).
    SiblingDrawParams sp = plan.sibling;
    sp.rows += first;
    sp.first += plan.sequence_first[depth];
    sp.tokens = plan.children + plan.first_child[depth];
    // Each sequence's uniforms from where its depths before stopped; a row under a node never drawn draws nothing.
    const int64_t S = plan.sequence_first[1] - 1;
    sp.spent_before = plan.carried + static_cast<int64_t>(depth) * S;
    sp.spent_after = plan.carried + static_cast<int64_t>(depth + 1) * S;
    sp.row_tokens = depth == 0 ? nullptr : plan.children + plan.first_child[depth - 1];
    sp.sequences = static_cast<int32_t>(plan.sequence_first[depth + 1] - plan.sequence_first[depth] - 1);
    sp.rows_total = static_cast<int32_t>(n);
    sp.count = plan.children_per_row[depth];
    stream_->sibling_draws(sp);
    plan.launched[depth] = 1;
    return sp.tokens;
  }
  if (!plan.ranked) {
    plan.launched[depth] = 1;
    return p.tokens;
  }
  RankedChildrenParams r;
  r.probs = p.probs;
  r.tokens = plan.children + plan.first_child[depth];
  r.batch = p.batch;
  r.vocab = vocab_;
  r.count = plan.children_per_row[depth];
  stream_->ranked_children(r);
  plan.launched[depth] = 1;
  return r.tokens;
}

std::vector<Token> BatchVerifier::planned_tokens() {
  if (!planned_) fail("batch verifier: planned_tokens without a plan");
  const PlannedDrafts plan = std::move(*planned_);
  planned_.reset();  // once: its buffers are the next call's
  int64_t launched = 0;
  while (launched < static_cast<int64_t>(plan.launched.size()) && plan.launched[launched]) ++launched;
  const int64_t R = plan.first_draw[launched];
  if (R == 0) fail("batch verifier: planned_tokens before the plan's first depth was launched");
  std::vector<int32_t> status;
  if (plan.siblings) {
    const int64_t n = plan.first_child[launched];
    const std::vector<Token> children = download_ids(plan.children, n, plan.params.status, R, status);
    check_planned_siblings(plan, children.data(), status.data(), launched);
    return children;
  }
  if (plan.ranked) {
    // Every launched depth's children and its rows' statuses, as rank_drafts checks them.
    const int64_t n = plan.first_child[launched];
    const std::vector<Token> children = download_ids(plan.children, n, plan.params.status, R, status);
    check_planned_statuses(plan, status.data(), R);
    for (int64_t c = 0; c < n; ++c)
      if (const Token t = children[static_cast<size_t>(c)]; t < 0 || t >= vocab_)
        fail("batch verifier: planned ranked child ", c, " is ", t, ", not a token of [0, ", vocab_, ")");
    return children;
  }
  std::vector<Token> tokens = download_draws(plan.params.tokens, plan.params.status, R, status);
  check_planned_statuses(plan, status.data(), R);
  return tokens;
}

void BatchVerifier::check_planned_siblings(const PlannedDrafts& plan, const Token* children, int32_t* status,
                                           int64_t launched) const {
  // As draw_siblings checks them, for the rows whose node was drawn (the others read a placeholder's logits and drew
  // nothing).
  const auto drawn = [&](int64_t d, int64_t row) {
    return d == 0 || children[static_cast<size_t>(plan.first_child[d - 1] + row)] >= 0;
  };
  for (int64_t d = 0; d < launched; ++d)
    for (int64_t r = plan.first_draw[d]; r < plan.first_draw[d + 1]; ++r)
      if (!drawn(d, r - plan.first_draw[d])) status[static_cast<size_t>(r)] = 0;
  check_planned_statuses(plan, status, plan.first_draw[static_cast<size_t>(launched)]);
  for (int64_t d = 0; d < launched; ++d) {
    const int32_t count = plan.children_per_row[static_cast<size_t>(d)];
    for (int64_t row = 0; row < plan.first_draw[d + 1] - plan.first_draw[d]; ++row) {
      const Token* siblings = children + plan.first_child[d] + row * count;
      if (const int32_t j = bad_sibling(siblings, count, vocab_, drawn(d, row)); j >= 0)
        fail("batch verifier: planned sibling ", j, " of row ", row, " of depth ", d, " is ", siblings[j]);
    }
  }
}

void BatchVerifier::check_planned_statuses(const PlannedDrafts& plan, const int32_t* status, int64_t rows) const {
  for (int64_t r = 0; r < rows; ++r) {
    if (status[r] == 0) continue;
    if (plan.ranked) {
      const auto depth =
          std::upper_bound(plan.first_draw.begin(), plan.first_draw.end(), r) - plan.first_draw.begin() - 1;
      fail("ranked draft row ", r - plan.first_draw[static_cast<size_t>(depth)], " of depth ", depth, ": ",
           sampler_status_message(status[r]));
    }
    fail("draft from row ", plan.draws[static_cast<size_t>(r)].law_row, " of sequence ",
         plan.draws[static_cast<size_t>(r)].sequence, ": ", sampler_status_message(status[r]));
  }
}

const int32_t* BatchVerifier::keep_planned_ids(int64_t sequences) {
  if (!planned_) fail("batch verifier: keep_planned_ids without a plan");
  if (sequences < 1) fail("batch verifier: keep_planned_ids for ", sequences, " sequences");
  PlannedDrafts& plan = *planned_;
  const size_t K = plan.launched.size();
  for (size_t d = 0; d < K; ++d)
    if (!plan.launched[d]) fail("batch verifier: keep_planned_ids before depth ", d, " of the plan was launched");
  // Depth d's ids, sequence by sequence, from `first[d]` of the plan's tokens (a ranked or sibling plan's children;
  // a sibling plan's at its full shape, -1 where a node was never drawn: verification takes them as holes).
  const bool children = plan.ranked || plan.siblings;
  const std::vector<int64_t>& first = children ? plan.first_child : plan.first_draw;
  const int32_t* const source = children ? plan.children : plan.params.tokens;
  int64_t width = 0;
  for (size_t d = 0; d < K; ++d) {
    const int64_t ids = first[d + 1] - first[d], rows = plan.first_draw[d + 1] - plan.first_draw[d];
    if (ids % sequences != 0)
      fail("batch verifier: depth ", d, "'s ", ids, " planned ids do not split evenly among ", sequences, " sequences");
    if (rows % sequences != 0)
      fail("batch verifier: depth ", d, "'s ", rows, " planned rows do not split evenly among ", sequences,
           " sequences");
    width += ids / sequences;
    // Drawn rows name their sequence: each depth's must come sequence by sequence (a ranked plan's rows name none).
    for (int64_t r = 0; r < rows && !plan.ranked; ++r)
      if (const int64_t b = plan.draws[static_cast<size_t>(plan.first_draw[d] + r)].sequence;
          b != r / (rows / sequences))
        fail("batch verifier: depth ", d, "'s draw ", r, " is sequence ", b, "'s, not in its place among ", sequences,
             " sequences' draws");
  }
  KernelStream& s = *stream_;
  KeptIds kept;
  kept.rows = plan.first_draw[K];
  kept.sequences = sequences;
  kept.width = width;
  kept.ids = s.device_array<int32_t>(kKeptIds, static_cast<size_t>(sequences * width));
  kept.status = s.device_array<int32_t>(kKeptStatus, static_cast<size_t>(kept.rows));
  // Copies within the device, ordered behind the launches and ahead of the next calls that rewrite the plan's buffers
  // (the target rows' sampler launch among them): one a depth, a run a sequence.
  const size_t row = static_cast<size_t>(width) * sizeof(int32_t);
  int64_t before = 0;
  for (size_t d = 0; d < K; ++d) {
    const int64_t n = (first[d + 1] - first[d]) / sequences;
    const int64_t from = mutant_on(Mutant::kept_ids_depths_misplaced) && d > 0 ? first[d - 1] : first[d];
    s.copy_within_device(kept.ids + before, row, source + from, static_cast<size_t>(n) * sizeof(int32_t),
                         static_cast<size_t>(n) * sizeof(int32_t), static_cast<size_t>(sequences));
    before += n;
  }
  const size_t status_bytes = static_cast<size_t>(kept.rows) * sizeof(int32_t);
  s.copy_within_device(kept.status, status_bytes, plan.params.status, status_bytes, status_bytes, 1);
  kept.plan = std::move(plan);
  planned_.reset();
  kept_ = std::move(kept);
  return kept_->ids;
}

void BatchVerifier::check_kept_siblings(const KeptIds& kept, const int32_t* ids, int32_t* status) const {
  // The kept ids [sequences, width] back in the plan's order (depth by depth, each depth's sequence by sequence).
  const PlannedDrafts& plan = kept.plan;
  const int64_t S = kept.sequences;
  std::vector<Token> children(static_cast<size_t>(plan.first_child.back()));
  int64_t before = 0;  // a sequence's ids before depth d
  for (size_t d = 0; d + 1 < plan.first_child.size(); ++d) {
    const int64_t n = (plan.first_child[d + 1] - plan.first_child[d]) / S;
    for (int64_t i = 0; i < S; ++i)
      std::copy(ids + i * kept.width + before, ids + i * kept.width + before + n,
                children.begin() + plan.first_child[d] + i * n);
    before += n;
  }
  check_planned_siblings(plan, children.data(), status, static_cast<int64_t>(plan.launched.size()));
}

const int32_t* BatchVerifier::kept_draft_ids(const std::vector<DeviceStep>& steps) const {
  const auto fed = [](const DeviceStep& step) { return step.tree->device_tokens != nullptr; };
  const size_t n = static_cast<size_t>(std::count_if(steps.begin(), steps.end(), fed));
  if (n == 0) return nullptr;
  if (!kept_) fail("batch verifier: a step's draft ids are in device memory but no plan kept them (keep_planned_ids)");
  if (n != steps.size() || static_cast<int64_t>(n) != kept_->sequences)
    fail("batch verifier: ", n, " of a batch of ", steps.size(), " steps have their draft ids in device memory, where ",
         kept_->sequences, " sequences' ids were kept");
  // A step's tree is its kept ids, or their first nodes (a chain drawn at the batch's longest K, cut to its own K or
  // after the draft's doubt; every step's may be cut): verify() reads them at the kept ids' width, their stride.
  for (size_t b = 0; b < n; ++b) {
    const TokenTree& tree = *steps[b].tree;
    if (tree.device_tokens != kept_->ids + static_cast<int64_t>(b) * kept_->width || tree.size() > kept_->width)
      fail("batch verifier: step ", b, "'s draft ids are in device memory but not at its ", kept_->width,
           " ids of the kept plan");
  }
  return kept_->ids;
}

std::vector<Token> BatchVerifier::draw_siblings(const SamplerPipeline& draft, const std::vector<DraftDraw>& rows,
                                                int32_t children, const std::vector<double>& uniforms, LogitsAt at) {
  KernelStream& s = *stream_;
  const int64_t R = static_cast<int64_t>(rows.size());
  const std::vector<int32_t> law_rows = this->law_rows(rows, "draw_siblings");
  check_vocabulary(draft, "draft");
  check_children(children, "siblings a row; the device draws");
  if (static_cast<int64_t>(uniforms.size()) != R * children)
    fail("batch verifier: ", uniforms.size(), " uniforms for ", R, " rows of ", children, " siblings");
  const std::vector<int32_t> first = sequence_firsts(rows, draft_sequences_, "draw_siblings");
  std::vector<DeviceDraw> draws;
  for (const DraftDraw& d : rows) draws.push_back(d.draw);
  const MappedInputs m = map_inputs(draws, at);
  // The sampler's own draw goes unread (the siblings are drawn from the laws it keeps): any key does.
  const std::vector<RandomKey> keys(static_cast<size_t>(R));
  int32_t *d_draws = nullptr, *d_status = nullptr;
  process_rows(m.sources, at, m.histories, keys, &d_draws, &d_status, &draft,
               SamplerRowMaps{&m.input_rows, &m.logits_rows, draft_laws_, &law_rows});
  SiblingDrawParams p;
  p.probs = draft_laws_;
  p.rows = s.upload(kSiblingRows, law_rows);
  p.first = s.upload(kSiblingFirst, first);
  p.uniforms = s.upload(kSiblingUniforms, uniforms);
  p.tokens = s.device_array<int32_t>(kDraftChildren, static_cast<size_t>(R) * static_cast<size_t>(children));
  p.spent = s.device_array<int32_t>(kSiblingSpent, static_cast<size_t>(R));
  p.sequences = static_cast<int32_t>(first.size() - 1);
  p.rows_total = static_cast<int32_t>(R);
  p.vocab = vocab_;
  p.count = children;
  s.sibling_draws(p);
  std::vector<int32_t> status;
  const std::vector<Token> tokens = download_children(p.tokens, d_status, R, children, status);
  for (int64_t r = 0; r < R; ++r) {
    const DraftDraw& d = rows[static_cast<size_t>(r)];
    if (status[static_cast<size_t>(r)] != 0)
      fail("draft from row ", d.law_row, " of sequence ", d.sequence, ": ",
           sampler_status_message(status[static_cast<size_t>(r)]));
    if (const int32_t j = bad_sibling(tokens.data() + r * children, children, vocab_); j >= 0)
      fail("batch verifier: sibling ", j, " of row ", d.law_row, " of sequence ", d.sequence, " is ",
           tokens[r * children + j]);
  }
  return tokens;
}

std::vector<int32_t> BatchVerifier::sequence_firsts(const std::vector<DraftDraw>& rows, int64_t sequences,
                                                    const char* what) {
  // Each sequence's rows together, in the order of its slots: a row's draws start where its sequence's earlier rows
  // stopped.
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<int32_t> first = {0};
  std::vector<uint8_t> seen(static_cast<size_t>(sequences), 0);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t sequence = rows[static_cast<size_t>(r)].sequence;
    if (sequence < 0 || sequence >= sequences)
      fail("batch verifier: ", what, " was given a row of sequence ", sequence, ", of ", sequences);
    if (r > 0 && sequence == rows[static_cast<size_t>(r - 1)].sequence) continue;
    if (seen[static_cast<size_t>(sequence)]++)
      fail("batch verifier: ", what, " was given sequence ", sequence, "'s rows apart; a sequence's come together");
    if (r > 0) first.push_back(static_cast<int32_t>(r));
  }
  first.push_back(static_cast<int32_t>(R));
  return first;
}

int32_t BatchVerifier::most_ranked_children() const { return std::min(vocab_, kMaxRankedChildren); }

void BatchVerifier::check_vocabulary(const SamplerPipeline& pipeline, const char* which) const {
  if (pipeline.vocab_size() != vocab_)
    fail("batch verifier: a ", which, " pipeline over ", pipeline.vocab_size(), " tokens, the target's over ", vocab_);
}

void BatchVerifier::check_children(int32_t children, const char* what) const {
  if (children < 1 || children > most_ranked_children())
    fail("batch verifier: ", children, " ", what, " 1 to ", most_ranked_children(), " (V = ", vocab_, ")");
}

std::vector<Token> BatchVerifier::rank_drafts(const SamplerPipeline& ranking, const std::vector<DeviceDraw>& rows,
                                              int32_t children, LogitsAt at) {
  KernelStream& s = *stream_;
  const int64_t R = static_cast<int64_t>(rows.size());
  if (R < 1) fail("batch verifier: rank_drafts needs rows");
  check_vocabulary(ranking, "ranking");
  check_children(children, "ranked children a row; the device takes");
  const MappedInputs m = map_inputs(rows, at);
  // The sampler's own draw goes unread (ranked children are chosen, not drawn): any key does.
  const std::vector<RandomKey> keys(static_cast<size_t>(R));
  int32_t *d_draws = nullptr, *d_status = nullptr;
  RankedChildrenParams p;
  p.probs = process_rows(m.sources, at, m.histories, keys, &d_draws, &d_status, &ranking,
                         SamplerRowMaps{&m.input_rows, &m.logits_rows, nullptr, nullptr});
  p.tokens = s.device_array<int32_t>(kDraftChildren, static_cast<size_t>(R) * static_cast<size_t>(children));
  p.batch = static_cast<int32_t>(R);
  p.vocab = vocab_;
  p.count = children;
  s.ranked_children(p);
  std::vector<int32_t> status;
  const std::vector<Token> tokens = download_children(p.tokens, d_status, R, children, status);
  for (int64_t r = 0; r < R; ++r) {
    if (status[static_cast<size_t>(r)] != 0)
      fail("ranked draft row ", r, " of the ", R, " given: ", sampler_status_message(status[static_cast<size_t>(r)]));
    // The kernel's picks are tokens whenever children <= V; a wrong one stops here, before a model reads it.
    for (int32_t j = 0; j < children; ++j)
      if (const Token t = tokens[r * children + j]; t < 0 || t >= vocab_)
        fail("batch verifier: ranked row ", r, "'s child ", j, " is ", t, ", not a token of [0, ", vocab_, ")");
  }
  return tokens;
}

std::vector<Token> BatchVerifier::download_children(const int32_t* d_children, const int32_t* d_status, int64_t rows,
                                                    int32_t children, std::vector<int32_t>& status) {
  return download_ids(d_children, rows * children, d_status, rows, status);
}

std::vector<Token> BatchVerifier::download_ids(const int32_t* d_ids, int64_t ids, const int32_t* d_status, int64_t rows,
                                               std::vector<int32_t>& status) {
  KernelStream& s = *stream_;
  const size_t R = static_cast<size_t>(rows), n = static_cast<size_t>(ids);
  int32_t* tokens = s.host_array<int32_t>(kDraftChildren, n);
  int32_t* row_status = s.host_array<int32_t>(kSamplerStatus, R);
  s.to_host(tokens, d_ids, n * sizeof(int32_t));
  s.to_host(row_status, d_status, R * sizeof(int32_t));
  s.synchronize();
  ++waits_;
  status.assign(row_status, row_status + R);
  return std::vector<Token>(tokens, tokens + n);
}

namespace {

// A per-row sampler input staged in a slot: the slot and its bytes a row.
struct StagedArray {
  int slot;
  int64_t row_bytes;
};

// The masks, penalty counts and bias the settings `s` (or `also`, whose rows stage in the same slots: a draft's depths
// drawn one at a time stage in the target's) make SamplerBatch stage for some history, each once.
std::vector<StagedArray> staged_arrays(const SamplingParams& s, int64_t V, const SamplingParams* also = nullptr) {
  const auto any = [&](auto&& needs) { return needs(s) || (also && needs(*also)); };
  const int64_t words = (V + 31) / 32;
  std::vector<StagedArray> arrays;
  if (any([](const SamplingParams& p) { return !p.allowed_tokens.empty(); })) arrays.push_back({kAllowed, 4 * words});
  if (any([](const SamplingParams& p) { return !p.banned_tokens.empty() || p.min_tokens > 0; }))
    arrays.push_back({kBanned, 4 * words});
  if (any([](const SamplingParams& p) { return p.repetition_penalty != 1.0f; })) arrays.push_back({kPrompt, 4 * words});
  if (any([](const SamplingParams& p) { return p.penalised(); })) arrays.push_back({kCounts, 4 * V});
  if (any([](const SamplingParams& p) { return !p.logit_bias.empty(); })) arrays.push_back({kBias, 4 * V});
  return arrays;
}

// Device bytes a row's sampler inputs take beside its logits and output (sampler_params): its parameters, its row maps
// (input, logits, probs rows), and staged_arrays.
int64_t sampler_input_bytes(const SamplingParams& s, int64_t V, const SamplingParams* also = nullptr) {
  int64_t bytes = static_cast<int64_t>(sizeof(SamplerRowParams)) + 3 * 4;
  for (const StagedArray& a : staged_arrays(s, V, also)) bytes += a.row_bytes;
  return bytes;
}

}  // namespace

int64_t device_step_bytes(int32_t vocab, const SamplingParams& target, const std::optional<VerifyMethod>& method,
                          int64_t sequences, int64_t rows_per_sequence, const SamplingParams* draft) {
  const int64_t rows = sequences * rows_per_sequence, V = vocab, N = rows_per_sequence;
  // Every slot sampler_params, verify, and the draft's plans and draws take, by the row (a target row, or a draft row:
  // at most one a node and one for the context) or by the sequence.
  // Logits, probs (kLogits, kProbs), and the sampler inputs staged in the target's slots: its rows', and those of a
  // draft's depths drawn one at a time (ranked, or siblings without replacement).
  int64_t per_row = 2 * 4 * V + sampler_input_bytes(target, V, method ? draft : nullptr);
  per_row += 2 * 4;  // a draw's token and status (kSamplerTokens, ..)
  // A penalised target counts its rows' pending ids (at most a path each): 8 bytes an entry (kPendingEntries).
  if (target.penalised()) per_row += 8 * N;
  if (method) {
    per_row += 4 * V;                                       // a draft model's laws (kDraftLaws)
    if (!verifies_greedily(*method)) per_row += 4 * V + 1;  // q uploaded, q_present (kQ, kQPresent)
    // The draft's ids: drawn (kDraftChildren), kept for verification with their statuses (kKeptIds, kKeptStatus), and
    // siblings drawn without replacement (kSiblingRows, kSiblingUniforms, kSiblingSpent; kSiblingFirst and
    // kSiblingCarried, a few per sequence and depth, fit in what a row's kept ids take); drafts, parents, path and
    // emitted.
    per_row += 4 + 8 + 4 + 8 + 4 + 4 * 4;
  }
  // A draft drawn on the device: a plan's rows stage their sampler inputs in buffers of their own (kPlanStaging), and
  // a penalised plan adds its pending ids' entries there.
  if (method && draft) per_row += sampler_input_bytes(*draft, V) + (draft->penalised() ? 8 * N : 0);
  // Per sequence: the verifier's counters and offsets (first rows, emitted and accepted counts, bonus, status, sums).
  return rows * per_row + sequences * 128;
}

int64_t held_device_bytes(int64_t step_bytes, int64_t rows) {
  // Each slot holds its largest request and up to half again (KernelStream's geometric growth), at least 256 bytes or
  // the reservation's floor (BatchVerifier::reserve).
  const int64_t least = std::max<int64_t>(256, rows * kReservedBytesPerRow);
  return step_bytes + step_bytes / 2 + least * 2 * static_cast<int64_t>(kPlanStaging);
}

void BatchVerifier::reserve(const StepReservation& r) {
  KernelStream& s = *stream_;
  const size_t rows = static_cast<size_t>(r.sequences * r.rows_per_sequence), V = static_cast<size_t>(vocab_);
  const size_t row_floats = rows * V * sizeof(float);
  const bool draft = method_ && r.draft;
  s.set_allocation_floor(rows * kReservedBytesPerRow);
  // The [rows, V] arrays every step takes at its largest: the logits a model writes in place and the processed rows.
  s.device_array<float>(kLogits, rows * V);
  s.device_array<float>(kProbs, rows * V);
  // Rows computed on the host go up through their staging array (sampler_params): the target's and a draft's depths
  // drawn one at a time in the target's slot, a draft's plans and draws (draw_drafts) in the plans' slot.
  if (r.target_rows_from_host || (draft && r.draft_rows_from_host && r.draft_depths_alone))
    s.host_buffer(kLogits, row_floats);
  if (draft && r.draft_rows_from_host) s.host_buffer(kPlanStaging + kLogits, row_floats);
  // A host drafter's q rows, staged and uploaded at the step's rows (upload_draft_laws).
  if (r.host_q && method_ && !verifies_greedily(*method_)) {
    s.host_buffer(kQ, row_floats);
    s.device_buffer(kQ, row_floats);
  }
  // The sampler inputs a pipeline's settings stage (staged_arrays), device and staging: masks, penalty counts, bias;
  // and, where ids may be pending on the device, a penalised pipeline's entries for them (two int32 an id).
  const size_t entry_bytes = rows * static_cast<size_t>(r.path_ids) * 8;
  const auto stage = [&](const SamplingParams& p, int staging, bool pending) {
    for (const StagedArray& a : staged_arrays(p, vocab_)) {
      const size_t bytes = rows * static_cast<size_t>(a.row_bytes);
      s.device_buffer(staging + a.slot, bytes);
      s.host_buffer(staging + a.slot, bytes);
    }
    if (pending && p.penalised() && entry_bytes > 0) {
      s.device_buffer(staging + kPendingEntries, entry_bytes);
      s.host_buffer(staging + kPendingEntries, entry_bytes);
    }
  };
  stage(target_.params(), 0, r.target_ids_pending);
  if (draft) {
    if (r.draft_laws) s.device_array<float>(kDraftLaws, rows * V);  // the laws its draws keep (draft_laws)
    stage(*r.draft, kPlanStaging, true);                            // a plan's, whose later depths read pending ids
    // Depths drawn one at a time stage in the target's slots, each after the wait for the depth before: no id pending.
    if (r.draft_depths_alone) stage(*r.draft, 0, false);
  }
}

void BatchVerifier::check_fits(int64_t sequences, int64_t rows_per_sequence, int64_t step_bytes,
                               int64_t session_bytes) const {
  const int64_t buffers = held_device_bytes(step_bytes, sequences * rows_per_sequence), need = buffers + session_bytes;
  const int64_t free = stream_->free_device_memory();
  if (free >= 0 && need > free)
    fail(device_label(stream_->device()), ": a step of ", sequences, " sequences with up to ", rows_per_sequence,
         " target rows each (V = ", vocab_, ") needs up to ", buffers, " bytes of buffers",
         session_bytes > 0 ? " and " + std::to_string(session_bytes) + " bytes of model sessions (KV caches)" : "",
         ", but only ", free, " are free: generate fewer sequences at once");
}

const float* BatchVerifier::process_rows(const std::vector<const float*>& logits, LogitsAt at,
                                         const std::vector<const TokenHistory*>& histories,
                                         const std::vector<RandomKey>& keys, int32_t** device_tokens,
                                         int32_t** device_status, const SamplerPipeline* pipeline,
                                         const SamplerRowMaps& maps, PendingIds pending) {
  planned_.reset();  // its buffers are rewritten: a plan's launches end here
  const std::vector<int32_t> entries =
      pending_entries(pipeline ? *pipeline : target_, histories,
                      std::vector<int64_t>(histories.size(), pending.ids ? pending.count : 0), "process_rows");
  const SamplerKernelParams p = sampler_params(logits, at, histories, keys, pipeline, maps);
  if (!entries.empty())
    stream_->pending_counts(
        stage_pending_counts(p, static_cast<int64_t>(histories.size()), entries, pending.ids, false));
  *device_tokens = p.tokens;
  *device_status = p.status;
  stream_->fused_sampler(p);
  return p.probs;
}

std::vector<int32_t> BatchVerifier::pending_entries(const SamplerPipeline& pipeline,
                                                    const std::vector<const TokenHistory*>& histories,
                                                    const std::vector<int64_t>& ids_before, const char* what) const {
  std::vector<int32_t> entries;
  for (size_t h = 0; h < histories.size(); ++h) {
    const std::vector<int32_t>& pending = histories[h]->pending_ids;
    for (int32_t i : pending)
      if (i < 0 || i >= ids_before[h])
        fail("batch verifier: ", what, ": input row ", h, "'s history has pending id ", i, ", but only ", ids_before[h],
             " ids lie on the device before it");
    if (!pipeline.params().penalised()) continue;  // the path's length alone is read (min_tokens)
    // The mutant leaves out the newest pending id: the token of the row's own node (its children's parent).
    const size_t n =
        mutant_on(Mutant::pending_counts_skip_newest) && !pending.empty() ? pending.size() - 1 : pending.size();
    for (size_t k = 0; k < n; ++k) {
      entries.push_back(static_cast<int32_t>(h));
      entries.push_back(pending[k]);
    }
  }
  return entries;
}

PendingCountsParams BatchVerifier::stage_pending_counts(const SamplerKernelParams& sampler, int64_t input_rows,
                                                        const std::vector<int32_t>& entries, const int32_t* ids,
                                                        bool plan_staging) {
  KernelStream& s = *stream_;
  const int staging = plan_staging ? static_cast<int>(kPlanStaging) : 0;
  if (!sampler.output_counts) fail("batch verifier: pending ids to count, but the sampler has no output counts");
  PendingCountsParams p;
  // The counts sampler_params uploaded, in place (its device buffer, the same slot).
  p.counts = const_cast<int32_t*>(sampler.output_counts);
  p.ids = ids;
  p.entries = s.upload(staging + kPendingEntries, entries);
  p.n = static_cast<int32_t>(entries.size() / 2);
  p.rows = static_cast<int32_t>(input_rows);
  p.vocab = vocab_;
  return p;
}

SamplerKernelParams BatchVerifier::sampler_params(const std::vector<const float*>& logits, LogitsAt at,
                                                  const std::vector<const TokenHistory*>& histories,
                                                  const std::vector<RandomKey>& keys, const SamplerPipeline* pipeline,
                                                  const SamplerRowMaps& maps, bool plan_staging) {
  KernelStream& s = *stream_;
  const int staging = plan_staging ? static_cast<int>(kPlanStaging) : 0;
  const size_t R = keys.size(), V = static_cast<size_t>(vocab_);
  const SamplingParams& params = (pipeline ? *pipeline : target_).params();
  if (!maps.input_rows && histories.size() != R)
    fail("batch verifier: ", histories.size(), " histories for ", R, " rows to process");
  // The sampler's inputs once per history (a row read by several draws is built and uploaded once), then each row's
  // parameters with its own key.
  std::vector<SamplerBatchRow> inputs(histories.size());
  for (size_t h = 0; h < histories.size(); ++h) inputs[h] = SamplerBatchRow{&params, histories[h], RandomKey{}};
  SamplerBatch batch(vocab_, inputs);
  std::vector<SamplerRowParams> row_params(R);
  for (size_t r = 0; r < R; ++r) {
    row_params[r] = batch.rows[maps.input_rows ? static_cast<size_t>((*maps.input_rows)[r]) : r];
    row_params[r].seed = keys[r].seed;
    row_params[r].stream = keys[r].stream;
    row_params[r].offset = keys[r].offset;
  }

  const bool mapped_in_place = at == LogitsAt::device && maps.logits_rows;
  const size_t uploaded = logits.size();
  if (!maps.logits_rows && uploaded != R)
    fail("batch verifier: ", uploaded, " rows of logits for ", R, " rows to process");
  float* d_logits = mapped_in_place ? s.device_array<float>(kLogits, static_cast<size_t>(logits_rows_) * V)
                                    : device_logits(static_cast<int64_t>(uploaded));
  if (mapped_in_place) {
  } else if (at == LogitsAt::device) {
    // Written in place by the caller: the rows must be device_logits' rows, in order.
    for (size_t r = 0; r < R; ++r)
      if (logits[r] != d_logits + r * V)
        fail("batch verifier: row ", r, " of ", R, " is not row ", r, " of device_logits (LogitsAt::device)");
  } else {
    float* host_logits = s.host_array<float>(staging + kLogits, uploaded * V);
    for (size_t r = 0; r < uploaded; ++r) std::memcpy(host_logits + r * V, logits[r], V * sizeof(float));
    s.to_device(d_logits, host_logits, uploaded * V * sizeof(float));
  }
  SamplerKernelParams p;
  p.logits = d_logits;
  p.rows = s.upload(staging + kRowParams, row_params);
  p.allowed_bitmap = s.upload(staging + kAllowed, batch.allowed);
  p.banned_bitmap = s.upload(staging + kBanned, batch.banned);
  p.prompt_bitmap = s.upload(staging + kPrompt, batch.prompt);
  p.output_counts = s.upload(staging + kCounts, batch.output_counts);
  p.logit_bias = s.upload(staging + kBias, batch.logit_bias);
  if (maps.input_rows) p.input_rows = s.upload(staging + kInputRows, *maps.input_rows);
  if (maps.logits_rows) p.logits_rows = s.upload(staging + kLogitsRows, *maps.logits_rows);
  if (maps.probs_rows) p.probs_rows = s.upload(staging + kProbsRows, *maps.probs_rows);
  float* d_probs = maps.probs ? maps.probs : s.device_array<float>(kProbs, R * V);
  p.probs = d_probs;
  p.tokens = s.device_array<int32_t>(kSamplerTokens, R);
  p.status = s.device_array<int32_t>(kSamplerStatus, R);
  p.batch = static_cast<int32_t>(R);
  p.vocab = vocab_;
  return p;
}

std::vector<Token> BatchVerifier::download_draws(int32_t* d_tokens, int32_t* d_status, int64_t rows,
                                                 std::vector<int32_t>& status) {
  KernelStream& s = *stream_;
  const size_t R = static_cast<size_t>(rows);
  int32_t* tokens = s.host_array<int32_t>(kSamplerTokens, R);
  int32_t* row_status = s.host_array<int32_t>(kSamplerStatus, R);
  s.to_host(tokens, d_tokens, R * sizeof(int32_t));
  s.to_host(row_status, d_status, R * sizeof(int32_t));
  s.synchronize();
  ++waits_;
  status.assign(row_status, row_status + R);
  return std::vector<Token>(tokens, tokens + R);
}

std::vector<Token> BatchVerifier::sample(const std::vector<DeviceDraw>& draws, LogitsAt at) {
  if (draws.empty()) return {};
  std::vector<const float*> logits;
  std::vector<const TokenHistory*> histories;
  std::vector<RandomKey> keys;
  for (const DeviceDraw& d : draws) {
    logits.push_back(d.logits);
    histories.push_back(d.history);
    keys.push_back(d.key);
  }
  int32_t *d_tokens = nullptr, *d_status = nullptr;
  process_rows(logits, at, histories, keys, &d_tokens, &d_status);
  std::vector<int32_t> status;
  std::vector<Token> tokens = download_draws(d_tokens, d_status, static_cast<int64_t>(draws.size()), status);
  check_sampler_status(status.data(), static_cast<int32_t>(status.size()));
  return tokens;
}

namespace {

// The batch's dense layout: W = the widest draft; the rows of sequence b start at first_row[b] of the
// [rows, V] arrays (its tree's size + 1 rows).
struct BatchShape {
  int32_t width = 0;
  std::vector<int64_t> first_row;
  int64_t rows = 0;
};

BatchShape batch_shape(const std::vector<DeviceStep>& steps, VerifyMethod method) {
  const bool tree_kernel = device_kernel(method) == VerifyKernel::tree;
  BatchShape shape;
  for (const DeviceStep& step : steps) {
    const TokenTree& t = *step.tree;
    if (!tree_kernel)
      for (int32_t i = 0; i < t.size(); ++i)
        if (t.parent[i] != i - 1) fail("batch verifier: method ", verify_method_name(method), " needs a chain");
    shape.width = std::max(shape.width, t.size());
    shape.first_row.push_back(shape.rows);
    shape.rows += t.size() + 1;
  }
  if (tree_kernel ? shape.width > kMaxVerifyTreeNodes : shape.width > kMaxVerifyDraft)
    fail("batch verifier: a draft of ", shape.width, tree_kernel ? " nodes" : " tokens", " exceeds the kernels' limit");
  return shape;
}

// The recorded draft laws q on the device ([rows, V], and which rows have one), or nulls when no row has
// one (greedy verifies its drafts as point masses on one-hot rows).
struct DraftLaws {
  const float* q = nullptr;
  const uint8_t* q_present = nullptr;
  const int64_t* q_first_row = nullptr;  // with q's rows apart from the step's (VerifyRowLayout::q_first_row)
  int64_t q_total_rows = 0;
};

// Trees whose laws a draft model drew on the device (TokenTree::device_q) are read where they are: `draft_laws`
// (BatchVerifier::draft_laws, `law_rows` rows), whose layout is the step's when every tree is full. Trees of
// different sizes (siblings drawn without replacement whose laws ran out of mass) are read there too, each step's
// first law row given to the kernels (VerifyRowLayout::q_first_row).
DraftLaws upload_draft_laws(KernelStream& s, const std::vector<DeviceStep>& steps, const BatchShape& shape,
                            int32_t vocab, bool use_q, const float* draft_laws, int64_t law_rows) {
  const size_t R = static_cast<size_t>(shape.rows), V = static_cast<size_t>(vocab);
  uint8_t* q_present = s.host_array<uint8_t>(kQPresent, R);
  std::fill(q_present, q_present + R, uint8_t{0});
  const size_t on_device = static_cast<size_t>(
      std::count_if(steps.begin(), steps.end(), [](const DeviceStep& step) { return step.tree->device_q != nullptr; }));
  if (on_device > 0 && use_q) {
    // Each step's first law row (sequence b's laws start at its own row of draft_laws, wherever that is).
    int64_t* q_first_row = s.host_array<int64_t>(kQFirstRow, steps.size());
    bool in_place = true;
    for (size_t b = 0; b < steps.size(); ++b) {
      const int64_t offset = draft_laws ? steps[b].tree->device_q - draft_laws : -1;
      const int64_t rows = steps[b].tree->size() + 1;
      if (on_device != steps.size() || !draft_laws || offset < 0 || offset % static_cast<int64_t>(V) != 0 ||
          offset / static_cast<int64_t>(V) + rows > law_rows)
        fail("batch verifier: step ", b, "'s draft laws are in device memory but not at its rows of draft_laws");
      q_first_row[b] = offset / static_cast<int64_t>(V);
      in_place = in_place && q_first_row[b] == shape.first_row[b];
    }
    // The rows with children hold a law (a chain's rows 0 .. n-1; a tree's inner rows); a leaf's row was never drawn
    // from, and its row of draft_laws holds whatever was there. q_present indexes q's rows: the step's, or
    // draft_laws' own.
    const size_t q_rows = in_place ? R : static_cast<size_t>(law_rows);
    uint8_t* present = in_place ? q_present : s.host_array<uint8_t>(kQPresent, q_rows);
    std::fill(present, present + q_rows, uint8_t{0});
    for (size_t b = 0; b < steps.size(); ++b)
      for (int32_t parent : steps[b].tree->parent) present[q_first_row[b] + parent + 1] = 1;
    uint8_t* d_q_present = s.device_array<uint8_t>(kQPresent, q_rows);
    s.to_device(d_q_present, present, q_rows);
    if (in_place) return {draft_laws, d_q_present};
    int64_t* d_q_first_row = s.device_array<int64_t>(kQFirstRow, steps.size());
    s.to_device(d_q_first_row, q_first_row, steps.size() * sizeof(int64_t));
    return {draft_laws, d_q_present, d_q_first_row, law_rows};
  }
  float* host_q = nullptr;
  for (size_t b = 0; b < steps.size() && use_q; ++b)
    for (int32_t r = 0; r < steps[b].tree->size(); ++r) {  // rows with children: 0..n-1 in a chain
      const std::vector<float>& q = steps[b].tree->q_at_row(r);
      if (q.empty()) continue;
      if (q.size() != V) fail("batch verifier: a recorded q row has ", q.size(), " entries");
      if (!host_q) host_q = s.host_array<float>(kQ, R * V);
      std::memcpy(host_q + static_cast<size_t>(shape.first_row[b] + r) * V, q.data(), V * sizeof(float));
      q_present[shape.first_row[b] + r] = 1;
    }
  if (!host_q) return {};
  float* d_q = s.device_array<float>(kQ, R * V);
  s.to_device(d_q, host_q, R * V * sizeof(float));
  uint8_t* d_q_present = s.device_array<uint8_t>(kQPresent, R);
  s.to_device(d_q_present, q_present, R);
  return {d_q, d_q_present};
}

// A host array staged in its slot, copied to the slot's device buffer.
template <typename T>
T* staged_to_device(KernelStream& s, int slot, T* host, size_t count) {
  T* device = s.device_array<T>(slot, count);
  s.to_device(device, host, count * sizeof(T));
  return device;
}

// The drafts [B, W] (padded with token 0 / parent -1; `device_draft` instead where they already are, every tree of
// W nodes), each sequence's keys and sizes, and the row layout, on the device. Also allocates the outputs.
struct StagedBatch {
  const int32_t* draft = nullptr;
  const int32_t* parents = nullptr;
  const VerifyRowParams* rows = nullptr;
  VerifyRowLayout layout;
  VerifyOutputs out;
};

StagedBatch stage_batch(KernelStream& s, const std::vector<DeviceStep>& steps, const BatchShape& shape,
                        const DraftLaws& laws, bool tree_kernel, const int32_t* device_draft) {
  const size_t B = steps.size(), width = static_cast<size_t>(std::max(shape.width, 1));
  int32_t* draft = s.host_array<int32_t>(kDraft, B * width);
  int32_t* parents = s.host_array<int32_t>(kParents, B * width);
  VerifyRowParams* rows = s.host_array<VerifyRowParams>(kVerifyRows, B);
  int64_t* first = s.host_array<int64_t>(kFirstRow, B);
  for (size_t b = 0; b < B; ++b) {
    const TokenTree& t = *steps[b].tree;
    for (size_t i = 0; i < width; ++i) {
      draft[b * width + i] = i < static_cast<size_t>(t.size()) ? t.tokens[i] : 0;
      parents[b * width + i] = i < static_cast<size_t>(t.size()) ? t.parent[i] : -1;
    }
    VerifyRowParams& rp = rows[b];
    rp = VerifyRowParams{};
    rp.seed = steps[b].rng.seed;
    rp.sequence = steps[b].rng.sequence;
    rp.step = steps[b].rng.step;
    rp.num_draft = t.size();
    rp.flags = laws.q ? kVerifyRowHasQ : 0u;
    // A fed tree of siblings without replacement kept at its full shape: its nodes never drawn are holes (-1).
    if (t.device_tokens && t.scheme == SiblingScheme::without_replacement) rp.flags |= kVerifyRowHoles;
    rp.scheme = kernel_sibling_scheme(t.scheme);
    first[b] = shape.first_row[b];
  }
  StagedBatch staged;
  staged.draft = device_draft ? device_draft : staged_to_device(s, kDraft, draft, B * width);
  if (tree_kernel) staged.parents = staged_to_device(s, kParents, parents, B * width);
  staged.rows = staged_to_device(s, kVerifyRows, rows, B);
  staged.layout.first_row = staged_to_device(s, kFirstRow, first, B);
  staged.layout.total_rows = shape.rows;
  staged.layout.q_present = laws.q_present;
  staged.layout.q_first_row = laws.q_first_row;
  staged.layout.q_total_rows = laws.q_total_rows;
  const size_t E = static_cast<size_t>(shape.width) + 1;
  staged.out.emitted = s.device_array<int32_t>(kEmitted, B * E);
  staged.out.num_emitted = s.device_array<int32_t>(kNumEmitted, B);
  staged.out.num_accepted = s.device_array<int32_t>(kNumAccepted, B);
  staged.out.bonus = s.device_array<int32_t>(kBonus, B);
  staged.out.q_zero_errors = s.device_array<int32_t>(kQZero, B);
  staged.out.status = s.device_array<int32_t>(kStatus, B);
  staged.out.overlap_sum = s.device_array<double>(kOverlapSum, B);
  staged.out.overlap_count = s.device_array<int32_t>(kOverlapCount, B);
  return staged;
}

// One verification launch for the whole batch; returns the tree kernel's accepted paths [B, W] (null for
// chains, whose path is 0, 1, ...).
int32_t* launch_verification(KernelStream& s, VerifyMethod method, const float* p, const DraftLaws& laws,
                             const StagedBatch& staged, const BatchShape& shape, int32_t vocab, size_t batch) {
  if (device_kernel(method) == VerifyKernel::tree) {
    TreeVerifyParams tp;
    tp.p = p;
    tp.q = laws.q;
    tp.tokens = staged.draft;
    tp.parents = staged.parents;
    tp.rows = staged.rows;
    tp.out = staged.out;
    tp.layout = staged.layout;
    tp.path = s.device_array<int32_t>(kPath, batch * static_cast<size_t>(std::max(shape.width, 1)));
    tp.batch = static_cast<int32_t>(batch);
    tp.max_nodes = shape.width;
    tp.vocab = vocab;
    s.tree_verify(tp);
    return tp.path;
  }
  BlockVerifyParams cp;
  cp.p = p;
  cp.q = laws.q;
  cp.draft = staged.draft;
  cp.rows = staged.rows;
  cp.out = staged.out;
  cp.layout = staged.layout;
  cp.batch = static_cast<int32_t>(batch);
  cp.max_draft = shape.width;
  cp.vocab = vocab;
  if (device_kernel(method) == VerifyKernel::block)
    s.block_verify(cp);
  else
    s.chain_verify(cp);
  return nullptr;
}

// Copies back only the emitted tokens, the counters and the statuses, and turns them into step results;
// a failed sampler row or verification is an Error naming the sequence and step. `after_wait`, when given, runs
// once the copies it enqueued with them have landed, before those checks (a failed draft draw is named first).
std::vector<DeviceStepResult> collect_results(KernelStream& s, const std::vector<DeviceStep>& steps,
                                              const BatchShape& shape, const VerifyOutputs& out,
                                              const int32_t* d_sampler_status, const int32_t* d_path,
                                              const std::function<void()>& after_wait) {
  const size_t B = steps.size(), E = static_cast<size_t>(shape.width) + 1;
  const size_t width = static_cast<size_t>(std::max(shape.width, 1)), R = static_cast<size_t>(shape.rows);
  const auto back = [&](int slot, const auto* device, size_t count) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(device)>>;
    T* host = s.host_array<T>(slot, count);
    s.to_host(host, device, count * sizeof(T));
    return host;
  };
  const int32_t* emitted = back(kEmitted, out.emitted, B * E);
  const int32_t* num_emitted = back(kNumEmitted, out.num_emitted, B);
  const int32_t* num_accepted = back(kNumAccepted, out.num_accepted, B);
  const int32_t* bonus = back(kBonus, out.bonus, B);
  const int32_t* q_zero = back(kQZero, out.q_zero_errors, B);
  const int32_t* status = back(kStatus, out.status, B);
  const double* overlap_sum = back(kOverlapSum, out.overlap_sum, B);
  const int32_t* overlap_count = back(kOverlapCount, out.overlap_count, B);
  const int32_t* sampler_status = back(kSamplerStatus, d_sampler_status, R);
  const int32_t* path = d_path ? back(kPath, d_path, B * width) : nullptr;
  s.synchronize();
  if (after_wait) after_wait();

  for (size_t b = 0; b < B; ++b) {
    for (int64_t r = shape.first_row[b]; r <= shape.first_row[b] + steps[b].tree->size(); ++r)
      if (sampler_status[r] != 0)
        fail("sequence ", steps[b].rng.sequence, ", step ", steps[b].rng.step, ", target row ", r - shape.first_row[b],
             ": ", sampler_status_message(sampler_status[r]));
    if (status[b] != 0)
      fail("sequence ", steps[b].rng.sequence, ", step ", steps[b].rng.step,
           ": verification failed: ", verify_status_message(status[b]));
  }
  std::vector<DeviceStepResult> results(B);
  for (size_t b = 0; b < B; ++b) {
    DeviceStepResult& r = results[b];
    r.outcome.accepted = num_accepted[b];
    r.outcome.all_accepted = bonus[b] != 0;
    r.outcome.q_zero_errors = q_zero[b];
    r.outcome.emitted.assign(emitted + b * E, emitted + b * E + num_emitted[b]);
    for (int32_t i = 0; i < num_accepted[b]; ++i) r.outcome.path.push_back(path ? path[b * width + i] : i);
    r.expected_acceptance_sum = overlap_sum[b];
    r.expected_acceptance_count = overlap_count[b];
  }
  return results;
}

}  // namespace

const float* BatchVerifier::process_step_rows(const std::vector<DeviceStep>& steps, LogitsAt at, int64_t rows,
                                              int32_t** device_status) {
  // Each row with its own history along the draft path when the params read histories (target_rows.h).
  std::vector<const float*> row_logits;
  std::vector<const TokenHistory*> row_histories;
  std::vector<TokenHistory> extended;
  const bool by_row = target_.params().uses_history();
  if (by_row) extended.reserve(static_cast<size_t>(rows));
  for (size_t b = 0; b < steps.size(); ++b) {
    const DeviceStep& step = steps[b];
    for (int32_t r = 0; r <= step.tree->size(); ++r) {
      row_logits.push_back(step.logits + static_cast<size_t>(r) * static_cast<size_t>(vocab_));
      if (!by_row) {
        row_histories.push_back(step.history);
        continue;
      }
      // Mirostat is refused, so no row's history needs its ancestors' probabilities.
      if (step.tree->device_tokens) {
        // The ids still in device memory: the path's, where the kept plan holds them (sequence b's at b * width).
        std::vector<int32_t> path = step.tree->path_nodes(r - 1);
        for (int32_t& n : path) n += static_cast<int32_t>(static_cast<int64_t>(b) * kept_->width);
        extended.push_back(pending_history(target_, *step.history, std::move(path)));
      } else {
        extended.push_back(row_history(target_, *step.history, *step.tree, nullptr, r));
      }
      row_histories.push_back(&extended.back());
    }
  }
  int32_t* device_tokens = nullptr;
  const PendingIds pending = kept_ ? PendingIds{kept_->ids, kept_->sequences * kept_->width} : PendingIds{};
  return process_rows(row_logits, at, row_histories, std::vector<RandomKey>(static_cast<size_t>(rows)), &device_tokens,
                      device_status, nullptr, {}, pending);
}

std::vector<DeviceStepResult> BatchVerifier::verify(const std::vector<DeviceStep>& steps, LogitsAt at) {
  if (!method_) fail("batch verifier: no verification method (the autoregressive baseline only samples)");
  if (steps.empty()) return {};
  KernelStream& s = *stream_;
  const VerifyMethod method = *method_;
  BatchShape shape = batch_shape(steps, method);
  // 1. The sampler pipeline on every target row. 2. The recorded draft laws. 3. Drafts, keys and layout.
  const int32_t* kept_ids = kept_draft_ids(steps);  // checked before any launch
  // Kept ids are read at their width, the batch's drafts' stride, which its trees may all be shorter than.
  if (kept_ids) shape.width = std::max(shape.width, static_cast<int32_t>(kept_->width));
  int32_t* d_sampler_status = nullptr;
  const float* d_p = process_step_rows(steps, at, shape.rows, &d_sampler_status);
  const DraftLaws laws = upload_draft_laws(s, steps, shape, vocab_, !verifies_greedily(method), draft_laws_,
                                           draft_sequences_ * (draft_depth_ + 1));
  const StagedBatch staged = stage_batch(s, steps, shape, laws, device_kernel(method) == VerifyKernel::tree, kept_ids);
  // 4. One verification launch for the batch. 5. Only the emitted tokens and counters come back, with the draft's
  // ids and its draws' statuses where they stayed on the device.
  const int32_t* d_path = launch_verification(s, method, d_p, laws, staged, shape, vocab_, steps.size());
  ++waits_;  // collect_results waits for the step's results
  if (!kept_ids) return collect_results(s, steps, shape, staged.out, d_sampler_status, d_path, nullptr);
  const KeptIds kept = std::move(*kept_);
  kept_.reset();  // once: its buffers are the next plan's
  const size_t n = static_cast<size_t>(kept.sequences * kept.width);
  int32_t* ids = s.host_array<int32_t>(kKeptIds, n);
  int32_t* draw_status = s.host_array<int32_t>(kKeptStatus, static_cast<size_t>(kept.rows));
  s.to_host(ids, kept.ids, n * sizeof(int32_t));
  s.to_host(draw_status, kept.status, static_cast<size_t>(kept.rows) * sizeof(int32_t));
  std::vector<DeviceStepResult> results = collect_results(s, steps, shape, staged.out, d_sampler_status, d_path, [&] {
    if (kept.plan.siblings) return check_kept_siblings(kept, ids, draw_status);
    check_planned_statuses(kept.plan, draw_status, kept.rows);
    for (size_t i = 0; i < n; ++i)
      if (ids[i] < 0 || ids[i] >= vocab_)
        fail("batch verifier: draft node ", i % static_cast<size_t>(kept.width), " of step ",
             i / static_cast<size_t>(kept.width), " is ", ids[i], ", not a token of [0, ", vocab_, ")");
  });
  for (size_t b = 0; b < results.size(); ++b)
    results[b].draft_tokens.assign(ids + b * static_cast<size_t>(kept.width),
                                   ids + b * static_cast<size_t>(kept.width) + steps[b].tree->size());
  return results;
}

}  // namespace specula
