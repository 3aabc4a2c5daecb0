#include "kernels/emulated_kernels.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/draft_children_row.h"
#include "kernels/emulated_block.h"
#include "kernels/emulated_cluster_block.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

// One team per (threads, schedule, blocks) and OS thread: the stacks are mapped once, not per launch.
FiberTeam& team_for(const EmulationOptions& o, int ctas) {
  thread_local std::map<std::tuple<int, int, int>, std::unique_ptr<FiberTeam>> teams;
  auto& team = teams[{o.threads, static_cast<int>(o.schedule), ctas}];
  if (!team) team = std::make_unique<FiberTeam>(o.threads * ctas, o.schedule, 256 * 1024, ctas);
  return *team;
}

// Runs row_fn(block, row) for every row of a batch: one emulated block after the other (blocks share no
// memory, so their order is immaterial), the team's threads together within each.
template <int T, int VEC, class RowFn>
void run_rows(const EmulationOptions& o, int32_t batch, int32_t vocab, RowFn&& row_fn) {
  FiberTeam& team = team_for(o, 1);
  auto shared = std::make_unique<EmulatedShared<T>>();
  team.run([&](int rank) {
    EmulatedBlock<T, VEC> block{*shared, team, rank, vocab};
    for (int32_t row = 0; row < batch; ++row) {
      row_fn(block, row);
      block.sync();  // the next row reuses the shared memory
    }
  });
}

// The same with each row split over a cluster of o.ctas emulated blocks (EmulatedClusterBlock); `stage_rows`: a
// verification kernel's ChainVerifyParams::stage_rows (0 for the sampler), which gives each block the shared memory
// of its staged rows as the CUDA launch does (verify_staged_floats).
template <int T, int VEC, class RowFn>
void run_cluster_rows(const EmulationOptions& o, int32_t batch, int32_t vocab, int32_t stage_rows, RowFn&& row_fn) {
  const int ctas = o.ctas;
  FiberTeam& team = team_for(o, ctas);
  const int32_t span = cluster_slice_span(vocab, ctas, VEC);
  const int32_t staged = verify_staged_floats(vocab, ctas, VEC, stage_rows);
  const float kPoison = std::numeric_limits<float>::quiet_NaN();
  const uint64_t kMergedPoison = 0x5eed5eed5eed5eedull;
  const bool global = o.exchange == RowExchange::global_memory;
  // The global-memory exchange's groups, as a cooperative launch lays them out: row r goes to group r % groups, whose
  // workspace is group_words(ctas) words from g * group_words(ctas), and each group takes its rows in turn (here one
  // after the other, every group's exchange keeping its own counters). Kept across launches where the options say
  // where (the cuda-host stream keeps one, as the CUDA stream does), zeroed only when it grows: every launch leaves
  // it as it found it (group_exchange.h, finish), and one that did not would fail a later one's barrier counts,
  // whose groups may lie elsewhere (another number of blocks a row).
  const int32_t groups = global ? std::max<int32_t>(1, std::min(batch, kEmulatedResidentGroups)) : 0;
  const size_t group_words = static_cast<size_t>(group_exchange::group_words(ctas));
  std::vector<uint64_t> own_workspace;
  std::vector<uint64_t>& workspace = o.group_workspace ? *o.group_workspace : own_workspace;
  if (workspace.size() < static_cast<size_t>(groups) * group_words)
    workspace.assign(static_cast<size_t>(groups) * group_words, 0);
  std::vector<std::unique_ptr<EmulatedClusterShared<T>>> owned;
  std::vector<EmulatedClusterShared<T>*> blocks;
  for (int c = 0; c < ctas; ++c) {
    owned.push_back(std::make_unique<EmulatedClusterShared<T>>());
    owned.back()->slice.assign(static_cast<size_t>(span), 0.0f);
    // Poisoned, as a GPU's uninitialised shared memory: a merge that left a bin of `merged` unwritten would show.
    std::fill(std::begin(owned.back()->merged), std::end(owned.back()->merged), kMergedPoison);
    // Poisoned: a pass that read a staged slice before its copy would see NaN.
    owned.back()->staged.assign(static_cast<size_t>(staged), kPoison);
    blocks.push_back(owned.back().get());
  }
  // A launch that throws (a row refused mid-kernel, a barrier that miscounts) stops where it is and leaves the
  // workspace set: cleared (below), so that the stream's next launch starts from zero.
  try {
    team.run([&](int fiber) {
      const int cta = fiber / T, thread = fiber % T;
      const fused_sampler::SliceBounds s = fused_sampler::slice_bounds(cta, span, vocab);
      EmulatedClusterBlock<T, VEC> block{
          blocks.data(), ctas, cta, EmulatedBlock<T, VEC>{blocks[cta]->block, team, thread, vocab}, s.begin, s.end};
      std::vector<group_exchange::Exchange<EmulatedGroupOps<T>>> exchanges;  // this thread's side of each group's
      for (int32_t g = 0; g < groups; ++g)
        exchanges.push_back({EmulatedGroupOps<T>{&team, thread, ctas, &blocks[cta]->last_out},
                             workspace.data() + static_cast<size_t>(g) * group_words, cta, ctas});
      // Before a block rewrites its shared memory: a cluster's blocks read each other's, so they wait for the whole
      // cluster; a global-memory exchange's blocks share none, and each goes on as the CUDA kernel's do, after its own
      // block's barrier.
      const auto shared_memory_free = [&] {
        if (global)
          block.sync();
        else
          block.cluster_sync();
      };
      for (int32_t row = 0; row < batch; ++row) {
        if (global) block.exchange = exchanges[static_cast<size_t>(row % groups)];
        row_fn(block, row);
        if (global) exchanges[static_cast<size_t>(row % groups)] = block.exchange;
        shared_memory_free();  // the next row reuses it
        if (staged > 0) {      // poisoned again: a row that read its staged slices before copying them would see NaN
          if (thread == 0) std::fill(blocks[cta]->staged.begin(), blocks[cta]->staged.end(), kPoison);
          shared_memory_free();
        }
      }
      for (auto& exchange : exchanges) exchange.finish();
    });
  } catch (...) {
    if (global) std::fill(workspace.begin(), workspace.end(), 0);
    throw;
  }
}

// kSplitRows: the row function takes a cluster's Block too (the fused sampler), so o.ctas > 1 splits each row.
template <bool kSplitRows, int T, class RowFn>
void dispatch_vec(const EmulationOptions& o, int vec, int32_t batch, int32_t vocab, int32_t stage_rows,
                  RowFn&& row_fn) {
  if constexpr (kSplitRows) {
    if (o.ctas > 1) {
      if (vec == 4)
        run_cluster_rows<T, 4>(o, batch, vocab, stage_rows, row_fn);
      else
        run_cluster_rows<T, 1>(o, batch, vocab, stage_rows, row_fn);
      return;
    }
  }
  if (vec == 4)
    run_rows<T, 4>(o, batch, vocab, row_fn);
  else
    run_rows<T, 1>(o, batch, vocab, row_fn);
}

template <bool kSplitRows = false, class RowFn>
void dispatch(const EmulationOptions& o, int vec, int32_t batch, int32_t vocab, int32_t stage_rows, RowFn&& row_fn) {
  check_emulation_options(o);
  if (o.threads == 4)
    dispatch_vec<kSplitRows, 4>(o, vec, batch, vocab, stage_rows, row_fn);
  else if (o.threads == 8)
    dispatch_vec<kSplitRows, 8>(o, vec, batch, vocab, stage_rows, row_fn);
  else
    dispatch_vec<kSplitRows, 32>(o, vec, batch, vocab, stage_rows, row_fn);
}

// The kernel's own cluster size (its params' cluster_blocks), when set, over the emulation's.
EmulationOptions cluster_options(const EmulationOptions& o, int32_t cluster_blocks, RowExchange row_exchange) {
  EmulationOptions c = o;
  if (cluster_blocks > 0) c.ctas = cluster_blocks;
  if (row_exchange != RowExchange::automatic) c.exchange = row_exchange;
  return c;
}

}  // namespace

void check_emulation_options(const EmulationOptions& o) {
  if (o.threads != 4 && o.threads != 8 && o.threads != 32)
    fail("emulated kernels: threads per block must be 4, 8 or 32, got ", o.threads);
  if (o.ctas < 1 || o.ctas > kMaxEmulatedClusterBlocks)
    fail("emulated kernels: blocks per cluster must be in [1, ", kMaxEmulatedClusterBlocks, "], got ", o.ctas);
}

void emulate_fused_sampler(const SamplerKernelParams& p, const EmulationOptions& o) {
  p.check();
  dispatch<true>(cluster_options(o, p.cluster_blocks, p.row_exchange), choose_fused_sampler_config(p).vec, p.batch,
                 p.vocab, 0, [&](auto& block, int32_t row) { fused_sampler::sample_row(block, p, row); });
}

void emulate_chain_verify(const ChainVerifyParams& p, const EmulationOptions& o) {
  p.check();
  dispatch<true>(cluster_options(o, p.cluster_blocks, p.row_exchange), choose_verify_config(p.p, p.q, p.vocab).vec,
                 p.batch, p.vocab, p.stage_rows,
                 [&](auto& block, int32_t row) { verify_row::chain_row<verify_row::ExactRules>(block, p, row); });
}

void emulate_block_verify(const BlockVerifyParams& p, const EmulationOptions& o) {
  p.check();
  dispatch<true>(cluster_options(o, p.cluster_blocks, p.row_exchange), choose_verify_config(p.p, p.q, p.vocab).vec,
                 p.batch, p.vocab, p.stage_rows,
                 [&](auto& block, int32_t row) { verify_row::block_row<verify_row::ExactRules>(block, p, row); });
}

void emulate_tree_verify(const TreeVerifyParams& p, const EmulationOptions& o) {
  p.check();
  dispatch<true>(cluster_options(o, p.cluster_blocks, p.row_exchange), choose_verify_config(p.p, p.q, p.vocab).vec,
                 p.batch, p.vocab, p.stage_rows,
                 [&](auto& block, int32_t row) { verify_row::tree_row<verify_row::ExactRules>(block, p, row); });
}

void emulate_ranked_children(const RankedChildrenParams& p, const EmulationOptions& o) {
  p.check();
  dispatch(o, ranked_children_vec(p), p.batch, p.vocab, 0,
           [&](auto& block, int32_t row) { ranked_children::rank_row(block, p, row); });
}

void emulate_sibling_draws(const SiblingDrawParams& p, const EmulationOptions& o) {
  p.check();
  // Two launches, as on a GPU: every row's draws counted, then every row drawn.
  dispatch(o, sibling_draw_vec(p), p.rows_total, p.vocab, 0,
           [&](auto& block, int32_t row) { sibling_draws::count_draws(block, p, row); });
  dispatch(o, sibling_draw_vec(p), p.rows_total, p.vocab, 0,
           [&](auto& block, int32_t row) { sibling_draws::draw_row(block, p, row); });
}

}  // namespace specula
