// One forward shape of a transformer session made replayable: the static-shape step
// (TransformerImpl::static_hidden_states, then the LM head) for `rows` rows attending over the first `columns` slots
// of a session's KV cache, captured as a CUDA graph (LibTorch's at::cuda::CUDAGraph) on its second run (a shape used
// once, such as a prompt's, is never captured) and replayed on every later one, with the new token ids, positions,
// cache slots and mask copied into the same device tensors first. A small model's step on a GPU is bound by launching
// its ~15 kernels a layer one by one from the host; a replay launches them all at once. `columns` is a bucket of the
// cache's length (step_columns), so a step reads the keys and values it needs and not the whole capacity.
//
// Where nothing can be captured (a LibTorch without CUDA, a model on the CPU: the `libtorch` path the tests run),
// every run executes the same static-shape step eagerly, so CI checks what a replay computes.
// Includes LibTorch: only for torch translation units.
#pragma once

#include <torch/torch.h>

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

// A step's inputs in their static shapes (StepGraph::run_static), for a cache of batch B and N rows a sequence:
// token ids, positions and cache slots [B, N] (int64) and the additive mask [B, N, columns], on the host or the
// model's device.
struct StepInputs {
  torch::Tensor tokens, positions, slots, mask;
};

// Writes into `mask` [N, columns] (on the host) the mask of a step's rows that see `visible` [N, used] (additive;
// undefined: every column visible), every column from `used` on hidden (unused slots).
void write_static_step_mask(torch::Tensor mask, const torch::Tensor& visible, int64_t used);

class StepGraph {
 public:
  // For `rows` rows a sequence attending over slots [0, columns) of `cache` (batch B: B sequences, each its batch
  // row) of `model`, which must be off the decoding step (LibTorch's operations). `capture`: record a CUDA graph at
  // the second run (needs step_graphs_capture(model's device)); else run eagerly. A capture that fails is reported
  // on standard error and the step runs eagerly.
  StepGraph(Transformer model, KVCache& cache, int64_t rows, int64_t columns, bool capture);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // The rows' outputs for token ids `tokens` [rows] (int64), `positions` [rows] (int64) and `mask` [rows,
  // cache.length() + rows] (additive, as tree_layout builds it; undefined: every column visible), each row's key and
  // value written to slot cache.length() + its index; cache.length() + rows must be at most `columns`. Inputs may be
  // on the host. The cache is not advanced. The outputs are the step's own tensors, overwritten by its next run:
  // copy what must outlive it.
  StepOutputs run(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& mask);
  // The general form (any batch): the inputs in their static shapes, copied into the step's tensors, then the step.
  // Outputs as run's, [B * rows, ..].
  StepOutputs run_static(const StepInputs& inputs);

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

  // The step of `rows` rows a sequence over `columns` columns of `cache`, built on first use; `capture` as
  // StepGraph's (while fewer than kMaxEvictions evictions).
  StepGraph& get(const Transformer& model, KVCache& cache, int64_t rows, int64_t columns, bool capture);
  int64_t built() const { return built_; }
  int64_t evicted() const { return evicted_; }
  int64_t dropped() const { return dropped_; }  // stale

 private:
  std::vector<std::unique_ptr<StepGraph>> graphs_;  // the most recently used last
  int64_t built_ = 0, evicted_ = 0, dropped_ = 0;
};

// Whether steps on `device` can be captured as CUDA graphs: LibTorch has CUDA (compiled with SPECULA_TORCH_CUDA)
// and the device is a GPU.
bool step_graphs_capture(const torch::Device& device);

// The columns a step of `rows` rows after `length` cached slots attends over: the smallest power of two of at least
// 128 that holds length + rows, at most `capacity` (a run's steps share a few such buckets as its context grows).
int64_t step_columns(int64_t length, int64_t rows, int64_t capacity);

}  // namespace specula
