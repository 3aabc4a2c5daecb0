#include "harness/models/transformer/step_graph.h"

#include <algorithm>
#include <iostream>
#include <limits>

#ifdef SPECULA_TORCH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/version.h>

#include <atomic>
#include <map>
#include <mutex>
#endif

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"

namespace specula {

#ifdef SPECULA_TORCH_CUDA
namespace {
// Once a capture has failed, no step captures again in this process: each would fail the same way and print again.
std::atomic<bool> captures_failed{false};
}  // namespace
#endif

struct StepGraph::State {
  Transformer model{nullptr};
  KVCache* cache = nullptr;
  int64_t rows = 0, columns = 0;
  bool capture = false;
  uint64_t generation = 0;  // the cache's storage the step reads and writes (KVCache::generation)
  // The static inputs, on the model's device: what a replay reads. Views of `inputs` (int64: tokens, positions,
  // slots, picked, windows), which the host writes through `staging`: the same buffer for a model on the CPU, else
  // pinned host memory that one asynchronous copy uploads.
  torch::Tensor inputs, staging;
  torch::Tensor tokens, positions, slots, picked, window;
  torch::Tensor column;  // arange(columns), for the mask
  StagedInputs staged;
  StepOutputs out;
  int64_t runs = 0;
  StepGraphCounters* counters = nullptr;
#ifdef SPECULA_TORCH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  at::cuda::CUDAEvent uploaded;  // after the last copy from `staging`: the host waits for it before writing again
#endif

  // The step itself, from the static inputs into `out`: the mask built from the windows, then the forward.
  void compute() {
    const torch::Tensor mask = step_mask(window, column);
    const torch::Tensor hidden =
        model->static_hidden_states(tokens, positions, slots, mask, *cache).reshape({-1, model->config().d_model});
    out = {hidden, model->lm_head(hidden).to(torch::kFloat32)};
  }

#ifdef SPECULA_TORCH_CUDA
  // LibTorch's rules for a capture: on a stream other than the device's default, after a warm-up run on it (lazy
  // initialisations such as cuBLAS's workspace must not happen inside the capture), and joined back to the caller's
  // stream. The warm-up writes the same keys and values to the same slots as the replay that follows. Sessions run
  // on several host threads (a batch's drafters): one capture at a time in the process, in thread-local mode so that
  // another thread's allocations cannot invalidate it, always on the device's one capture stream (memory freed on a
  // stream is reused on that stream only). The graph is kept only once its capture has ended; the side stream is
  // joined back to the caller's whatever happened.
  void capture_graph() {
    static std::mutex one_capture_at_a_time;
    static std::map<c10::DeviceIndex, c10::cuda::CUDAStream> capture_streams;
    const std::lock_guard<std::mutex> lock(one_capture_at_a_time);
    const c10::DeviceIndex index = model->embedding->weight.device().index();
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(index);
    auto found = capture_streams.find(index);
    if (found == capture_streams.end())
      found = capture_streams.emplace(index, c10::cuda::getStreamFromPool(false, index)).first;
    const c10::cuda::CUDAStream side = found->second;
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(caller);
    inputs_ready.block(side);
    // The caller's stream waits for the side stream's work, on every way out. A destructor must not throw: after a
    // sticky CUDA error (or while another exception unwinds) the join's own failure is dropped, and the error that
    // caused it reaches the caller through the capture's exception or the next CUDA call.
    struct JoinBack {
      c10::cuda::CUDAStream side, caller;
      ~JoinBack() {
        try {
          at::cuda::CUDAEvent joined;
          joined.record(side);
          joined.block(caller);
        } catch (...) {
        }
      }
    } join_back{side, caller};
    auto captured = std::make_unique<at::cuda::CUDAGraph>();
    const c10::cuda::CUDAStreamGuard on_side(side);
    compute();
    bool began = false;
    try {
#if TORCH_VERSION_MAJOR >= 2
      captured->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
#else
      captured->capture_begin();
#endif
      began = true;
      compute();  // recorded, not run: `out` now names the graph's own output tensors
      captured->capture_end();
    } catch (...) {
      if (began) try {
          captured->capture_end();  // leave the stream out of capture mode
        } catch (...) {
        }
      throw;
    }
    graph = std::move(captured);
  }
#endif

  // The step from the static inputs: replayed once captured (at the second run), else computed eagerly.
  const StepOutputs& run_step() {
#ifdef SPECULA_TORCH_CUDA
    if (capture && runs >= 2 && (graph || !captures_failed)) {
      if (!graph) {
        try {
          capture_graph();
        } catch (const std::exception& e) {
          if (!captures_failed.exchange(true))
            std::cerr << "step graph (" << rows << " rows, " << columns << " columns): CUDA graph capture failed; "
                      << "steps run without CUDA graphs from here on: " << e.what() << "\n";
          capture = false;
          compute();
          return out;
        }
      }
      graph->replay();
      if (counters) ++counters->replays;
      return out;
    }
#endif
    compute();
    return out;
  }
};

bool step_graphs_capture(const torch::Device& device) {
#ifdef SPECULA_TORCH_CUDA
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

int64_t step_columns(int64_t length, int64_t rows, int64_t capacity) {
  int64_t columns = 128;
  while (columns < length + rows) columns *= 2;
  return std::min(columns, capacity);
}

StepGraph::StepGraph(Transformer model, KVCache& cache, int64_t rows, int64_t columns, bool capture,
                     StepGraphCounters* counters)
    : state_(std::make_unique<State>()) {
  const torch::Device device = model->embedding->weight.device();
  if (model->decode_step()) fail("step graph: the model is on the decoding step; graphs run LibTorch's operations");
  if (rows < 1) fail("step graph: at least one row, got ", rows);
  if (columns < rows || columns > cache.capacity())
    fail("step graph: ", columns, " columns for ", rows, " rows in a cache of ", cache.capacity(), " slots");
  if (capture && !step_graphs_capture(device))
    fail("step graph: capturing needs a CUDA LibTorch and a model on a GPU, the model is on ", device.str());
  State& s = *state_;
  s.model = model;
  s.cache = &cache;
  s.rows = rows;
  s.columns = columns;
  s.capture = capture;
  s.counters = counters;
  s.generation = cache.generation();
  const int64_t batch = cache.batch(), n = batch * rows;
  const torch::TensorOptions ids = torch::TensorOptions().dtype(torch::kInt64);
  s.inputs = torch::zeros({8 * n}, ids.device(device));
  s.staging = device.is_cpu() ? s.inputs : torch::zeros({8 * n}, ids.pinned_memory(true));
  s.tokens = s.inputs.narrow(0, 0, n).view({batch, rows});
  s.positions = s.inputs.narrow(0, n, n).view({batch, rows});
  s.slots = s.inputs.narrow(0, 2 * n, n).view({batch, rows});
  s.picked = s.inputs.narrow(0, 3 * n, n);
  s.window = s.inputs.narrow(0, 4 * n, 4 * n).view({batch, rows, 4});
  s.column = torch::arange(columns, ids.device(device));
  int64_t* host = s.staging.data_ptr<int64_t>();
  s.staged = {host, host + n, host + 2 * n, host + 4 * n, host + 3 * n};
}

torch::Tensor step_mask(const torch::Tensor& window, const torch::Tensor& column) {
  // Every comparison on the window's device: a graph computes the mask from the uploaded windows itself.
  const torch::Tensor col = column.view({1, 1, -1});
  const torch::Tensor prefix = window.select(2, 0).unsqueeze(2), used = window.select(2, 1).unsqueeze(2);
  const torch::Tensor offset = (col - prefix).clamp(0, kMaskWindow - 1);  // a column's bit in the window
  const torch::Tensor word = window.narrow(2, 2, 2).gather(2, torch::bitwise_right_shift(offset, 6));
  const torch::Tensor bit = torch::bitwise_and(torch::bitwise_right_shift(word, torch::bitwise_and(offset, 63)), 1);
  torch::Tensor visible = col.lt(prefix) | (col.lt(used) & col.lt(prefix + kMaskWindow) & bit.eq(1));
  // Unused columns hidden; the mutant leaves them visible (what a replay must never read).
  if (mutant_on(Mutant::step_graph_sees_unused_slots)) visible = visible | col.ge(used);
  return torch::zeros(visible.sizes(), column.options().dtype(torch::kFloat32))
      .masked_fill_(visible.logical_not(), -std::numeric_limits<float>::infinity());
}

StepGraph::~StepGraph() = default;

StepOutputs StepGraph::run(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& window,
                           const std::vector<FedTokens>& fed) {
  State& s = *state_;
  if (stale()) fail("step graph: the cache was reallocated since the step was built");
  const int64_t length = s.cache->length(), used = length + s.rows;
  if (used > s.columns)
    fail("step graph: ", length, " cached + ", s.rows, " rows exceed the step's ", s.columns, " columns");
  if (tokens.numel() != s.rows || positions.numel() != s.rows)
    fail("step graph: ", tokens.numel(), " tokens and ", positions.numel(), " positions for a step of ", s.rows,
         " rows");
  if (window.defined() && (window.dim() != 2 || window.size(0) != s.rows || window.size(1) != 4))
    fail("step graph: a window of ", window.sizes(), " for ", s.rows, " rows");
  if (s.tokens.size(0) != 1) fail("step graph: run takes one sequence, the cache holds ", s.tokens.size(0));
  // The rows go to slots [length, used); every column past them, unused, is hidden.
  stage_rows(stage(), 0, tokens, positions, window, length, length, "step graph: ");
  return run_staged(-1, fed);
}

void stage_rows(const StagedInputs& in, int64_t first, const torch::Tensor& tokens, const torch::Tensor& positions,
                const torch::Tensor& window, int64_t cached, int64_t slot, const std::string& what) {
  const int64_t n = tokens.numel(), used = cached + n, shift = cached - slot;
  const torch::Tensor ids = tokens.to(torch::kCPU, torch::kInt64).contiguous();
  const torch::Tensor at = positions.to(torch::kCPU, torch::kInt64).contiguous();
  const torch::Tensor seen = window.defined() ? window.to(torch::kCPU, torch::kInt64).contiguous() : window;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t i = first + r;
    in.tokens[i] = ids.data_ptr<int64_t>()[r];
    in.positions[i] = at.data_ptr<int64_t>()[r];
    in.slots[i] = slot + r;
    int64_t* w = in.window + 4 * i;
    if (!seen.defined()) {
      w[0] = w[1] = used - shift;
      w[2] = w[3] = 0;
      continue;
    }
    const int64_t* from = seen.data_ptr<int64_t>() + 4 * r;
    if (from[1] != used) fail(what, "window row ", r, " is over ", from[1], " columns, the step's rows over ", used);
    w[0] = from[0] - shift;
    w[1] = from[1] - shift;
    w[2] = from[2];
    w[3] = from[3];
  }
}

StagedInputs StepGraph::stage() {
  State& s = *state_;
  if (stale()) fail("step graph: the cache was reallocated since the step was built");
#ifdef SPECULA_TORCH_CUDA
  s.uploaded.synchronize();  // no-op before the first upload
#endif
  return s.staged;
}

StepOutputs StepGraph::run_staged(int64_t picked, const std::vector<FedTokens>& fed) {
  State& s = *state_;
  if (stale()) fail("step graph: the cache was reallocated since the step was built");
  if (picked > s.picked.numel()) fail("step graph: ", picked, " rows picked of a step of ", s.picked.numel());
  // Into the static tensors, stream-ordered before the step.
  if (!s.staging.is_same(s.inputs)) {
    s.inputs.copy_(s.staging, /*non_blocking=*/true);
#ifdef SPECULA_TORCH_CUDA
    s.uploaded.record(c10::cuda::getCurrentCUDAStream(s.inputs.device().index()));
#endif
  }
  // Fed ids over their rows' placeholders, after the upload and before the step (stream-ordered on a GPU).
  const torch::Tensor flat_tokens = s.tokens.view({-1});
  for (const FedTokens& f : fed) {
    const int64_t n = f.ids.numel();
    if (f.row < 0 || f.row + n > flat_tokens.numel())
      fail("step graph: ", n, " fed token ids from row ", f.row, " of a step of ", flat_tokens.numel(), " rows");
    flat_tokens.narrow(0, f.row, n).copy_(f.ids, /*non_blocking=*/true);
  }
  ++s.runs;
  if (s.counters) ++s.counters->runs;
  const StepOutputs& out = s.run_step();
  if (picked < 0) return out;
  const torch::Tensor index = s.picked.narrow(0, 0, picked);
  return {out.hidden.index_select(0, index), out.logits.index_select(0, index)};
}

StepGraph& StepGraphSet::get(const Transformer& model, KVCache& cache, int64_t rows, int64_t columns, bool capture) {
  const size_t before = graphs_.size();
  graphs_.erase(std::remove_if(graphs_.begin(), graphs_.end(), [](const auto& g) { return g->stale(); }),
                graphs_.end());
  dropped_ += static_cast<int64_t>(before - graphs_.size());
  auto found = std::find_if(graphs_.begin(), graphs_.end(),
                            [&](const auto& g) { return g->rows() == rows && g->columns() == columns; });
  if (found != graphs_.end()) {
    std::rotate(found, found + 1, graphs_.end());  // now the most recently used
    return *graphs_.back();
  }
  if (graphs_.size() >= kMaxGraphs) {
    graphs_.erase(graphs_.begin());
    ++evicted_;
    if (counters_) ++counters_->evicted;
  }
  graphs_.push_back(
      std::make_unique<StepGraph>(model, cache, rows, columns, capture && evicted_ < kMaxEvictions, counters_));
  ++built_;
  if (counters_) ++counters_->built;
  return *graphs_.back();
}

int64_t StepGraph::rows() const { return state_->rows; }
int64_t StepGraph::columns() const { return state_->columns; }
bool StepGraph::stale() const { return state_->cache->generation() != state_->generation; }
int64_t StepGraph::runs() const { return state_->runs; }
bool StepGraph::captured() const {
#ifdef SPECULA_TORCH_CUDA
  return state_->graph != nullptr;
#else
  return false;
#endif
}

}  // namespace specula
