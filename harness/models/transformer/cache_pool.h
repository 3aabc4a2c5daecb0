// The KV caches of sequences decoding in lockstep, kept as the batch rows of one tensor, so that a step of the whole
// batch is one static-shape forward (TransformerImpl::static_hidden_states over a cache of batch B) that a CUDA graph
// can capture: every layer's attention runs once for all the sequences, each row over its own sequence's slots with
// the rest masked, instead of once a sequence (on a GPU, ~10 kernel launches a layer a sequence). Each sequence keeps
// its own length; a step pads every sequence to the widest one's rows (padding rows write a scratch slot past every
// sequence's capacity and read slot 0, and their outputs are dropped) and attends over a bucket of the longest
// sequence's slots (step_columns). Sequences of the pool that have no rows in a step are padding throughout.
//
// The pool is made for the sequences of a batched call: each cache's slots move into its row (KVCache::move_to), and
// the session keeps using its cache as before (compact, truncate, prompt copies work on the row). A row has a fixed
// number of slots (the caller's: a transformer session's pool gives max_seq_len and room for two steps' rows); a
// cache that has to grow past it (KVCache::reserve) moves out again, and the next batched call makes a new pool.
// Includes LibTorch: only for torch translation units.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/models/transformer/kv_cache.h"
#include "harness/models/transformer/step_graph.h"
#include "harness/models/transformer/transformer_model.h"

namespace specula {

struct CachePoolStats {
  int64_t steps = 0;         // batched steps run
  int64_t padding_rows = 0;  // rows computed and dropped (shorter sequences, sequences without rows)
};

class CachePool {
 public:
  // Moves `caches` (batch 1, made by `model`'s new_cache, distinct, each at most `slots` long) into rows 0.. of a
  // new pool of `slots` slots a row (and the scratch slot). `capture`: its steps are captured as CUDA graphs.
  // `counters`: the model's step-graph counters, which its graphs count into (null: none).
  CachePool(Transformer model, int64_t slots, const std::vector<KVCache*>& caches, bool capture,
            StepGraphCounters* counters = nullptr);
  CachePool(const CachePool&) = delete;
  CachePool& operator=(const CachePool&) = delete;

  int64_t rows() const { return static_cast<int64_t>(members_.size()); }
  int64_t slots() const { return slots_; }
  // Whether `cache` keeps its slots in one of the rows (it was moved in and has not moved out).
  bool holds(const KVCache& cache) const;
  // `cache`'s session ends (or it moves to another pool): its row is padding from now on. A pool is used from one
  // thread at a time.
  void release(const KVCache& cache);

  // One step for `segments` (each on a cache this pool holds, distinct, tokens [N] with length + N at most `slots`,
  // positions [N], window [N, 4] over length + N columns (AttentionLayout::window) or undefined: every column visible):
  // the final hidden states and logits of every segment's rows, [sum of N, ..] in segment order, copies the next step
  // does not overwrite. Each cache advances by its N.
  StepOutputs run(const std::vector<RowSegment>& segments);

  const CachePoolStats& stats() const { return stats_; }
  // Its steps' graphs (shapes: rows a sequence and a bucket of the longest length).
  const StepGraphSet& graphs() const { return graphs_; }

 private:
  int64_t row_of(const KVCache& cache) const;  // -1: not held

  Transformer model_;
  bool capture_;
  int64_t slots_;                        // each row's slots as its cache sees them
  KVCache pool_;                         // [layers, rows, heads, slots + 1, head_dim]: slot `slots` is scratch
  std::vector<const KVCache*> members_;  // row b's cache (null once released)
  std::vector<torch::Tensor> row_keys_;  // row b's keys as its cache keeps them (KVCache::stores_in)
  StepGraphSet graphs_;
  CachePoolStats stats_;
};

}  // namespace specula
