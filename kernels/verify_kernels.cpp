// Host side of the verification kernels: parameter checks, status messages, the launch configuration, and
// the CPU backend of the per-row algorithms (one "thread" per row, float64 sums in index order: the
// reference verifiers' own order, so the CPU backend reproduces them exactly).
#include "kernels/verify_kernels.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/shared/error.h"
#include "kernels/verify_row.h"

namespace specula {

const char* verify_status_message(int32_t status) {
  switch (static_cast<VerifyRowStatus>(status)) {
    case VerifyRowStatus::ok:
      return "ok";
    case VerifyRowStatus::bad_draft_token:
      return "a draft token is outside [0, V), or a hole (-1) of a tree with holes is not a last sibling or has a "
             "drawn "
             "node under it";
    case VerifyRowStatus::bad_tree:
      return "a parent index is not in [-1, node): the tree is not in topological order";
    case VerifyRowStatus::empty_distribution:
      return "the distribution to sample from has no mass";
    case VerifyRowStatus::bad_row_params:
      return "num_draft outside [0, K] (or [0, N]), an unknown sibling scheme, or holes flagged on a tree whose "
             "siblings "
             "are not drawn without replacement";
  }
  return "unknown status";
}

void check_verify_status(const int32_t* status, int32_t rows) {
  for (int32_t r = 0; r < rows; ++r)
    if (status[r] != static_cast<int32_t>(VerifyRowStatus::ok))
      fail("verification: row ", r, ": ", verify_status_message(status[r]), " (status ", status[r], ")");
}

namespace {

void check_outputs(const char* what, const VerifyOutputs& out) {
  if (!out.emitted) fail(what, ": out.emitted [B, E] is null");
  if (!out.num_emitted) fail(what, ": out.num_emitted [B] is null");
  if (!out.num_accepted) fail(what, ": out.num_accepted [B] is null");
  if (!out.bonus) fail(what, ": out.bonus [B] is null");
  if (!out.q_zero_errors) fail(what, ": out.q_zero_errors [B] is null");
  if (!out.status) fail(what, ": out.status [B] is null");
  const void* arrays[] = {out.emitted, out.num_emitted, out.num_accepted, out.bonus, out.q_zero_errors, out.status};
  for (int i = 0; i < 6; ++i)
    for (int j = i + 1; j < 6; ++j)
      if (arrays[i] == arrays[j]) fail(what, ": two outputs share one array");
  if (!out.overlap_sum != !out.overlap_count) fail(what, ": out.overlap_sum and out.overlap_count go together");
}

void check_layout(const char* what, const VerifyRowLayout& layout) {
  if (layout.first_row && layout.total_rows < 1)
    fail(what, ": layout.total_rows (R) must be >= 1 with layout.first_row, got ", layout.total_rows);
  if (!layout.first_row && layout.total_rows != 0)
    fail(what, ": layout.total_rows is set but layout.first_row is null");
  if (layout.q_first_row && layout.q_total_rows < 1)
    fail(what, ": layout.q_total_rows must be >= 1 with layout.q_first_row, got ", layout.q_total_rows);
  if (!layout.q_first_row && layout.q_total_rows != 0)
    fail(what, ": layout.q_total_rows is set but layout.q_first_row is null");
}

void check_shape(const char* what, int32_t batch, int32_t vocab, int32_t cluster_blocks, RowExchange row_exchange,
                 int32_t stage_rows) {
  if (batch < 1) fail(what, ": batch must be >= 1, got ", batch);
  if (vocab < 1 || vocab > (1 << 30)) fail(what, ": vocab must be in [1, 2^30], got ", vocab);
  if (cluster_blocks < 0 || cluster_blocks > kMaxVerifyClusterBlocks)
    fail(what, ": cluster_blocks must be in [0, ", kMaxVerifyClusterBlocks, "], got ", cluster_blocks);
  if (row_exchange != RowExchange::automatic && row_exchange != RowExchange::global_memory)
    fail(what, ": row_exchange must be automatic (0) or global_memory (1), got ", static_cast<int>(row_exchange));
  if (stage_rows != 0 && stage_rows != 1) fail(what, ": stage_rows must be 0 or 1, got ", stage_rows);
}

void check_chain(const char* what, const ChainVerifyParams& p) {
  check_shape(what, p.batch, p.vocab, p.cluster_blocks, p.row_exchange, p.stage_rows);
  if (p.max_draft < 0 || p.max_draft > kMaxVerifyDraft)
    fail(what, ": max_draft (K) must be in [0, ", kMaxVerifyDraft, "], got ", p.max_draft);
  if (!p.p) fail(what, ": p [B, K + 1, V] is null");
  if (!p.draft && p.max_draft > 0) fail(what, ": draft [B, K] is null");
  if (!p.rows) fail(what, ": rows [B] is null");
  check_outputs(what, p.out);
  check_layout(what, p.layout);
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// One CPU "thread" that owns the whole row: collectives are identities, the scratch is a vector.
struct VerifyHostBlock {
  static constexpr int kThreads = 1;
  static constexpr int kVec = 1;
  int32_t vocab;
  std::vector<double> f64_scratch = std::vector<double>(verify_row::kTreeF64Scratch, 0.0);
  std::vector<int32_t> i32_scratch = std::vector<int32_t>(verify_row::kTreeI32Scratch, 0);

  int rank() const { return 0; }
  bool leader() const { return true; }
  bool block_leader() const { return true; }
  template <class F>
  void for_each_vec(F&& f) {
    for (int32_t base = 0; base < vocab; ++base) f(base);
  }
  template <class F>
  void for_each_index(int32_t n, F&& f) {
    for (int32_t i = 0; i < n; ++i) f(i);
  }
  double sum_f64(double v) { return v; }
  int32_t min_i32(int32_t v) { return v; }
  int32_t max_i32(int32_t v) { return v; }
  fused_sampler::WeightsTotal sum_weights(fused_sampler::WeightsTotal v) { return v; }
  double inclusive_scan(const double (&in)[1], double (&out)[1]) {
    out[0] = in[0];
    return in[0];
  }
  void sync() {}
  double* f64() { return f64_scratch.data(); }
  int32_t* i32() { return i32_scratch.data(); }
};

template <class Rules>
void chain_host(const ChainVerifyParams& p) {
  VerifyHostBlock block{p.vocab};
  for (int32_t row = 0; row < p.batch; ++row) verify_row::chain_row<Rules>(block, p, row);
}
template <class Rules>
void block_host(const BlockVerifyParams& p) {
  VerifyHostBlock block{p.vocab};
  for (int32_t row = 0; row < p.batch; ++row) verify_row::block_row<Rules>(block, p, row);
}
template <class Rules>
void tree_host(const TreeVerifyParams& p) {
  VerifyHostBlock block{p.vocab};
  for (int32_t row = 0; row < p.batch; ++row) verify_row::tree_row<Rules>(block, p, row);
}

}  // namespace

void ChainVerifyParams::check() const { check_chain("chain verify", *this); }

void BlockVerifyParams::check() const { check_chain("block verify", *this); }

void TreeVerifyParams::check() const {
  const char* what = "tree verify";
  check_shape(what, batch, vocab, cluster_blocks, row_exchange, stage_rows);
  if (max_nodes < 0 || max_nodes > kMaxVerifyTreeNodes)
    fail(what, ": max_nodes (N) must be in [0, ", kMaxVerifyTreeNodes, "], got ", max_nodes);
  if (!p) fail(what, ": p [B, N + 1, V] is null");
  if (max_nodes > 0 && !tokens) fail(what, ": tokens [B, N] is null");
  if (max_nodes > 0 && !parents) fail(what, ": parents [B, N] is null");
  if (!rows) fail(what, ": rows [B] is null");
  if (max_nodes > 0 && !path) fail(what, ": path [B, N] is null");
  check_outputs(what, out);
  check_layout(what, layout);
}

VerifyLaunchConfig choose_verify_config(const float* p, const float* q, int32_t vocab, int32_t cluster_blocks) {
  VerifyLaunchConfig c;
  c.vec = vocab % 4 == 0 && aligned16(p) && aligned16(q) ? 4 : 1;
  constexpr int32_t kTokensPerBlock = 16384;
  c.ctas = cluster_blocks > 0 ? cluster_blocks
                              : std::min((vocab + kTokensPerBlock - 1) / kTokensPerBlock, kMaxVerifyClusterBlocks);
  c.block = c.ctas > 1 ? 256 : (vocab >= 16384 ? 512 : 256);
  return c;
}

int32_t verify_staged_floats(int32_t vocab, int ctas, int vec, int32_t stage_rows) {
  if (!stage_rows || ctas <= 1) return 0;
  const int64_t floats = 2 * static_cast<int64_t>(cluster_slice_span(vocab, ctas, vec));
  return floats <= kMaxVerifyStagedFloats ? static_cast<int32_t>(floats) : 0;
}

void run_chain_verify_host(const ChainVerifyParams& p, VerifyRules rules) {
  p.check();
  if (rules == VerifyRules::exact)
    chain_host<verify_row::ExactRules>(p);
  else
    chain_host<verify_row::ResidualNotSubtractedRules>(p);
}

void run_block_verify_host(const BlockVerifyParams& p, VerifyRules rules) {
  p.check();
  if (rules == VerifyRules::exact)
    block_host<verify_row::ExactRules>(p);
  else
    block_host<verify_row::ResidualNotSubtractedRules>(p);
}

void run_tree_verify_host(const TreeVerifyParams& p, VerifyRules rules) {
  p.check();
  if (rules == VerifyRules::exact)
    tree_host<verify_row::ExactRules>(p);
  else
    tree_host<verify_row::ResidualNotSubtractedRules>(p);
}

}  // namespace specula
