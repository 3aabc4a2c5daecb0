// The keys and values of every layer for the tokens a session has already run, preallocated once
// ([layers, B, heads, max_len, head_dim], EAGLE's kv_cache.py) with a current length. Slot s holds the keys
// of the token at slot s; keys are stored after RoPE, so they stay valid when `compact` moves them to another
// slot (verify/ALGORITHMS.md §6 step 5: the accepted path's keys were already rotated with their final positions).
// Includes LibTorch: only for torch translation units.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/shared/error.h"

namespace specula {

class KVCache {
 public:
  KVCache(int64_t layers, int64_t batch, int64_t heads, int64_t max_len, int64_t head_dim,
          torch::TensorOptions options = torch::kFloat32)
      : k_(torch::zeros({layers, batch, heads, max_len, head_dim}, options)), v_(torch::zeros_like(k_)) {}

  int64_t length() const { return length_; }
  int64_t capacity() const { return k_.size(3); }
  int64_t layers() const { return k_.size(0); }

  // Stores layer `layer`'s keys and values k, v [B, H, N, D] of N new tokens in slots [length, length + N)
  // and returns the layer's keys and values for slots [0, length + N) (views). Every layer writes the same N;
  // `advance(N)` then makes the new slots part of the cache.
  std::pair<torch::Tensor, torch::Tensor> write(int64_t layer, const torch::Tensor& k, const torch::Tensor& v) {
    const int64_t n = k.size(2);
    if (length_ + n > capacity())
      fail("KV cache overflow: ", length_, " cached + ", n, " new tokens exceed the capacity of ", capacity(),
           " (reserve more slots first)");
    torch::Tensor k_layer = k_.select(0, layer), v_layer = v_.select(0, layer);
    k_layer.narrow(2, length_, n).copy_(k);
    v_layer.narrow(2, length_, n).copy_(v);
    return {k_layer.narrow(2, 0, length_ + n), v_layer.narrow(2, 0, length_ + n)};
  }
  // The static-shape form of write (a step replayed as a CUDA graph, step_graph.h): the new keys and values k, v
  // [B, H, N, D] go to the slots `slots` [B, N] (row r of batch row b to slot slots[b][r]; a device tensor, so that
  // its values can change between replays), and the layer's keys and values of slots [0, columns) come back,
  // [B, H, columns, D], whatever the lengths: the caller's mask hides the slots a row must not see. Two rows of one
  // batch row must not name the same slot unless nothing reads it (padding's scratch slot, CachePool). Reads no
  // tensor's value on the host.
  std::pair<torch::Tensor, torch::Tensor> write_at(int64_t layer, const torch::Tensor& k, const torch::Tensor& v,
                                                   const torch::Tensor& slots, int64_t columns) {
    if (columns < 1 || columns > capacity())
      fail("KV cache: ", columns, " columns of a capacity of ", capacity(), " slots");
    if (slots.dim() != 2 || slots.size(0) != batch() || slots.size(1) != k.size(2))
      fail("KV cache: slots ", slots.sizes(), " for ", k.size(2), " rows of a batch of ", batch());
    torch::Tensor k_layer = k_.select(0, layer), v_layer = v_.select(0, layer);
    // [B, slots, H, D] views: index_put_ with (batch row, slot) pairs writes every row's [H, D] in one operation.
    const torch::Tensor rows = torch::arange(batch(), slots.options()).unsqueeze(1).expand_as(slots);
    k_layer.permute({0, 2, 1, 3}).index_put_({rows, slots}, k.permute({0, 2, 1, 3}).to(k_layer.scalar_type()));
    v_layer.permute({0, 2, 1, 3}).index_put_({rows, slots}, v.permute({0, 2, 1, 3}).to(v_layer.scalar_type()));
    return {k_layer.narrow(2, 0, columns), v_layer.narrow(2, 0, columns)};
  }
  // Batch row b's keys and values, slots [0, slots), as [layers, 1, heads, slots, head_dim] views of this cache's
  // storage: where another cache can keep its slots (move_to; a CachePool's rows).
  std::pair<torch::Tensor, torch::Tensor> row_storage(int64_t b, int64_t slots) const {
    if (b < 0 || b >= batch() || slots < 1 || slots > capacity())
      fail("KV cache: row ", b, " with ", slots, " slots of a batch of ", batch(), " and ", capacity(), " slots");
    return {k_.narrow(1, b, 1).narrow(3, 0, slots), v_.narrow(1, b, 1).narrow(3, 0, slots)};
  }
  // Moves the cached slots into k, v (views from another cache's row_storage, at least as many slots as the length,
  // this cache's layers, heads and head size) and keeps every slot there from now on; the generation moves (steps
  // captured over the old storage are stale). A later reserve beyond their slots moves the cache out again.
  void move_to(const torch::Tensor& k, const torch::Tensor& v) {
    if (k.dim() != 5 || k.size(0) != layers() || k.size(1) != 1 || k.size(2) != k_.size(2) || k.size(4) != k_.size(4) ||
        k.size(3) < length_ || !v.sizes().equals(k.sizes()) || k.scalar_type() != k_.scalar_type() ||
        k.device() != k_.device() || batch() != 1)
      fail("KV cache: cannot move ", k_.sizes(), " (", length_, " cached) into ", k.sizes());
    k.narrow(3, 0, length_).copy_(k_.narrow(3, 0, length_));
    v.narrow(3, 0, length_).copy_(v_.narrow(3, 0, length_));
    k_ = k;
    v_ = v;
    ++generation_;
  }
  // Whether the slots are kept in `k` (a view move_to was given): still there, not moved out by a reserve.
  bool stores_in(const torch::Tensor& k) const { return k_.data_ptr() == k.data_ptr() && k_.sizes() == k.sizes(); }
  // Counts the reallocations of the keys' and values' storage (reserve): a step captured over this cache reads and
  // writes that storage, so it is stale once the count moves.
  uint64_t generation() const { return generation_; }
  void advance(int64_t n) {
    if (n < 0 || length_ + n > capacity()) fail("KV cache: cannot advance ", length_, " by ", n);
    length_ += n;
  }

  // Keep the first n slots (rejected chain drafts are dropped; their slots are overwritten later).
  void truncate(int64_t n) {
    if (n < 0 || n > length_) fail("KV cache: cannot truncate ", length_, " cached tokens to ", n);
    length_ = n;
  }

  // Keep the slots `keep` (strictly increasing), moved to slots 0..keep.size()-1: e.g. the committed prefix
  // [0, L) followed by the slots of a tree's accepted path. Slots already in place are not copied.
  void compact(const std::vector<int64_t>& keep) {
    int64_t first_moved = 0;
    for (size_t i = 0; i < keep.size(); ++i) {
      if (keep[i] < 0 || keep[i] >= length_ || (i > 0 && keep[i] <= keep[i - 1]))
        fail("KV cache: compact needs strictly increasing slots below the length ", length_);
      if (keep[i] == static_cast<int64_t>(i)) first_moved = static_cast<int64_t>(i) + 1;
    }
    const int64_t kept = static_cast<int64_t>(keep.size());
    if (first_moved < kept && plain_cpu_float() && batch() == 1 && !libtorch_operations_) {
      // Slot by slot in increasing order: keep[i] >= i, so a slot is read before anything overwrites it.
      const int64_t heads = k_.size(2), cap = capacity(), dim = k_.size(4);
      for (int64_t layer = 0; layer < layers(); ++layer)
        for (float* base : {key_data(layer), value_data(layer)})
          for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = first_moved; i < kept; ++i)
              if (keep[i] != i)
                std::memcpy(base + (h * cap + i) * dim, base + (h * cap + keep[i]) * dim, sizeof(float) * dim);
    } else if (first_moved < kept) {
      const torch::Tensor index =
          torch::tensor(std::vector<int64_t>(keep.begin() + first_moved, keep.end()), torch::kInt64).to(k_.device());
      // index_select copies before the slots are overwritten, so overlapping moves are safe.
      k_.narrow(3, first_moved, kept - first_moved).copy_(k_.index_select(3, index));
      v_.narrow(3, first_moved, kept - first_moved).copy_(v_.index_select(3, index));
    }
    length_ = kept;
  }

  void clear() { length_ = 0; }

  // Copies of slots [0, n) (a prompt's keys and values, [layers, B, H, n, D]), and their inverse: a new session
  // starts from another session's prompt (TransformerModelState's prompt cache) instead of running it again.
  std::pair<torch::Tensor, torch::Tensor> copy_prefix(int64_t n) const {
    if (n < 0 || n > length_) fail("KV cache: cannot copy ", n, " of ", length_, " cached tokens");
    return {k_.narrow(3, 0, n).clone(), v_.narrow(3, 0, n).clone()};
  }
  void load_prefix(const torch::Tensor& k, const torch::Tensor& v) {
    const int64_t n = k.size(3);
    reserve(n);
    k_.narrow(3, 0, n).copy_(k);
    v_.narrow(3, 0, n).copy_(v);
    length_ = n;
  }
  // Bytes of slots [0, n) of keys and values together.
  int64_t prefix_bytes(int64_t n) const {
    return 2 * n * k_.size(0) * k_.size(1) * k_.size(2) * k_.size(4) * static_cast<int64_t>(k_.element_size());
  }

  // Layer `layer`'s keys / values of batch row 0 as [heads, capacity(), head_dim] (the cache is contiguous),
  // for code that writes and reads slots directly (decode_step.h).
  float* key_data(int64_t layer) { return k_.select(0, layer).select(0, 0).data_ptr<float>(); }
  float* value_data(int64_t layer) { return v_.select(0, layer).select(0, 0).data_ptr<float>(); }
  bool plain_cpu_float() const {
    return k_.device().is_cpu() && k_.scalar_type() == torch::kFloat32 && k_.is_contiguous() && v_.is_contiguous();
  }
  int64_t batch() const { return k_.size(1); }
  // Slots move with LibTorch's operations even on the CPU (a model run on the GPU's path: TransformerImpl).
  void use_libtorch_operations() { libtorch_operations_ = true; }

  // Grows the capacity to at least `slots`, keeping the cached slots (a tree can need more slots than
  // positions: every node takes a slot, but only its depth adds a position).
  void reserve(int64_t slots) {
    if (slots <= capacity()) return;
    std::vector<int64_t> sizes = k_.sizes().vec();
    sizes[3] = std::max(slots, 2 * capacity());
    torch::Tensor k = torch::zeros(sizes, k_.options()), v = torch::zeros(sizes, v_.options());
    k.narrow(3, 0, length_).copy_(k_.narrow(3, 0, length_));
    v.narrow(3, 0, length_).copy_(v_.narrow(3, 0, length_));
    k_ = k;
    v_ = v;
    ++generation_;
  }

 private:
  torch::Tensor k_, v_;  // [layers, B, H, max_len, D]
  int64_t length_ = 0;
  bool libtorch_operations_ = false;
  uint64_t generation_ = 0;
};

}  // namespace specula
