// The CUDA kernels' row code executed on the CPU with a CUDA block's parallel decomposition: every row is
// one emulated block of `threads` simulated threads (kernels/emulated_block.h) with the device dispatch's
// vector width (4-wide when V % 4 == 0 and the arrays are 16-byte aligned); the fused sampler's row may instead
// be one emulated thread-block cluster. This is what `--device
// cuda-host` runs, so the batched GPU path — buffer layouts, batching, per-row q, row offsets, the
// collectives, barriers, histogram and tile scans — is exercised wherever the tests run, GPU or not.
// Pointers are host pointers. Plain C++.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/draft_children.h"
#include "kernels/fiber_team.h"
#include "kernels/sampler_kernels.h"
#include "kernels/verify_kernels.h"

namespace specula {

struct EmulationOptions {
  int threads = 8;  // simulated threads per block: 4, 8 or 32
  FiberSchedule schedule = FiberSchedule::forward;
  // Blocks per row: 1, or a thread-block cluster of 2 .. kMaxEmulatedClusterBlocks blocks that splits the row
  // (kernels/emulated_cluster_block.h); the fused sampler's SamplerKernelParams::cluster_blocks, when set, takes
  // precedence (and the verification params' cluster_blocks for theirs).
  int ctas = 1;
  // How the blocks of a split row exchange their partials: a cluster's shared memory (automatic), or the
  // global-memory exchange of GPUs without clusters; the params' row_exchange, when not automatic, takes precedence.
  RowExchange exchange = RowExchange::automatic;
  // Where the global-memory exchange's workspace is kept across launches (the cuda-host stream's, as the CUDA stream
  // keeps its GroupWorkspace); null: a zeroed one for each launch.
  std::vector<uint64_t>* group_workspace = nullptr;
};
constexpr int kMaxEmulatedClusterBlocks = 16;
// The groups of blocks exchanging through global memory that the emulation lays out at once, as a device that holds
// three (rows go to them in turn, each its own part of the workspace).
constexpr int32_t kEmulatedResidentGroups = 3;

// Throws Error for a thread count without an instantiation, or a cluster size out of range.
void check_emulation_options(const EmulationOptions& options);

void emulate_fused_sampler(const SamplerKernelParams& p, const EmulationOptions& options = {});
void emulate_chain_verify(const ChainVerifyParams& p, const EmulationOptions& options = {});
void emulate_block_verify(const BlockVerifyParams& p, const EmulationOptions& options = {});
void emulate_tree_verify(const TreeVerifyParams& p, const EmulationOptions& options = {});
// One block per row, whatever options.ctas says (the kernel splits no row).
void emulate_ranked_children(const RankedChildrenParams& p, const EmulationOptions& options = {});
// One block per sequence, whatever options.ctas says.
void emulate_sibling_draws(const SiblingDrawParams& p, const EmulationOptions& options = {});

}  // namespace specula
