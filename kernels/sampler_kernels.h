// The fused sampler kernel: logits [B, V] -> processed distribution [B, V] and one sampled token per row,
// with the semantics of the CPU SamplerPipeline (verify/sampling/sampler_pipeline.h) followed by sample_categorical
// (verify/sampling/categorical.h) for the stages it supports:
//
//   masks (allowed / banned bitmaps) -> logit bias -> repetition, frequency, presence penalties ->
//   temperature (0 = greedy) -> min_p / top_k / top_p in the row's order -> softmax -> inverse-CDF draw
//
// typical_p, tfs_z, mirostat, dynamic temperature and bad_words are not implemented on CUDA; the batch
// builder (verify/device/sampler_batch.h) refuses them by name rather than dropping them.
//
// Plain C++: no CUDA headers, so any target can include it. The kernel lives in sampler_kernels.cu; the
// same per-row algorithm also runs on the CPU (run_fused_sampler_host), which is how it is tested on
// machines without a GPU. Design and cost model: kernels/README.md.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/group_workspace.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace specula {

// Filters the kernel implements, in the row's order.
enum class KernelFilter : uint8_t { min_p = 0, top_k = 1, top_p = 2 };

// How the blocks of a row split over several (SamplerKernelParams::cluster_blocks, the verification params' too)
// exchange their partials: the reductions' values and the radix histograms.
enum class RowExchange : uint8_t {
  // A thread-block cluster's distributed shared memory on sm_90+ (cluster_block.cuh); one block per row on a GPU
  // without clusters.
  automatic = 0,
  // Global memory, on any GPU with cooperative launches (sm_80 among them): groups of blocks resident together,
  // each group taking rows in turn, its blocks meeting at a barrier in global memory (kernels/group_exchange.h).
  global_memory = 1,
};
const char* row_exchange_name(RowExchange exchange);

// What a launch ran: blocks per row and, for a split row, how they exchanged (one block per row: 1, automatic).
// A split asked for falls back to one block per row where the device cannot run it.
struct RowSplit {
  int32_t blocks = 1;
  RowExchange exchange = RowExchange::automatic;
};

// Which optional per-row arrays a row reads (a row without a flag skips the array's bytes).
enum SamplerRowFlags : uint32_t {
  kRowAllowed = 1u << 0,  // allowed_bitmap row: only set bits survive
  kRowBanned = 1u << 1,   // banned_bitmap row: set bits are removed (banned_tokens, stop tokens < min_tokens)
  kRowPrompt = 1u << 2,   // prompt_bitmap row: tokens of the prompt (repetition penalty)
  kRowCounts = 1u << 3,   // output_counts row: occurrences in the output (all penalties)
  kRowBias = 1u << 4,     // logit_bias row
};

// One row's parameters (device array [B] of these). Same meaning as SamplingParams.
struct SamplerRowParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, ties to the lowest id)
  float min_p = 0.0f;               // used when listed in `filters`
  int32_t top_k = 0;                // used when listed in `filters`
  float top_p = 1.0f;               // used when listed in `filters`
  float repetition_penalty = 1.0f;  // over prompt ∪ output
  float frequency_penalty = 0.0f;   // over output
  float presence_penalty = 0.0f;    // over output
  uint32_t flags = 0;               // SamplerRowFlags
  uint8_t filters[3] = {0, 0, 0};   // KernelFilter values of the active filters, in the order they run
  uint8_t num_filters = 0;
  uint64_t seed = 0;  // Philox key of the row's draw: philox_uniform(seed, stream, offset)
  uint64_t stream = 0;
  uint64_t offset = 0;
};

// How top-p finds its threshold. Both passes keep the same set: the float-first pass falls back to the
// exact one whenever its error bounds cannot prove the same value (kernels/README.md, "The float-first
// top-p pass"). They differ only in cost: float-first saves a float64 exp per candidate, which matters most
// where FP64 runs at 1/64 rate (sm_86, sm_89), and its rare fall-backs cost one exact pass.
enum class TopPPass : uint8_t {
  float_first = 0,  // float32 pass, the exact pass only where the guard band cannot decide
  exact = 1,        // float64 exp for every candidate (tests and benchmarks compare the two)
};

// Per-row outcome (status array [B]). A row that is not `ok` gets token -1 and NaN probabilities.
enum class SamplerRowStatus : int32_t {
  ok = 0,
  nan_logit = 1,      // a raw logit is NaN (the CPU pipeline throws)
  pos_inf_logit = 2,  // a raw logit is +inf (the CPU pipeline throws)
  all_masked = 3,     // masks leave no finite logit (the CPU pipeline throws)
  nothing_left = 4,   // penalties / temperature overflowed every remaining logit to -inf
  overflow = 5,       // a processed logit overflowed to +inf (the CPU would produce NaN probabilities)
};
const char* sampler_status_message(int32_t status);
// Throws Error naming the first failed row and its reason; `status` is a host copy of [rows].
void check_sampler_status(const int32_t* status, int32_t rows);

// The fused sampler's arguments. Pointers are device pointers for launch_fused_sampler and host pointers
// for run_fused_sampler_host. W = ceil(V / 32) words per bitmap row; bit t of word t / 32 is token t.
struct SamplerKernelParams {
  const float* logits = nullptr;             // [B, V] raw logits of the rows
  const SamplerRowParams* rows = nullptr;    // [B] per-row parameters
  const uint32_t* allowed_bitmap = nullptr;  // [B, W] allowed tokens (rows with kRowAllowed); may be null
  const uint32_t* banned_bitmap = nullptr;   // [B, W] banned tokens (rows with kRowBanned); may be null
  const uint32_t* prompt_bitmap = nullptr;   // [B, W] tokens in the prompt (rows with kRowPrompt); may be null
  const int32_t* output_counts = nullptr;    // [B, V] occurrences in the output (rows with kRowCounts); may be null
  const float* logit_bias = nullptr;         // [B, V] additive bias (rows with kRowBias); may be null
  float* probs = nullptr;                    // [B, V] out: processed distribution; also the kernel's scratch
  int32_t* tokens = nullptr;                 // [B] out: sampled token, -1 on a failed row
  int32_t* status = nullptr;                 // [B] out: SamplerRowStatus
  int32_t batch = 0;                         // B >= 1
  int32_t vocab = 0;                         // V in [1, 2^30]
  // Rows through maps ([B] each, in the pointers' memory space; rows of V elements): a draft model's tree draws every
  // child of a depth in one launch, reading a frontier row's logits and inputs once per child (each child its own key
  // in `rows`) from wherever the model wrote them, and keeping each law where verification reads it
  // (verify/device/batch_verifier.h). input_rows: the row of the bitmaps, output_counts and logit_bias row b reads
  // (null: row b, or row 0 with shared_inputs); logits_rows: its row of logits (null: its input row); probs_rows: its
  // row of probs (null: row b). The probs rows must be distinct (probs is the kernel's scratch); the caller checks the
  // maps' bounds.
  const int32_t* input_rows = nullptr;
  const int32_t* logits_rows = nullptr;
  const int32_t* probs_rows = nullptr;
  // Every row reads row 0 of logits, the bitmaps, output_counts and logit_bias (one row's inputs drawn from
  // B times, with each row's own key): the inputs are [1, V] / [1, W] and uploaded once.
  bool shared_inputs = false;
  TopPPass top_p_pass = TopPPass::float_first;
  // Blocks per row on a GPU with thread-block clusters (sm_90+): 0 = the dispatch's choice
  // (choose_fused_sampler_config), 1 = one block per row, 2 .. kMaxSamplerClusterBlocks = a cluster of that
  // many blocks, each keeping its slice of the row in shared memory. A GPU without clusters runs one block.
  int32_t cluster_blocks = 0;
  // How those blocks exchange their partials.
  RowExchange row_exchange = RowExchange::automatic;

  // Throws Error naming the first invalid field (null required pointer, bad shape).
  void check() const;
  int32_t bitmap_words() const { return (vocab + 31) / 32; }
};

// A cluster's size limit (the portable one) and the most float32 tokens one block keeps in shared memory.
constexpr int32_t kMaxSamplerClusterBlocks = 8;
constexpr int32_t kMaxSamplerSliceTokens = 40960;  // 160 KiB of an H100/H200 SM's 227 KiB
// Block b of a row split over `blocks` owns tokens [b * span, min((b + 1) * span, V)): span is a multiple of
// `vec`, so no vector straddles two slices (nor, as vec divides 32, two bitmap words).
int32_t cluster_slice_span(int32_t vocab, int32_t blocks, int32_t vec);

// Enqueues the kernel on `stream` (one CUDA block, or one thread-block cluster, per row). Validates `p`, checks the
// launch, and throws Error on failure ("fused sampler: <CUDA error>"; "no CUDA device: ..." without one). Asynchronous:
// read `status` after synchronising. Throws "no CUDA device: ..." in a build without CUDA. `workspace`: where a row
// split over blocks exchanging through global memory keeps its workspace between launches on `stream` (null: one
// allocated, zeroed and freed around this launch).
RowSplit launch_fused_sampler(const SamplerKernelParams& p, CUstream_st* stream = nullptr,
                              GroupWorkspace* workspace = nullptr);

// The kernel's per-row algorithm run sequentially on host arrays (same decisions, same Philox draws).
void run_fused_sampler_host(const SamplerKernelParams& p);

// The (blocks per row, block size, vector width) the launcher's dispatch picks on a GPU with clusters:
//   - blocks: p.cluster_blocks when set; else ceil(V / 16384) blocks up to kMaxSamplerClusterBlocks, so a
//     128K-token row is read by 8 SMs at once and each keeps 64 KiB of it; 1 when the slice would not fit;
//   - block: 256 threads per block of a cluster; one block per row: 512 for V >= 16384, else 256;
//   - vec: 4-wide vector accesses when V % 4 == 0 and every [B, V] array is 16-byte aligned, else 1.
// A GPU without clusters runs blocks = 1 whatever this says.
struct SamplerLaunchConfig {
  int ctas = 1;
  int block = 256;
  int vec = 1;
};
SamplerLaunchConfig choose_fused_sampler_config(const SamplerKernelParams& p);

}  // namespace specula
