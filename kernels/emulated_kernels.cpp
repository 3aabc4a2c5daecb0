#include "kernels/emulated_kernels.h"

#include <map>
#include <memory>
#include <utility>

#include "kernels/emulated_block.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

// One team per (threads, schedule) and OS thread: the stacks are mapped once, not per launch.
FiberTeam& team_for(const EmulationOptions& o) {
  thread_local std::map<std::pair<int, int>, std::unique_ptr<FiberTeam>> teams;
  auto& team = teams[{o.threads, static_cast<int>(o.schedule)}];
  if (!team) team = std::make_unique<FiberTeam>(o.threads, o.schedule);
  return *team;
}

// Runs row_fn(block, row) for every row of a batch: one emulated block after the other (blocks share no
// memory, so their order is immaterial), the team's threads together within each.
template <int T, int VEC, class RowFn>
void run_rows(const EmulationOptions& o, int32_t batch, int32_t vocab, RowFn&& row_fn) {
  FiberTeam& team = team_for(o);
  auto shared = std::make_unique<EmulatedShared<T>>();
  team.run([&](int rank) {
    EmulatedBlock<T, VEC> block{*shared, team, rank, vocab};
    for (int32_t row = 0; row < batch; ++row) {
      row_fn(block, row);
      block.sync();  // the next row reuses the shared memory
    }
  });
}

template <int T, class RowFn>
void dispatch_vec(const EmulationOptions& o, int vec, int32_t batch, int32_t vocab, RowFn&& row_fn) {
  if (vec == 4)
    run_rows<T, 4>(o, batch, vocab, row_fn);
  else
    run_rows<T, 1>(o, batch, vocab, row_fn);
}

template <class RowFn>
void dispatch(const EmulationOptions& o, int vec, int32_t batch, int32_t vocab, RowFn&& row_fn) {
  check_emulation_options(o);
  if (o.threads == 4)
    dispatch_vec<4>(o, vec, batch, vocab, row_fn);
  else if (o.threads == 8)
    dispatch_vec<8>(o, vec, batch, vocab, row_fn);
  else
    dispatch_vec<32>(o, vec, batch, vocab, row_fn);
}

}  // namespace

void check_emulation_options(const EmulationOptions& o) {
  if (o.threads != 4 && o.threads != 8 && o.threads != 32)
    fail("emulated kernels: threads per block must be 4, 8 or 32, got ", o.threads);
}

void emulate_fused_sampler(const SamplerKernelParams& p, const EmulationOptions& o) {
  p.check();
  dispatch(o, choose_fused_sampler_config(p).vec, p.batch, p.vocab,
           [&](auto& block, int32_t row) { fused_sampler::sample_row(block, p, row); });
}

void emulate_chain_verify(const ChainVerifyParams& p, const EmulationOptions& o) {
  p.check();
  dispatch(o, choose_verify_config(p.p, p.q, p.vocab).vec, p.batch, p.vocab,
           [&](auto& block, int32_t row) { verify_row::chain_row<verify_row::ExactRules>(block, p, row); });
}

void emulate_block_verify(const BlockVerifyParams& p, const EmulationOptions& o) {
  p.check();
  dispatch(o, choose_verify_config(p.p, p.q, p.vocab).vec, p.batch, p.vocab,
           [&](auto& block, int32_t row) { verify_row::block_row<verify_row::ExactRules>(block, p, row); });
}

void emulate_tree_verify(const TreeVerifyParams& p, const EmulationOptions& o) {
  p.check();
  dispatch(o, choose_verify_config(p.p, p.q, p.vocab).vec, p.batch, p.vocab,
           [&](auto& block, int32_t row) { verify_row::tree_row<verify_row::ExactRules>(block, p, row); });
}

}  // namespace specula
