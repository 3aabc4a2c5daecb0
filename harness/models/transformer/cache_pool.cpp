#include "harness/models/transformer/cache_pool.h"

#include <algorithm>
#include <limits>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"

namespace specula {

namespace {

// `slots`, once `caches` are checked: one sequence's each, distinct, none longer.
int64_t checked_slots(const Transformer& model, int64_t slots, const std::vector<KVCache*>& caches) {
  if (caches.empty()) fail("cache pool: no caches");
  if (model->decode_step())
    fail("cache pool: the model is on the decoding step; pooled steps run LibTorch's operations");
  for (size_t i = 0; i < caches.size(); ++i) {
    if (!caches[i] || caches[i]->batch() != 1) fail("cache pool: cache ", i, " is not one sequence's");
    if (std::count(caches.begin(), caches.end(), caches[i]) > 1) fail("cache pool: cache ", i, " given twice");
    if (caches[i]->length() > slots)
      fail("cache pool: cache ", i, " holds ", caches[i]->length(), " slots, a row ", slots);
  }
  return slots;
}

}  // namespace

CachePool::CachePool(Transformer model, int64_t slots, const std::vector<KVCache*>& caches, bool capture,
                     StepGraphCounters* counters)
    : model_(std::move(model)),
      capture_(capture),
      slots_(checked_slots(model_, slots, caches)),
      pool_(model_->config().n_layers, static_cast<int64_t>(caches.size()), model_->config().kv_heads(), slots_ + 1,
            model_->config().head_dim(),
            model_->embedding->weight.options().dtype(torch::kFloat32)),  // as new_cache keeps a sequence's
      graphs_(counters) {
  pool_.use_libtorch_operations();
  for (size_t b = 0; b < caches.size(); ++b) {
    const auto [keys, values] = pool_.row_storage(static_cast<int64_t>(b), slots_);
    caches[b]->move_to(keys, values);
    members_.push_back(caches[b]);
    row_keys_.push_back(keys);
  }
}

int64_t CachePool::row_of(const KVCache& cache) const {
  for (size_t b = 0; b < members_.size(); ++b)
    if (members_[b] == &cache && cache.stores_in(row_keys_[b])) return static_cast<int64_t>(b);
  return -1;
}

bool CachePool::holds(const KVCache& cache) const { return row_of(cache) >= 0; }

void CachePool::release(const KVCache& cache) {
  for (auto& member : members_)
    if (member == &cache) member = nullptr;
}

StepOutputs CachePool::run(const std::vector<RowSegment>& segments) {
  const int64_t P = rows();
  std::vector<int64_t> row(segments.size());
  std::vector<bool> taken(static_cast<size_t>(P), false);
  int64_t widest = 0, longest = 0;
  for (size_t k = 0; k < segments.size(); ++k) {
    const RowSegment& s = segments[k];
    if (!s.cache || (row[k] = row_of(*s.cache)) < 0) fail("cache pool: segment ", k, "'s cache is not in the pool");
    if (taken[row[k]]) fail("cache pool: segment ", k, "'s cache has rows in the step already");
    taken[row[k]] = true;
    const int64_t n = s.tokens.numel(), used = s.cache->length() + n;
    if (n < 1 || s.positions.numel() != n)
      fail("cache pool: segment ", k, ": ", n, " tokens, ", s.positions.numel(), " positions");
    if (s.mask.defined() && !s.window.defined())
      fail("cache pool: segment ", k, " has a mask but no window (its compact form, which a pooled step reads)");
    if (s.window.defined() && (s.window.dim() != 2 || s.window.size(0) != n || s.window.size(1) != 4))
      fail("cache pool: segment ", k, ": a window of ", s.window.sizes(), " for ", n, " rows after ", s.cache->length(),
           " cached slots");
    if (used > slots_)
      fail("KV cache overflow: ", s.cache->length(), " cached + ", n, " new tokens exceed the capacity of ", slots_,
           " (reserve more slots first)");
    widest = std::max(widest, n);
    longest = std::max(longest, used);
  }
  const int64_t N = widest, columns = step_columns(0, longest, slots_);
  const int64_t scratch = mutant_on(Mutant::pool_padding_writes_cached_slot) ? 0 : slots_;
  int64_t shortest = slots_;  // for the mutant that gives every sequence the shortest cache's length
  for (const RowSegment& s : segments) shortest = std::min(shortest, s.cache->length());
  StepGraph& step = graphs_.get(model_, pool_, N, columns, capture_);
  const StagedInputs in = step.stage();
  // Written in place, row by row: a batch's few hundred small tensor operations would take a GPU's host longer than
  // the step. Rows without a segment's row are padding: token 0 at position 0 written to the scratch slot (past every
  // row's slots: no column reads it), seeing slot 0 only (a row that sees nothing would be NaN; it is dropped anyway).
  std::vector<int64_t> segment_of(static_cast<size_t>(P), -1);
  for (size_t k = 0; k < segments.size(); ++k) segment_of[row[k]] = static_cast<int64_t>(k);
  for (int64_t b = 0; b < P; ++b) {
    const int64_t k = segment_of[b];
    const RowSegment* s = k >= 0 ? &segments[k] : nullptr;
    const int64_t n = s ? s->tokens.numel() : 0;
    const int64_t length = !s                                                        ? 0
                           : mutant_on(Mutant::batch_rows_use_shortest_cache_length) ? shortest
                                                                                     : s->cache->length();
    if (s)
      stage_rows(in, b * N, s->tokens, s->positions, s->window, s->cache->length(), length,
                 "cache pool: segment " + std::to_string(k) + ": ");
    for (int64_t r = n; r < N; ++r) {
      const int64_t i = b * N + r;
      int64_t* w = in.window + 4 * i;
      in.tokens[i] = 0;
      in.positions[i] = 0;
      in.slots[i] = scratch;
      w[0] = w[1] = 1;  // slot 0 only
      w[2] = w[3] = 0;
    }
  }
  int64_t picked = 0;  // the flat output row of every segment row, in segment order
  for (size_t k = 0; k < segments.size(); ++k)
    for (int64_t r = 0; r < segments[k].tokens.numel(); ++r) in.picked[picked++] = row[k] * N + r;
  std::vector<FedTokens> fed;
  for (size_t k = 0; k < segments.size(); ++k)
    if (segments[k].fed.defined()) fed.push_back(FedTokens{row[k] * N + segments[k].fed_row, segments[k].fed});
  const StepOutputs out = step.run_staged(picked, fed);
  for (const RowSegment& s : segments) s.cache->advance(s.tokens.numel());
  ++stats_.steps;
  stats_.padding_rows += P * N - picked;
  return out;
}

}  // namespace specula
