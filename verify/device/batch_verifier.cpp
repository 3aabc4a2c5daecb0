#include "verify/device/batch_verifier.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/shared/error.h"
#include "verify/device/sampler_batch.h"
#include "verify/device/tree_scheme.h"
#include "verify/verifiers/target_rows.h"

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
};

std::string device_label(Device d) { return std::string("device ") + device_name(d); }

}  // namespace

void check_device_support(const std::optional<VerifyMethod>& method, const SamplingParams& s, int64_t draft_nodes,
                          Device device) {
  const std::string on = " is not supported on " + device_label(device);
  if (method && is_lossy(*method))
    fail_parameter("method", " ", verify_method_name(*method), on, " (the kernels verify greedy, chain, tree, block)");
  if (const std::optional<UnsupportedSetting> u = unsupported_on_cuda(s)) {
    if (u->parameter == "device")  // a constraint
      fail_parameter("device", " ", device_name(device), ": constrained decoding (regex / json schema)", on);
    if (u->parameter == "logit_bias") fail_parameter("logit_bias", ": not supported on cuda: ", u->what);
    fail_parameter(u->parameter, u->value.empty() ? "" : " " + u->value, on,
                   " (the fused sampler applies masks, logit bias, penalties, temperature, min_p, top_k and top_p)");
  }
  if (!method) return;
  if (*method == VerifyMethod::tree) {
    if (draft_nodes > kMaxVerifyTreeNodes)
      fail_parameter("tree", " has ", draft_nodes, " nodes; the verification kernels take at most ",
                     kMaxVerifyTreeNodes, " (", device_label(device), ")");
  } else if (draft_nodes > kMaxVerifyDraft) {
    fail_parameter("num_draft_tokens", " must be <= ", kMaxVerifyDraft, " on ", device_label(device), ", got ",
                   draft_nodes);
  }
}

BatchVerifier::BatchVerifier(Device device, const SamplerPipeline& target, std::optional<VerifyMethod> method,
                             const EmulationOptions& emulation)
    : stream_(make_kernel_stream(device, emulation)), target_(target), method_(method), vocab_(target.vocab_size()) {
  check_device_support(method, target.params(), 0, device);
}

int64_t BatchVerifier::step_bytes(int64_t sequences, int64_t rows_per_sequence) const {
  const int64_t rows = sequences * rows_per_sequence, V = vocab_, words = (V + 31) / 32;
  const SamplingParams& s = target_.params();
  int64_t per_row = 2 * 4 * V + 64;                                       // logits, probs, row params, token, status
  if (method_ && *method_ != VerifyMethod::greedy) per_row += 4 * V + 1;  // q, q_present
  if (!s.allowed_tokens.empty()) per_row += 4 * words;
  if (!s.banned_tokens.empty() || s.min_tokens > 0) per_row += 4 * words;
  if (s.repetition_penalty != 1.0f) per_row += 4 * words;
  if (s.repetition_penalty != 1.0f || s.frequency_penalty != 0.0f || s.presence_penalty != 0.0f) per_row += 4 * V;
  if (!s.logit_bias.empty()) per_row += 4 * V;
  // Per sequence: drafts, parents, path, emitted (4 bytes per row each), counters.
  return rows * per_row + sequences * (16 * rows_per_sequence + 128);
}

void BatchVerifier::check_fits(int64_t sequences, int64_t rows_per_sequence) const {
  const int64_t need = step_bytes(sequences, rows_per_sequence);
  const int64_t free = stream_->free_device_memory();
  if (free >= 0 && need > free)
    fail(device_label(stream_->device()), ": a step of ", sequences, " sequences with up to ", rows_per_sequence,
         " target rows each (V = ", vocab_, ") needs ", need, " bytes of buffers, but only ", free,
         " are free: generate fewer sequences at once");
}

const float* BatchVerifier::process_rows(const std::vector<const float*>& logits,
                                         const std::vector<const TokenHistory*>& histories,
                                         const std::vector<RandomKey>& keys, int32_t** device_tokens,
                                         int32_t** device_status) {
  KernelStream& s = *stream_;
  const size_t R = logits.size(), V = static_cast<size_t>(vocab_);
  std::vector<SamplerBatchRow> rows(R);
  for (size_t r = 0; r < R; ++r) rows[r] = SamplerBatchRow{&target_.params(), histories[r], keys[r]};
  const SamplerBatch batch(vocab_, rows);

  float* host_logits = s.host_array<float>(kLogits, R * V);
  for (size_t r = 0; r < R; ++r) std::memcpy(host_logits + r * V, logits[r], V * sizeof(float));
  float* d_logits = s.device_array<float>(kLogits, R * V);
  s.to_device(d_logits, host_logits, R * V * sizeof(float));
  SamplerKernelParams p;
  p.logits = d_logits;
  p.rows = s.upload(kRowParams, batch.rows);
  p.allowed_bitmap = s.upload(kAllowed, batch.allowed);
  p.banned_bitmap = s.upload(kBanned, batch.banned);
  p.prompt_bitmap = s.upload(kPrompt, batch.prompt);
  p.output_counts = s.upload(kCounts, batch.output_counts);
  p.logit_bias = s.upload(kBias, batch.logit_bias);
  float* d_probs = s.device_array<float>(kProbs, R * V);
  p.probs = d_probs;
  p.tokens = *device_tokens = s.device_array<int32_t>(kSamplerTokens, R);
  p.status = *device_status = s.device_array<int32_t>(kSamplerStatus, R);
  p.batch = static_cast<int32_t>(R);
  p.vocab = vocab_;
  s.fused_sampler(p);
  return d_probs;
}

std::vector<Token> BatchVerifier::sample(const std::vector<DeviceDraw>& draws) {
  if (draws.empty()) return {};
  KernelStream& s = *stream_;
  const size_t B = draws.size();
  std::vector<const float*> logits(B);
  std::vector<const TokenHistory*> histories(B);
  std::vector<RandomKey> keys(B);
  for (size_t b = 0; b < B; ++b) {
    logits[b] = draws[b].logits;
    histories[b] = draws[b].history;
    keys[b] = draws[b].key;
  }
  int32_t *d_tokens = nullptr, *d_status = nullptr;
  process_rows(logits, histories, keys, &d_tokens, &d_status);
  int32_t* tokens = s.host_array<int32_t>(kSamplerTokens, B);
  int32_t* status = s.host_array<int32_t>(kSamplerStatus, B);
  s.to_host(tokens, d_tokens, B * sizeof(int32_t));
  s.to_host(status, d_status, B * sizeof(int32_t));
  s.synchronize();
  check_sampler_status(status, static_cast<int32_t>(B));
  return std::vector<Token>(tokens, tokens + B);
}

std::vector<DeviceStepResult> BatchVerifier::verify(const std::vector<DeviceStep>& steps) {
  if (!method_) fail("batch verifier: no verification method (the autoregressive baseline only samples)");
  if (steps.empty()) return {};
  KernelStream& s = *stream_;
  const VerifyMethod method = *method_;
  const bool tree_kernel = method == VerifyMethod::tree;
  const size_t B = steps.size(), V = static_cast<size_t>(vocab_);

  // Shapes: W = the widest draft of the batch; rows of sequence b at first_row[b] of the dense [R, V] arrays.
  int32_t W = 0;
  std::vector<int64_t> first_row(B);
  int64_t R = 0;
  for (size_t b = 0; b < B; ++b) {
    const TokenTree& t = *steps[b].tree;
    if (!tree_kernel)
      for (int32_t i = 0; i < t.size(); ++i)
        if (t.parent[i] != i - 1) fail("batch verifier: method ", verify_method_name(method), " needs a chain");
    W = std::max(W, t.size());
    first_row[b] = R;
    R += t.size() + 1;
  }
  if (tree_kernel ? W > kMaxVerifyTreeNodes : W > kMaxVerifyDraft)
    fail("batch verifier: a draft of ", W, tree_kernel ? " nodes" : " tokens", " exceeds the kernels' limit");

  // 1. The sampler pipeline on every target row, each with its row's history (target_rows.h).
  std::vector<const float*> row_logits;
  std::vector<const TokenHistory*> row_histories;
  std::vector<TokenHistory> extended;  // histories along draft paths, when the params read them
  const bool by_row = target_.params().uses_history();
  if (by_row) extended.reserve(static_cast<size_t>(R));
  for (const DeviceStep& step : steps)
    for (int32_t r = 0; r <= step.tree->size(); ++r) {
      row_logits.push_back(step.logits + static_cast<size_t>(r) * V);
      if (by_row) {  // mirostat is refused, so no row's history needs its ancestors' probabilities
        extended.push_back(row_history(target_, *step.history, *step.tree, nullptr, r));
        row_histories.push_back(&extended.back());
      } else {
        row_histories.push_back(step.history);
      }
    }
  int32_t *d_sampler_tokens = nullptr, *d_sampler_status = nullptr;
  const float* d_p = process_rows(row_logits, row_histories, std::vector<RandomKey>(static_cast<size_t>(R)),
                                  &d_sampler_tokens, &d_sampler_status);

  // 2. The recorded draft laws (none for greedy: its drafts are verified as point masses on one-hot rows).
  const bool use_q = method != VerifyMethod::greedy;
  bool any_q = false;
  uint8_t* q_present = s.host_array<uint8_t>(kQPresent, static_cast<size_t>(R));
  std::fill(q_present, q_present + R, uint8_t{0});
  float* host_q = nullptr;
  for (size_t b = 0; b < B && use_q; ++b)
    for (int32_t r = 0; r < steps[b].tree->size(); ++r) {  // rows with children: 0..n-1 in a chain
      const std::vector<float>& q = steps[b].tree->q_at_row(r);
      if (q.empty()) continue;
      if (static_cast<int64_t>(q.size()) != vocab_) fail("batch verifier: a recorded q row has ", q.size(), " entries");
      if (!host_q) host_q = s.host_array<float>(kQ, static_cast<size_t>(R) * V);
      std::memcpy(host_q + static_cast<size_t>(first_row[b] + r) * V, q.data(), V * sizeof(float));
      q_present[first_row[b] + r] = 1;
      any_q = true;
    }
  float* d_q = nullptr;
  uint8_t* d_q_present = nullptr;
  if (any_q) {
    d_q = s.device_array<float>(kQ, static_cast<size_t>(R) * V);
    s.to_device(d_q, host_q, static_cast<size_t>(R) * V * sizeof(float));
    d_q_present = s.device_array<uint8_t>(kQPresent, static_cast<size_t>(R));
    s.to_device(d_q_present, q_present, static_cast<size_t>(R));
  }

  // 3. Drafts, per-row keys and the layout.
  const size_t width = static_cast<size_t>(std::max(W, 1));
  int32_t* draft = s.host_array<int32_t>(kDraft, B * width);
  int32_t* parents = s.host_array<int32_t>(kParents, B * width);
  VerifyRowParams* rows = s.host_array<VerifyRowParams>(kVerifyRows, B);
  int64_t* host_first = s.host_array<int64_t>(kFirstRow, B);
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
    rp.flags = any_q ? kVerifyRowHasQ : 0u;
    rp.scheme = kernel_sibling_scheme(t.scheme);
    host_first[b] = first_row[b];
  }
  // The arrays staged above, copied to their device buffers.
  const auto staged_to_device = [&](int slot, auto* host, size_t count) {
    using T = std::remove_pointer_t<decltype(host)>;
    T* device = s.device_array<T>(slot, count);
    s.to_device(device, host, count * sizeof(T));
    return device;
  };
  const size_t E = static_cast<size_t>(W) + 1;
  VerifyOutputs out;
  out.emitted = s.device_array<int32_t>(kEmitted, B * E);
  out.num_emitted = s.device_array<int32_t>(kNumEmitted, B);
  out.num_accepted = s.device_array<int32_t>(kNumAccepted, B);
  out.bonus = s.device_array<int32_t>(kBonus, B);
  out.q_zero_errors = s.device_array<int32_t>(kQZero, B);
  out.status = s.device_array<int32_t>(kStatus, B);
  out.overlap_sum = s.device_array<double>(kOverlapSum, B);
  out.overlap_count = s.device_array<int32_t>(kOverlapCount, B);
  VerifyRowLayout layout;
  layout.first_row = staged_to_device(kFirstRow, host_first, B);
  layout.total_rows = R;
  layout.q_present = d_q_present;
  int32_t* d_path = nullptr;

  // 4. One verification launch for the batch.
  if (tree_kernel) {
    TreeVerifyParams tp;
    tp.p = d_p;
    tp.q = d_q;
    tp.tokens = staged_to_device(kDraft, draft, B * width);
    tp.parents = staged_to_device(kParents, parents, B * width);
    tp.rows = staged_to_device(kVerifyRows, rows, B);
    tp.out = out;
    tp.layout = layout;
    tp.path = d_path = s.device_array<int32_t>(kPath, B * width);
    tp.batch = static_cast<int32_t>(B);
    tp.max_nodes = W;
    tp.vocab = vocab_;
    s.tree_verify(tp);
  } else {
    BlockVerifyParams cp;
    cp.p = d_p;
    cp.q = d_q;
    cp.draft = staged_to_device(kDraft, draft, B * width);
    cp.rows = staged_to_device(kVerifyRows, rows, B);
    cp.out = out;
    cp.layout = layout;
    cp.batch = static_cast<int32_t>(B);
    cp.max_draft = W;
    cp.vocab = vocab_;
    if (method == VerifyMethod::block)
      s.block_verify(cp);
    else
      s.chain_verify(cp);
  }

  // 5. Only the emitted tokens, the counters and the statuses come back.
  int32_t* emitted = s.host_array<int32_t>(kEmitted, B * E);
  int32_t* num_emitted = s.host_array<int32_t>(kNumEmitted, B);
  int32_t* num_accepted = s.host_array<int32_t>(kNumAccepted, B);
  int32_t* bonus = s.host_array<int32_t>(kBonus, B);
  int32_t* q_zero = s.host_array<int32_t>(kQZero, B);
  int32_t* status = s.host_array<int32_t>(kStatus, B);
  double* overlap_sum = s.host_array<double>(kOverlapSum, B);
  int32_t* overlap_count = s.host_array<int32_t>(kOverlapCount, B);
  int32_t* sampler_status = s.host_array<int32_t>(kSamplerStatus, static_cast<size_t>(R));
  int32_t* path = tree_kernel ? s.host_array<int32_t>(kPath, B * width) : nullptr;
  s.to_host(emitted, out.emitted, B * E * sizeof(int32_t));
  s.to_host(num_emitted, out.num_emitted, B * sizeof(int32_t));
  s.to_host(num_accepted, out.num_accepted, B * sizeof(int32_t));
  s.to_host(bonus, out.bonus, B * sizeof(int32_t));
  s.to_host(q_zero, out.q_zero_errors, B * sizeof(int32_t));
  s.to_host(status, out.status, B * sizeof(int32_t));
  s.to_host(overlap_sum, out.overlap_sum, B * sizeof(double));
  s.to_host(overlap_count, out.overlap_count, B * sizeof(int32_t));
  s.to_host(sampler_status, d_sampler_status, static_cast<size_t>(R) * sizeof(int32_t));
  if (path) s.to_host(path, d_path, B * width * sizeof(int32_t));
  s.synchronize();

  for (size_t b = 0; b < B; ++b) {
    for (int64_t r = first_row[b]; r <= first_row[b] + steps[b].tree->size(); ++r)
      if (sampler_status[r] != 0)
        fail("sequence ", steps[b].rng.sequence, ", step ", steps[b].rng.step, ", target row ", r - first_row[b], ": ",
             sampler_status_message(sampler_status[r]));
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

}  // namespace specula
