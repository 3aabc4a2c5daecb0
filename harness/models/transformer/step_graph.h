// One forward shape of a transformer session made replayable: the static-shape step
// (TransformerImpl::static_hidden_states, then the LM head) for `rows` rows attending over the first `columns` slots
// of a session's KV cache, captured as a CUDA graph (LibTorch's at::cuda::CUDAGraph) on its second run (a shape used
// once, such as a prompt's, is never captured) and replayed on every later one, with the new token ids, positions,
// cache slots and mask written by the host into one buffer and uploaded into the same device tensors first. A small
// model's step on a GPU is bound by launching its ~15 kernels a layer one by one from the host; a replay launches them
// all at once. `columns` is a bucket of the cache's length (step_columns), so a step reads the keys and values it needs
// and not the whole capacity.
//
// Where nothing can be captured (a LibTorch without CUDA, a model on the CPU: the `libtorch` path the tests run),
// every run executes the same static-shape step eagerly, so CI checks what a replay computes.
// Includes LibTorch: only for torch translation units.
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/models/transformer/kv_cache.h"
#include "harness/models/transformer/transformer_model.h"

namespace specula {

// A step's outputs: the final hidden states [rows, d] and the logits [rows, V], float32, where the model computes
// (a step over a cache of batch B: rows = B * rows a sequence, sequence b's first).
struct StepOutputs {
  torch::Tensor hidden, logits;
};

// Where the host writes a step's inputs (StepGraph::stage): token ids, positions and cache slots [B, N] (int64,
// row-major), each row's visible columns in compact form [B, N, 4] (AttentionLayout::window; the step builds the
// additive mask [B, N, columns] from it on the device), and room for `picked`, the flat rows [B * N] whose outputs
// run_staged gathers. One buffer, uploaded to the model's device in one copy: a step's few small inputs, each its own
// synchronous copy from pageable memory, would cost a GPU more than its graph's replay, and a mask of a float a column
// (a megabyte for 64 sequences of 16 rows) more than these 56 bytes a row.
struct StagedInputs {
  int64_t* tokens = nullptr;
  int64_t* positions = nullptr;
  int64_t* slots = nullptr;
  int64_t* window = nullptr;
  int64_t* picked = nullptr;
};

// Writes one sequence's n rows into flat rows [first, first + n) of a staged step: token ids `tokens` and `positions`
// ([n] int64), cache slots [slot, slot + n), and `window` ([n, 4] over cached + n columns; undefined: every column
// visible), moved back by cached - slot columns when the rows go to earlier slots than the cache's length (a
// mutant's). Throws, prefixed by `what`, for a window over other columns.
void stage_rows(const StagedInputs& in, int64_t first, const torch::Tensor& tokens, const torch::Tensor& positions,
                const torch::Tensor& window, int64_t cached, int64_t slot, const std::string& what);

// The additive mask [B, N, columns] of rows whose visible columns `window` [B, N, 4] gives (kMaskWindow), computed
// where the window is (a step graph: on the device, inside the graph); `column` is arange(columns) there.
torch::Tensor step_mask(const torch::Tensor& window, const torch::Tensor& column);

// Token ids of a step's flat rows [row, row + ids.numel()) where the model computes (int64; RowSegment::fed): copied
// into the step's token input after the staged ones are uploaded, stream-ordered, so that the host writes a
// placeholder there and never waits for the ids.
struct FedTokens {
  int64_t row = 0;
  torch::Tensor ids;
};

// A model's step graphs over all its sessions' and pools' sets, as LanguageModel::step_graph_tally reports them: steps
// run, of those replayed from a CUDA graph, graphs built and graphs evicted for room. Atomic: a batch's drafters may
// run steps on several host threads at once.
struct StepGraphCounters {
  std::atomic<int64_t> runs{0}, replays{0}, built{0}, evicted{0};
};

class StepGraph {
 public:
  // For `rows` rows a sequence attending over slots [0, columns) of `cache` (batch B: B sequences, each its batch
  // row) of `model`, which must be off the decoding step (LibTorch's operations). `capture`: record a CUDA graph at
  // the second run (needs step_graphs_capture(model's device)); else run eagerly. A capture that fails is reported
  // on standard error and the step runs eagerly. `counters`: where its runs and replays are also counted (null: not).
  StepGraph(Transformer model, KVCache& cache, int64_t rows, int64_t columns, bool capture,
            StepGraphCounters* counters = nullptr);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // The rows' outputs for token ids `tokens` [rows] (int64), `positions` [rows] (int64) and `window` [rows, 4] (the
  // mask's compact form, as tree_layout builds it, over cache.length() + rows columns; undefined: every column
  // visible), each row's key and value written to slot cache.length() + its index; cache.length() + rows must be at
  // most `columns`. Inputs may be on the host. The cache is not advanced. The outputs are the step's own tensors,
  // overwritten by its next run: copy what must outlive it.
  // `fed`: token ids read on the device (FedTokens), in place of those rows of `tokens`.
  StepOutputs run(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& window,
                  const std::vector<FedTokens>& fed = {});
  // The general form (any batch): stage() gives the host side of the step's input buffer (after the upload of the
  // last step's inputs from it has finished), the caller writes every element of tokens, positions, slots and window,
  // and run_staged uploads them and runs the step. `picked` < 0: the step's own outputs [B * rows, ..], as run's;
  // else copies of the rows staged in picked[0, picked), in that order.
  StagedInputs stage();
  StepOutputs run_staged(int64_t picked = -1, const std::vector<FedTokens>& fed = {});

  int64_t rows() const;
  int64_t columns() const;
  // The cache's storage moved since the step was built (KVCache::reserve reallocated it): build a new one.
  bool stale() const;
  bool captured() const;  // a CUDA graph replays the step
  int64_t runs() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The step graphs kept over one cache, by shape (rows and columns): at most kMaxGraphs, the least recently used dropped
// to make room, those whose cache's storage moved (StepGraph::stale) dropped and built again. Shapes that keep
// rotating through more than kMaxGraphs would be captured again at each return: after kMaxEvictions evictions new
// shapes run uncaptured. A session's own steps and a batch's pooled ones (cache_pool.h) each keep one.
class StepGraphSet {
 public:
  static constexpr size_t kMaxGraphs = 8;
  static constexpr int64_t kMaxEvictions = 32;

  // `counters`: the model's (StepGraphCounters), counted into beside the set's own counts; null: none.
  explicit StepGraphSet(StepGraphCounters* counters = nullptr) : counters_(counters) {}

  // The step of `rows` rows a sequence over `columns` columns of `cache`, built on first use; `capture` as
  // StepGraph's (while fewer than kMaxEvictions evictions).
  StepGraph& get(const Transformer& model, KVCache& cache, int64_t rows, int64_t columns, bool capture);
  int64_t built() const { return built_; }
  int64_t evicted() const { return evicted_; }
  int64_t dropped() const { return dropped_; }  // stale

 private:
  std::vector<std::unique_ptr<StepGraph>> graphs_;  // the most recently used last
  int64_t built_ = 0, evicted_ = 0, dropped_ = 0;
  StepGraphCounters* counters_ = nullptr;
};

// Whether steps on `device` can be captured as CUDA graphs: LibTorch has CUDA (compiled with SPECULA_TORCH_CUDA)
// and the device is a GPU.
bool step_graphs_capture(const torch::Device& device);

// The columns a step of `rows` rows after `length` cached slots attends over: the smallest power of two of at least
// 128 that holds length + rows, at most `capacity` (a run's steps share a few such buckets as its context grows).
int64_t step_columns(int64_t length, int64_t rows, int64_t capacity);

}  // namespace specula
