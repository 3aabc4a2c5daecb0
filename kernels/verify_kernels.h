// Verification kernels: exact speculative verification of a batch of rows on processed target
// distributions p, with the semantics of the CPU verifiers (verify/verifiers/verification.h):
//
//   chain  token-wise rejection sampling (Leviathan et al. 2023, Alg. 1)        == specula::verify_chain
//   tree   recursive rejection sampling over a flattened tree (SpecInfer, RSD)  == specula::verify_tree
//   block  block verification (Sun et al., ICLR 2025, Alg. 2)                   == specula::verify_block
//
// One CUDA block per batch row. Every draw uses the CPU verifiers' Philox keys (StepRandom::key): the
// uniform of role R and slot s is philox_uniform(seed, philox_stream(sequence, R), (step << 16) | s), so the
// same (seed, sequence, step) gives the same accept decisions and tokens on both backends. The per-row
// algorithms are written once (kernels/verify_row.h); run_*_verify_host runs them on the CPU, which is how
// they are tested against the reference verifiers without a GPU. Design and cost model: kernels/README.md.
//
// Plain C++: no CUDA headers, so any target can include it. p is the target, q is the draft.
#pragma once

#include <cstdint>

#include "kernels/sampler_kernels.h"  // RowExchange

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace specula {

constexpr int32_t kMaxVerifyDraft = 64;       // chain and block drafts per row
constexpr int32_t kMaxVerifyTreeNodes = 256;  // tree nodes per row (the kernel keeps per-node state in shared memory)

// Per-row flags.
enum VerifyRowFlags : uint32_t {
  kVerifyRowHasQ = 1u << 0,  // the drafter recorded q for this row; otherwise drafts are point masses
  // Tree, siblings without replacement only: a tree drawn at a full shape whose nodes never drawn are holes (token -1;
  // a row's law ran out of mass before its siblings' count). Verified as the tree of its drawn nodes (holes left out,
  // the others in order), keyed as that tree's nodes: the CPU verifier's draws on it (verify/ALGORITHMS.md, "Trees
  // with holes"). A hole is a last sibling (no drawn node after it under its parent) and has holes only under it.
  kVerifyRowHoles = 1u << 1,
};

// How the siblings under one tree node were drawn (the values of specula::SiblingScheme).
enum class TreeSiblingScheme : int32_t {
  iid = 0,                  // i.i.d. from q: every draw, duplicates included, updates the residual
  without_replacement = 1,  // q with earlier siblings removed and renormalised (RSD, Sequoia)
  deterministic = 2,        // chosen by value (top-k, EAGLE-2): verified as point masses
};

// One row's parameters (device array [B] of these).
struct VerifyRowParams {
  uint64_t seed = 0;      // StepRandom of this row's step: every draw is keyed by (seed, sequence, step)
  uint64_t sequence = 0;  //   and its role and slot, exactly as the CPU verifiers
  uint64_t step = 0;      //   (step << 16 must fit in 64 bits)
  int32_t num_draft = 0;  // chain, block: drafts of this row, in [0, K]; tree: nodes of this row, in [0, N]
  uint32_t flags = 0;     // VerifyRowFlags
  int32_t scheme = 0;     // tree only: TreeSiblingScheme of every node of this row
  int32_t reserved = 0;
};

// Per-row outcome (status array [B]). A row that is not `ok` emits nothing (counts 0, emitted all -1).
enum class VerifyRowStatus : int32_t {
  ok = 0,
  bad_draft_token = 1,     // a draft (node) token is outside [0, V) (with kVerifyRowHoles: a hole out of place)
  bad_tree = 2,            // a parent index is not in [-1, node) (the tree is not topologically ordered)
  empty_distribution = 3,  // the row to sample from has no mass (the CPU verifier throws)
  bad_row_params = 4,      // num_draft outside [0, K] (or [0, N]), an unknown sibling scheme, or rows outside
                           // [0, R) (VerifyRowLayout)
};
const char* verify_status_message(int32_t status);
// Throws Error naming the first failed row and its reason; `status` is a host copy of [rows].
void check_verify_status(const int32_t* status, int32_t rows);

// Outputs shared by every verification kernel. E = K + 1 (chain, block) or N + 1 (tree). Every element
// is written, so the outputs need no initialisation.
struct VerifyOutputs {
  int32_t* emitted = nullptr;        // [B, E] out: accepted drafts, then the correction or bonus token; -1 after
  int32_t* num_emitted = nullptr;    // [B] out: num_accepted + 1 (0 on a failed row)
  int32_t* num_accepted = nullptr;   // [B] out: accepted draft tokens
  int32_t* bonus = nullptr;          // [B] out: 1 when the last emitted token is a bonus token (all_accepted)
  int32_t* q_zero_errors = nullptr;  // [B] out: tested drafts whose recorded q was 0 (a bug upstream)
  int32_t* status = nullptr;         // [B] out: VerifyRowStatus
  // Optional (both null or both set): the drafter's expected acceptance along the verified path, the
  // quantity GenerationMetrics::expected_acceptance_sum / _count accumulate on the CPU. For each position i
  // the verifier reached (i < min(depth, accepted + 1 unless every draft was accepted)) whose row has
  // children: sum_x min(p(x), q(x)) over that row (p of its first child's token where the row has no q).
  double* overlap_sum = nullptr;     // [B] out: sum over those positions (0 on a failed row)
  int32_t* overlap_count = nullptr;  // [B] out: how many positions were summed
};

// Where each batch row's rows live (optional, for batches of sequences with different draft sizes): with
// first_row set, p, q and q_present are dense [R, V] / [R] arrays and batch row b's rows are
// first_row[b] .. first_row[b] + num_draft (chain, block: rows 0..k of p, 0..k-1 of q; tree: 0..n of both, a q row
// read only where q_present marks it).
// A batch row whose rows would leave [0, R) gets bad_row_params. Without it, the padded layouts below.
struct VerifyRowLayout {
  const int64_t* first_row = nullptr;  // [B] first row of each batch row, or null
  int64_t total_rows = 0;              // R, with first_row
  // [same rows as q] optional: 0 where the drafter recorded no q for that row (its children are point
  // masses, TokenTree::q_at_row empty), 1 where q holds the row's draft law. Null: every row of a batch row
  // with kVerifyRowHasQ has q. Chain and tree verify per row; block verification needs q on every row and
  // verifies token-wise otherwise (specula::verify_block).
  const uint8_t* q_present = nullptr;
  // [B] optional: the first q row of each batch row, when q's rows lie apart from p's (a draft model's laws read where
  // it drew them: BatchVerifier::draft_laws, trees of different sizes); q then has q_total_rows rows, and q_present
  // (when set) indexes them. Null: a row's q rows start where its p rows do.
  const int64_t* q_first_row = nullptr;
  int64_t q_total_rows = 0;  // with q_first_row
};

// Token-wise rejection sampling of a batch of chains (verify/ALGORITHMS.md §1).
struct ChainVerifyParams {
  const float* p = nullptr;               // [B, K + 1, V] processed target probabilities, row i after i drafts
  const float* q = nullptr;               // [B, K, V] draft law of draft i; may be null: all point masses
  const int32_t* draft = nullptr;         // [B, K] draft tokens (the first rows[b].num_draft are used)
  const VerifyRowParams* rows = nullptr;  // [B] per-row keys, draft counts, flags
  VerifyOutputs out;                      // E = K + 1
  VerifyRowLayout layout;                 // optional dense layout and per-row q presence
  int32_t batch = 0;                      // B >= 1
  int32_t max_draft = 0;                  // K in [0, kMaxVerifyDraft]
  int32_t vocab = 0;                      // V in [1, 2^30]
  // Blocks per row on a GPU with thread-block clusters (sm_90+): 0 = the dispatch's choice (choose_verify_config),
  // 1 = one block per row, 2 .. kMaxVerifyClusterBlocks = a cluster of that many, each reading its slice of V.
  int32_t cluster_blocks = 0;
  // How those blocks exchange their partials (as SamplerKernelParams::row_exchange).
  RowExchange row_exchange = RowExchange::automatic;
  // In a cluster, whether each block copies its slice of the p and q rows a draw reads into shared memory first,
  // so every later pass over them (totals, the draw, the overlap) reads shared memory: 1 (the default) where the
  // two slices fit (verify_staged_floats), 0 = every pass reads global memory (the benchmark times both).
  int32_t stage_rows = 1;

  // Throws Error naming the first invalid field (null required pointer, bad shape, aliased outputs).
  void check() const;
};

// Block verification of a batch of chains (verify/ALGORITHMS.md §4). Same arrays as chain verification; a row
// without kVerifyRowHasQ (or a null q) is verified token-wise, as specula::verify_block does.
struct BlockVerifyParams : ChainVerifyParams {
  void check() const;
};

// Recursive rejection sampling over a batch of flattened token trees (verify/ALGORITHMS.md §3). Row 0 of a tree
// is the position after the committed context; row n + 1 is the position after node n. Nodes are in
// topological order (parents[n] < n) and siblings in generation order, the order they are verified in.
struct TreeVerifyParams {
  const float* p = nullptr;               // [B, N + 1, V] processed target probabilities of each tree row
  const float* q = nullptr;               // [B, N + 1, V] law each row's children were drawn from; may be null
  const int32_t* tokens = nullptr;        // [B, N] node tokens
  const int32_t* parents = nullptr;       // [B, N] parent node, -1 for children of the root; parents[n] < n
  const VerifyRowParams* rows = nullptr;  // [B] per-row keys, node counts, flags, sibling scheme
  VerifyOutputs out;                      // E = N + 1
  VerifyRowLayout layout;                 // optional dense layout and per-row q presence
  int32_t* path = nullptr;                // [B, N] out: accepted nodes, root's child first; -1 after
  int32_t batch = 0;                      // B >= 1
  int32_t max_nodes = 0;                  // N in [0, kMaxVerifyTreeNodes]
  int32_t vocab = 0;                      // V in [1, 2^30]
  int32_t cluster_blocks = 0;             // as ChainVerifyParams::cluster_blocks
  RowExchange row_exchange = RowExchange::automatic;  // as ChainVerifyParams::row_exchange
  int32_t stage_rows = 1;                             // as ChainVerifyParams::stage_rows

  void check() const;
};

// Enqueue the kernels on `stream` (one CUDA block per row, or a row split over several). Each validates its params,
// checks the launch and throws Error on failure ("<kernel> launch: <CUDA error>"; "no CUDA device: ..." without one,
// and in a build without CUDA), and returns what it ran. Asynchronous: read `out.status` after synchronising.
// `workspace`: as launch_fused_sampler's.
RowSplit launch_chain_verify(const ChainVerifyParams& p, CUstream_st* stream = nullptr,
                             GroupWorkspace* workspace = nullptr);
RowSplit launch_tree_verify(const TreeVerifyParams& p, CUstream_st* stream = nullptr,
                            GroupWorkspace* workspace = nullptr);
RowSplit launch_block_verify(const BlockVerifyParams& p, CUstream_st* stream = nullptr,
                             GroupWorkspace* workspace = nullptr);

// The per-row algorithms run sequentially on host arrays: the same decisions and Philox draws as the
// kernels, with float64 sums in index order (exactly the CPU verifiers' order). `rules` other than exact
// are deliberately broken variants that the host tests use to show the parity check can fail.
enum class VerifyRules {
  exact,
  residual_not_subtracted,  // after a rejection, resample from p (chain, tree) or w * p (block) instead of the residual
};
void run_chain_verify_host(const ChainVerifyParams& p, VerifyRules rules = VerifyRules::exact);
void run_tree_verify_host(const TreeVerifyParams& p, VerifyRules rules = VerifyRules::exact);
void run_block_verify_host(const BlockVerifyParams& p, VerifyRules rules = VerifyRules::exact);

// The (blocks per row, block size, vector width) the launchers' dispatch picks on a GPU with clusters:
//   - blocks: cluster_blocks when set; else ceil(V / 16384) up to kMaxVerifyClusterBlocks (8 at V = 128256);
//   - block: 256 threads per block of a cluster; one block per row: 512 for V >= 16384, else 256;
//   - vec: 4-wide loads when V % 4 == 0 and p and q are 16-byte aligned, else 1.
// A GPU without clusters runs blocks = 1 whatever this says.
constexpr int32_t kMaxVerifyClusterBlocks = 8;
struct VerifyLaunchConfig {
  int ctas = 1;
  int block = 256;
  int vec = 1;
};
VerifyLaunchConfig choose_verify_config(const float* p, const float* q, int32_t vocab, int32_t cluster_blocks = 0);

// The floats of shared memory each block of a cluster of `ctas` blocks keeps for its staged rows (a slice of p,
// then a slice of q): 2 * cluster_slice_span, or 0 where staging is off, for one block per row, and where the two
// slices would exceed kMaxVerifyStagedFloats (V > 163840 over 8 blocks: those passes read global memory).
constexpr int32_t kMaxVerifyStagedFloats = 40960;  // 160 KiB of an H100/H200 SM's 227 KiB, as the sampler's slice
int32_t verify_staged_floats(int32_t vocab, int ctas, int vec, int32_t stage_rows);

}  // namespace specula
