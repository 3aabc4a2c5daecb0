// Host side of the fused sampler: parameter checks, status messages, the launch configuration, and the
// CPU backend of the per-row algorithm (one "thread" per row, same decisions as the CUDA block).
#include "kernels/sampler_kernels.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/fused_sampler_row.h"
#include "kernels/shared/error.h"

namespace specula {

const char* sampler_status_message(int32_t status) {
  switch (static_cast<SamplerRowStatus>(status)) {
    case SamplerRowStatus::ok:
      return "ok";
    case SamplerRowStatus::nan_logit:
      return "a logit is NaN";
    case SamplerRowStatus::pos_inf_logit:
      return "a logit is +inf";
    case SamplerRowStatus::all_masked:
      return "allowed_tokens / banned_tokens / min_tokens leave no token at all";
    case SamplerRowStatus::nothing_left:
      return "penalties or temperature overflowed every logit to -inf";
    case SamplerRowStatus::overflow:
      return "a processed logit overflowed to +inf (penalty, bias or temperature)";
  }
  return "unknown status";
}

void check_sampler_status(const int32_t* status, int32_t rows) {
  for (int32_t r = 0; r < rows; ++r)
    if (status[r] != static_cast<int32_t>(SamplerRowStatus::ok))
      fail("fused sampler: row ", r, ": ", sampler_status_message(status[r]), " (status ", status[r], ")");
}

void SamplerKernelParams::check() const {
  if (batch < 1) fail("fused sampler: batch must be >= 1, got ", batch);
  if (vocab < 1 || vocab > (1 << 30)) fail("fused sampler: vocab must be in [1, 2^30], got ", vocab);
  if (!logits) fail("fused sampler: logits [B, V] is null");
  if (!rows) fail("fused sampler: rows [B] is null");
  if (!probs) fail("fused sampler: probs [B, V] is null");
  if (!tokens) fail("fused sampler: tokens [B] is null");
  if (!status) fail("fused sampler: status [B] is null");
  if (static_cast<const void*>(probs) == static_cast<const void*>(logits))
    fail("fused sampler: probs must not alias logits (probs is the kernel's scratch)");
  if (cluster_blocks < 0 || cluster_blocks > kMaxSamplerClusterBlocks)
    fail("fused sampler: cluster_blocks must be in [0, ", kMaxSamplerClusterBlocks, "], got ", cluster_blocks);
  if (row_exchange != RowExchange::automatic && row_exchange != RowExchange::global_memory)
    fail("fused sampler: row_exchange must be automatic (0) or global_memory (1), got ",
         static_cast<int>(row_exchange));
  if (cluster_blocks > 1 && cluster_slice_span(vocab, cluster_blocks, 1) > kMaxSamplerSliceTokens)
    fail("fused sampler: cluster_blocks ", cluster_blocks, " leaves slices of more than ", kMaxSamplerSliceTokens,
         " tokens (V = ", vocab, ")");
}

namespace {

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One CPU "thread" that owns the whole row: collectives are identities, the histogram is an array.
struct HostBlock {
  static constexpr int kThreads = 1;
  static constexpr int kVec = 1;
  int32_t vocab;
  std::vector<uint64_t> hist = std::vector<uint64_t>(fused_sampler::kRadixBins + 1, 0);

  int rank() const { return 0; }
  bool leader() const { return true; }
  bool block_leader() const { return true; }
  template <class F>
  void for_each_vec(F&& f) {
    for (int32_t base = 0; base < vocab; ++base) f(base);
  }
  fused_sampler::VecRange vec_range() const { return {0, vocab, 1}; }
  double sum_f64(double v) { return v; }
  int32_t min_i32(int32_t v) { return v; }
  int32_t max_i32(int32_t v) { return v; }
  fused_sampler::RowSummary summarise(fused_sampler::RowSummary v) { return v; }
  fused_sampler::WeightsTotal sum_weights(fused_sampler::WeightsTotal v) { return v; }
  double inclusive_scan(const double (&in)[1], double (&out)[1]) {
    out[0] = in[0];
    return in[0];
  }
  void hist_clear() { std::fill(hist.begin(), hist.end(), 0); }
  void hist_add(int bin, uint64_t w) { hist[bin] += w; }
  uint64_t hist_suffix_sums() {
    for (int d = fused_sampler::kRadixBins - 1; d >= 0; --d) hist[d] += hist[d + 1];
    return hist[0];
  }
  fused_sampler::RadixPick hist_find(uint64_t above, uint64_t target) {
    for (int d = fused_sampler::kRadixBins - 1; d >= 0; --d)
      if (bucket_holds_target(above, hist[d + 1], hist[d], target))
        return {static_cast<uint32_t>(d), above + hist[d + 1], above + hist[d]};
    fail("fused sampler: radix select found no bucket (target ", target, ")");  // unreachable
  }
  // The candidate list, as small as an emulated block's (both ways taken by the test rows).
  static constexpr int kCandidates = fused_sampler::kHostCandidateCapacity;
  std::vector<float> candidates = {};
  int32_t candidate_adds = 0;
  void candidates_clear() {
    candidates.clear();
    candidate_adds = 0;
  }
  void candidate_add(float x) {
    if (candidate_adds++ < kCandidates) candidates.push_back(x);
  }
  int32_t candidates_count() const { return candidate_adds; }
  float candidate(int32_t i) const { return candidates[static_cast<size_t>(i)]; }
};

}  // namespace

const char* row_exchange_name(RowExchange exchange) {
  switch (exchange) {
    case RowExchange::automatic:
      return "automatic";
    case RowExchange::global_memory:
      return "global_memory";
  }
  return "unknown";
}

int32_t cluster_slice_span(int32_t vocab, int32_t blocks, int32_t vec) {
  const int32_t vectors = (vocab + vec - 1) / vec;
  return (vectors + blocks - 1) / blocks * vec;
}

SamplerLaunchConfig choose_fused_sampler_config(const SamplerKernelParams& p) {
  SamplerLaunchConfig c;
  const bool vec4 = p.vocab % 4 == 0 && aligned16(p.logits) && aligned16(p.probs) && aligned16(p.logit_bias) &&
                    aligned16(p.output_counts);
  c.vec = vec4 ? 4 : 1;
  if (p.cluster_blocks > 0) {
    c.ctas = p.cluster_blocks;
  } else {
    constexpr int32_t kTokensPerBlock = 16384;
    const int32_t wanted = (p.vocab + kTokensPerBlock - 1) / kTokensPerBlock;
    c.ctas = std::min(wanted, kMaxSamplerClusterBlocks);
    if (cluster_slice_span(p.vocab, c.ctas, c.vec) > kMaxSamplerSliceTokens) c.ctas = 1;
  }
  c.block = c.ctas > 1 ? 256 : (p.vocab >= 16384 ? 512 : 256);
  return c;
}

void run_fused_sampler_host(const SamplerKernelParams& p) {
  p.check();
  HostBlock block{p.vocab};
  for (int32_t row = 0; row < p.batch; ++row) fused_sampler::sample_row(block, p, row);
}

}  // namespace specula
