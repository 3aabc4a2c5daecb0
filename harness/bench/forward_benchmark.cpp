#include "harness/bench/forward_benchmark.h"

#include <time.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "harness/config/command_options.h"
#include "harness/experiment/environment.h"
#include "harness/io/output_file.h"
#include "harness/models/transformer/cache_pool.h"
#include "harness/models/transformer/checkpoint.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/memory_budget.h"
#include "harness/models/transformer/skinny_linear.h"
#include "harness/models/transformer/step_graph.h"
#include "harness/models/transformer/transformer_model.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "verify/verifiers/token_tree.h"

namespace specula::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// A full tree of the given shape ("2,2,1": 2 children at depth 1, 2 under each, 1 under each of those),
// parents before children; the tokens do not change the cost.
std::vector<int32_t> tree_parents(const std::vector<int32_t>& shape) {
  std::vector<int32_t> parents, frontier = {-1};
  for (int32_t branching : shape) {
    std::vector<int32_t> next;
    for (int32_t p : frontier)
      for (int32_t b = 0; b < branching; ++b) {
        parents.push_back(p);
        next.push_back(static_cast<int32_t>(parents.size()) - 1);
      }
    frontier = std::move(next);
  }
  return parents;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double process_cpu_us() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) * 1e-3;
}

// Reads share `part` of `parts` of every block once (8 independent 64-bit lanes, so the loop runs at the
// memory's pace, not at an add chain's). The result is kept so the reads cannot be optimised away.
uint64_t stream_read(const std::vector<std::pair<const uint8_t*, size_t>>& blocks, int64_t part, int64_t parts) {
  uint64_t lanes[8] = {};
  for (const auto& [data, bytes] : blocks) {
    const size_t lines = bytes / 64, first = lines * part / parts, last = lines * (part + 1) / parts;
    for (size_t line = first; line < last; ++line) {
      uint64_t w[8];
      std::memcpy(w, data + line * 64, sizeof w);
      for (int l = 0; l < 8; ++l) lanes[l] ^= w[l];
    }
  }
  uint64_t x = 0;
  for (uint64_t l : lanes) x ^= l;
  return x;
}

// The physical floor of a decoding step that streams the same weights: every byte read once, split over
// the same threads the forwards use.
uint64_t stream_read_parallel(const std::vector<std::pair<const uint8_t*, size_t>>& blocks, int threads) {
  std::vector<uint64_t> out(static_cast<size_t>(threads), 0);
  at::parallel_for(0, threads, 1, [&](int64_t first, int64_t last) {
    for (int64_t t = first; t < last; ++t) out[t] = stream_read(blocks, t, threads);
  });
  uint64_t x = 0;
  for (uint64_t v : out) x ^= v;
  return x;
}

struct Case {
  std::string name;               // "1-token", "chunk K=4", "tree 2,2,1"
  std::string kind;               // "chunk" | "tree"
  int64_t rows = 0;               // tokens run by the forward
  int64_t depth = 0;              // positions added (rows for a chunk, depth for a tree)
  std::function<void()> run;      // one forward after the cached context
  std::vector<double> wall_us;    // per timed forward
  std::vector<double> cpu_us;     // process CPU time per timed forward (all threads)
  std::string group = "forward";  // "forward" | "floor" (the weight stream alone)
  double floor_scale = 1.0;       // the floor's time per timed run: its median times this
  bool graph = false;             // a CUDA graph's replay (step_graph.h); its eager twin follows it
  int64_t batch = 1;              // sequences of the step (a pooled step, cache_pool.h, when > 1)
};

// Runs the cases in rounds (one forward of each per round, in a freshly shuffled order, the cache truncated
// back to `context` after every call) until every case has min_iterations samples and min_time seconds.
// Interleaving spreads changes in machine load evenly over the cases; shuffling stops a fixed order from
// lining the same case up with the end of the scheduler's time slice on a loaded machine (which, observed,
// inflated the last case's median wall time 4x while its CPU time did not move).
void time_cases(std::vector<Case>& cases, KVCache& cache, int64_t context, const ForwardBenchOptions& o) {
  for (int i = 0; i < 5; ++i)  // warm-up: allocator, OpenMP pool, caches
    for (Case& cs : cases) {
      cs.run();
      cache.truncate(context);
    }
  std::vector<size_t> order(cases.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(12345);
  const auto start = Clock::now();
  const double min_total_s = o.min_time_s * static_cast<double>(cases.size());
  for (int64_t round = 0;
       round < o.min_iterations || std::chrono::duration<double>(Clock::now() - start).count() < min_total_s; ++round) {
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t i : order) {
      Case& cs = cases[i];
      const double c0 = process_cpu_us();
      const auto t0 = Clock::now();
      cs.run();
      cs.wall_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      cs.cpu_us.push_back(process_cpu_us() - c0);
      cache.truncate(context);
    }
  }
}

// LibTorch launches GPU work asynchronously: a timed forward on the GPU ends when the device has finished it.
void wait_for_device(bool cuda) {
  if (cuda) torch::cuda::synchronize();
}

// The case of `layout`'s rows as a CUDA graph (step_graph.h), as a session on the GPU runs them: the graph is
// captured on its second (warm-up) run, each timed run copies the positions and the mask's compact form in and replays
// it.
Case graph_case(Transformer& model, KVCache& cache, const Case& eager, const torch::Tensor& tokens,
                const AttentionLayout& layout) {
  const auto step =
      std::make_shared<StepGraph>(model, cache, eager.rows, step_columns(cache.length(), eager.rows, cache.capacity()),
                                  /*capture=*/true);
  Case graph = eager;
  graph.graph = true;
  graph.run = [step, tokens, layout] {
    step->run(tokens, layout.positions, layout.window);
    wait_for_device(true);
  };
  return graph;
}

// One case per chunk size and per tree shape, each a forward after the model's cached context. The token ids
// start where the model is; positions and the mask are built on the host and copied in each call, as in a run.
// On a GPU whose LibTorch captures CUDA graphs each case is the graph's replay (what a run on the GPU steps with),
// followed by its eager twin ("… eager", kind "chunk-eager" / "tree-eager"): the same forward launched op by op.
std::vector<Case> forward_cases(Transformer& model, KVCache& cache, const ForwardBenchOptions& o) {
  const int64_t V = model->config().vocab_size;
  const bool cuda = o.device == "cuda";
  const bool graphs = cuda && step_graphs_capture(model->embedding->weight.device());
  const torch::TensorOptions ids =
      torch::TensorOptions().dtype(torch::kInt64).device(model->embedding->weight.device());
  std::vector<Case> cases;
  // A tree of more nodes than a step's mask window (kMaskWindow) has no graph case: steps never take it.
  const auto add = [&](Case eager, const torch::Tensor& tokens, const AttentionLayout& layout) {
    if (graphs && layout.window.defined()) {
      cases.push_back(graph_case(model, cache, eager, tokens.reshape({-1}), layout));
      eager.name += " eager";
      eager.kind += "-eager";
    }
    cases.push_back(std::move(eager));
  };
  for (int64_t k : o.chunk_sizes) {
    const torch::Tensor tokens = torch::randint(V, {1, k}, ids);
    add({k == 1 ? "1-token" : "chunk K=" + std::to_string(k),
         "chunk",
         k,
         k,
         [&model, &cache, tokens, cuda] {
           model->forward(tokens, cache);
           wait_for_device(cuda);
         },
         {},
         {}},
        tokens, causal_layout(o.context, k));
  }
  for (const std::string& shape_text : o.trees) {
    const std::vector<int32_t> shape = parse_tree_shape(shape_text, "trees");
    const std::vector<int32_t> parents = tree_parents(shape);
    const int64_t n = static_cast<int64_t>(parents.size());
    const torch::Tensor tokens = torch::randint(V, {n}, ids);
    add({"tree " + shape_text,
         "tree",
         n,
         static_cast<int64_t>(shape.size()),
         [&model, &cache, tokens, parents, cuda] {
           model->forward_tree(tokens, parents, cache);
           wait_for_device(cuda);
         },
         {},
         {}},
        tokens, tree_layout(o.context, 0, parents));
  }
  return cases;
}

// B sequences at the cached context, their caches pooled (cache_pool.h) as a lockstep batch keeps them; kept alive
// by the cases that step them.
struct PooledBatch {
  std::vector<std::unique_ptr<KVCache>> caches;
  std::unique_ptr<CachePool> pool;
};

std::shared_ptr<PooledBatch> pooled_batch(Transformer& model, const KVCache& cache, int64_t batch, int64_t slots,
                                          bool capture) {
  const TransformerConfig& c = model->config();
  auto rig = std::make_shared<PooledBatch>();
  const auto [keys, values] = cache.copy_prefix(cache.length());
  std::vector<KVCache*> caches;
  for (int64_t b = 0; b < batch; ++b) {
    // Sized for the step (a new_cache would take max_seq_len slots a sequence before the pool takes them).
    rig->caches.push_back(std::make_unique<KVCache>(c.n_layers, 1, c.kv_heads(), slots, c.head_dim(),
                                                    model->embedding->weight.options().dtype(torch::kFloat32)));
    rig->caches.back()->use_libtorch_operations();
    rig->caches.back()->load_prefix(keys, values);
    caches.push_back(rig->caches.back().get());
  }
  rig->pool = std::make_unique<CachePool>(model, slots, caches, capture);
  return rig;
}

// Each chunk size and each tree shape as one step of B sequences (o.batches), every sequence K rows (or the tree's
// nodes) after the context: a CUDA graph's replay and its eager twin where graphs are captured, else the step alone
// (run eagerly, as on `libtorch`). Kinds "batch-chunk" and "batch-tree": what a lockstep batch's step costs beside the
// lone sequence's.
std::vector<Case> batch_cases(Transformer& model, const KVCache& cache, const ForwardBenchOptions& o, bool graphs) {
  const int64_t V = model->config().vocab_size;
  const bool cuda = o.device == "cuda";
  // The shapes a pooled step takes: at most 64 rows a sequence, and a tree within a mask window.
  struct Shape {
    std::string name, kind;
    int64_t rows, depth;
    AttentionLayout layout;
  };
  std::vector<Shape> shapes;
  for (int64_t k : o.chunk_sizes)
    if (k <= 64)
      shapes.push_back({k == 1 ? std::string("1-token") : "K=" + std::to_string(k), "batch-chunk", k, k,
                        causal_layout(o.context, k)});
  for (const std::string& shape_text : o.trees) {
    const std::vector<int32_t> shape = parse_tree_shape(shape_text, "trees");
    const std::vector<int32_t> parents = tree_parents(shape);
    const int64_t n = static_cast<int64_t>(parents.size());
    if (n <= 64 && n <= kMaskWindow)
      shapes.push_back({"tree " + shape_text, "batch-tree", n, static_cast<int64_t>(shape.size()),
                        tree_layout(o.context, 0, parents)});
  }
  int64_t widest = 1;
  for (const Shape& shape : shapes) widest = std::max(widest, shape.rows);
  std::vector<Case> cases;
  for (int64_t batch : o.batches) {
    // The eager steps share one pool; each shape's graph has a pool of its own (a pool keeps 8 shapes, and a graph
    // evicted between timed runs would be rebuilt and run eagerly under the graph's name).
    const auto eager = pooled_batch(model, cache, batch, o.context + widest, false);
    for (const Shape& shape : shapes) {
      std::vector<std::shared_ptr<PooledBatch>> rigs;
      if (graphs) rigs.push_back(pooled_batch(model, cache, batch, o.context + widest, true));
      rigs.push_back(eager);
      for (size_t r = 0; r < rigs.size(); ++r) {
        std::vector<RowSegment> segments;
        for (const auto& c : rigs[r]->caches)
          segments.push_back({torch::randint(V, {shape.rows}, torch::kInt64), shape.layout.positions, torch::Tensor(),
                              c.get(), shape.rows == 1 ? torch::Tensor() : shape.layout.window});  // on the host
        Case step{"batch " + std::to_string(batch) + " x " + shape.name,
                  shape.kind,
                  batch * shape.rows,
                  shape.depth,
                  [rig = rigs[r], segments, context = o.context, cuda] {
                    rig->pool->run(segments);
                    wait_for_device(cuda);
                    for (const auto& c : rig->caches) c->truncate(context);
                  },
                  {},
                  {}};
        step.batch = batch;
        step.graph = graphs && r == 0;
        if (graphs && r == 1) {
          step.name += " eager";
          step.kind += "-eager";
        }
        cases.push_back(std::move(step));
      }
    }
  }
  return cases;
}

// The floor: the bytes a 1-token step must read (every matrix once: the blocks' projections and the LM head /
// embedding), streamed from the same memory in the same rounds as the forwards. Adds those bytes to
// `weight_bytes`.
Case weight_read_case(Transformer& model, const ForwardBenchOptions& o, int64_t& weight_bytes) {
  const TransformerConfig& c = model->config();
  std::vector<std::pair<const uint8_t*, size_t>> weight_blocks;
  for (const auto& item : model->named_parameters()) {
    const torch::Tensor& p = item.value();
    // An untied embedding is read one row per token, not streamed.
    if (p.dim() >= 2 && (c.tie_embeddings || item.key() != "embedding.weight")) {
      weight_blocks.emplace_back(static_cast<const uint8_t*>(p.data_ptr()), p.numel() * p.element_size());
      weight_bytes += p.numel() * static_cast<int64_t>(p.element_size());
    }
  }
  if (o.device == "cuda") {
    // On a GPU: a device-to-device copy, which reads and writes each byte once, so half its time is one read at the
    // bandwidth the device reaches; of at most 1 GiB (two buffers beside a large model's weights would not fit),
    // scaled to the weights' bytes.
    const int64_t copied = std::min<int64_t>(weight_bytes, int64_t{1} << 30);
    const torch::TensorOptions bytes = torch::TensorOptions().dtype(torch::kUInt8).device(torch::kCUDA);
    const torch::Tensor from = torch::ones({copied}, bytes), to = torch::empty({copied}, bytes);
    Case copy{"weight read",
              "copy",
              0,
              0,
              [from, to]() mutable {
                to.copy_(from);
                wait_for_device(true);
              },
              {},
              {}};
    copy.group = "floor";
    copy.floor_scale = 0.5 * static_cast<double>(weight_bytes) / static_cast<double>(copied);
    return copy;
  }
  static volatile uint64_t sink = 0;
  Case floor{"weight read",
             "stream",
             0,
             0,
             [weight_blocks, threads = o.threads] { sink = sink ^ stream_read_parallel(weight_blocks, threads); },
             {},
             {}};
  floor.group = "floor";
  return floor;
}

json bench_model(const std::string& spec, const ForwardBenchOptions& o, std::ostream& os) {
  const std::string dir = spec.substr(spec.find(':') + 1);  // transformer:DIR (validate)
  LoadedCheckpoint loaded = load_checkpoint(dir, o.weights_dtype);
  Transformer& model = loaded.model;
  const bool cuda = o.device == "cuda";
  // As an inference model keeps its matrices: packed for the CPU's few-row kernel, or on the GPU as stored.
  // On the GPU with LibTorch's operations, as a session there runs them (step graphs need them).
  const int64_t moved_bytes = o.device == "cpu" ? pack_matrices_for_decoding(*model) : 0;
  if (o.device != "cpu") place_for_libtorch_operations(model, cuda ? torch::kCUDA : torch::kCPU);
  const long long huge_page_bytes = process_huge_page_bytes(), resident = process_resident_bytes();
  const bool huge_pages = decoding_weights_on_huge_pages();
  const TransformerConfig& c = model->config();
  int64_t max_rows = *std::max_element(o.chunk_sizes.begin(), o.chunk_sizes.end());
  for (const std::string& t : o.trees) max_rows = std::max<int64_t>(max_rows, tree_parents(parse_tree_shape(t)).size());
  if (o.context < 1 || o.context + max_rows > c.max_seq_len)
    fail_parameter("context", " ", o.context, " + ", max_rows, " rows must fit the model's max_seq_len ",
                   c.max_seq_len);

  c10::InferenceMode inference;
  torch::manual_seed(0);
  KVCache cache = model->new_cache(1);
  cache.reserve(o.context + max_rows);
  model->forward(torch::randint(c.vocab_size, {1, o.context}, torch::kInt64), cache);

  std::vector<Case> cases = forward_cases(model, cache, o);
  for (Case& cs : batch_cases(model, cache, o, cuda && step_graphs_capture(model->embedding->weight.device())))
    cases.push_back(std::move(cs));
  int64_t weight_bytes = 0;
  cases.push_back(weight_read_case(model, o, weight_bytes));
  const auto one = std::find_if(cases.begin(), cases.end(), [](const Case& cs) { return cs.name == "1-token"; });
  time_cases(cases, cache, o.context, o);
  const double base_wall = median(one->wall_us), base_cpu = median(one->cpu_us);
  const Case& floor_case = cases.back();
  const double floor_wall = median(floor_case.wall_us) * floor_case.floor_scale;
  const double bandwidth_gb_s = static_cast<double>(weight_bytes) / (floor_wall * 1e3);

  os << "\n"
     << spec << ": " << c.describe() << ", matrices " << dtype_string(model->embedding->weight.scalar_type()) << " ("
     << std::fixed << std::setprecision(1) << static_cast<double>(weight_bytes) / 1e6 << " MB), kernel "
     << skinny_isa_name(skinny_linear_isa()) << ", " << weight_layout_name(decoding_weight_layout())
     << " weights (huge pages " << (huge_pages ? "on" : "off") << ": " << format_bytes(moved_bytes) << " moved, "
     << (huge_page_bytes < 0 ? std::string("unknown") : format_bytes(huge_page_bytes)) << " granted), context "
     << o.context << ", " << o.threads << " thread(s)" << (cuda ? ", on " + cuda_device_name() : std::string()) << "\n";
  os << std::left << std::setw(20) << "forward" << std::right << std::setw(6) << "rows" << std::setw(13) << "wall us"
     << std::setw(10) << "vs 1-tok" << std::setw(12) << "CPU us" << std::setw(10) << "vs 1-tok" << std::setw(12)
     << "CPU us/row"
     << "   (medians)\n";
  json jcases = json::array();
  bool any_graph = false;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& cs = cases[i];
    if (cs.group == "floor") continue;  // reported below
    const double wall = median(cs.wall_us), cpu = median(cs.cpu_us);
    os << std::left << std::setw(20) << cs.name << std::right << std::setw(6) << cs.rows << std::fixed
       << std::setprecision(1) << std::setw(13) << wall << std::setprecision(2) << std::setw(9) << wall / base_wall
       << "x" << std::setprecision(1) << std::setw(12) << cpu << std::setprecision(2) << std::setw(9) << cpu / base_cpu
       << "x" << std::setprecision(1) << std::setw(12) << cpu / static_cast<double>(cs.rows) << "\n";
    jcases.push_back({{"name", cs.name},
                      {"kind", cs.kind},
                      {"rows", cs.rows},
                      {"positions", cs.depth},
                      {"iterations", cs.wall_us.size()},
                      {"median_wall_us", wall},
                      {"mean_wall_us", std::accumulate(cs.wall_us.begin(), cs.wall_us.end(), 0.0) /
                                           static_cast<double>(cs.wall_us.size())},
                      {"min_wall_us", *std::min_element(cs.wall_us.begin(), cs.wall_us.end())},
                      {"median_cpu_us", cpu},
                      {"ratio_wall_vs_1_token", wall / base_wall},
                      {"ratio_cpu_vs_1_token", cpu / base_cpu},
                      {"ratio_wall_vs_weight_read", wall / floor_wall}});
    if (cs.batch > 1) jcases.back()["batch"] = cs.batch;
    if (cs.graph) {  // beside its eager twin, the next case
      const double eager = median(cases[i + 1].wall_us);
      jcases.back()["cuda_graph"] = true;
      jcases.back()["eager_median_wall_us"] = eager;
      jcases.back()["graph_speedup"] = eager / wall;
      any_graph = true;
    }
  }
  os << std::setprecision(2)
     << (cuda ? "weight read (the floor: half a device-to-device copy): " : "weight read (the floor): ")
     << std::setprecision(1) << floor_wall << " us = " << std::setprecision(1) << bandwidth_gb_s
     << " GB/s; 1-token forward = " << std::setprecision(2) << base_wall / floor_wall << "x the floor\n";
  return {{"model", spec},
          {"config", to_json(c)},
          {"parameters", c.parameter_count()},
          {"description", c.describe()},
          {"one_token_median_wall_us", base_wall},
          {"one_token_median_cpu_us", base_cpu},
          {"weights_dtype", dtype_string(model->embedding->weight.scalar_type())},
          {"weight_bytes", weight_bytes},
          {"weight_read_median_wall_us", floor_wall},
          {"read_bandwidth_gb_s", bandwidth_gb_s},
          {"one_token_vs_weight_read", base_wall / floor_wall},
          {"cuda_graphs", any_graph},  // the cases are CUDA graphs' replays, each with an eager twin
          {"device", o.device},
          {"kernel_isa", skinny_isa_name(skinny_linear_isa())},
          {"weight_layout", weight_layout_name(decoding_weight_layout())},
          {"huge_pages", huge_pages ? "on" : "off"},          // panels, and SPECULA_HUGE_PAGES not off
          {"weight_bytes_moved_to_huge_pages", moved_bytes},  // 0 under one 2 MB page of matrices
          // the whole process after loading this model: what the kernel granted on 2 MB pages, its resident set
          {"process_huge_page_bytes_after_load", huge_page_bytes},
          {"process_resident_bytes_after_load", resident},
          {"cases", jcases}};
}

}  // namespace

json run_forward_benchmark(const std::vector<std::string>& specs, const ForwardBenchOptions& o, std::ostream& os) {
  o.validate(specs);
  if (o.device == "cuda" && !torch::cuda::is_available())
    fail_parameter("device", " cuda: this LibTorch (", TORCH_VERSION, ") sees no CUDA device (a CPU-only LibTorch, or ",
                   "no GPU); a GPU machine builds against its CUDA LibTorch with kernels/tools/gpu-build.sh");
  torch::set_num_threads(o.threads);
  const std::string load_before = load_averages();
  json models = json::array();
  for (const std::string& spec : specs) models.push_back(bench_model(spec, o, os));
  json machine = machine_json(o.threads, load_before);
  machine["torch_version"] = TORCH_VERSION;
  machine["torch_parallel_info"] = at::get_parallel_info();
  machine["skinny_kernel_isa"] = skinny_isa_name(skinny_linear_isa());
  if (o.device == "cuda")
    machine["gpu_name"] = cuda_device_name().empty() ? std::string("a CUDA device") : cuda_device_name();
  json report = {
      {"benchmark", "forward"},
      {"utc_time", utc_timestamp(false)},
      {"git_revision", git_revision()},
      {"machine", machine},
      {"options",
       {{"device", o.device},
        {"context", o.context},
        {"chunks", o.chunk_sizes},
        {"trees", o.trees},
        {"batches", o.batches},
        {"min_time_s", o.min_time_s},
        {"min_iterations", o.min_iterations}}},
      {"statistic",
       "medians over interleaved rounds of one forward each (InferenceMode, batch 1, cache truncated back after each) "
       "and of one read of the weight matrices (the floor): wall time, and process CPU time (all threads), which a "
       "loaded machine inflates far less"},
      {"models", models},
  };
  if (models.size() >= 2) {
    const double target_us = models[0]["one_token_median_cpu_us"].get<double>();
    const double draft_us = models[1]["one_token_median_cpu_us"].get<double>();
    const double flops_ratio = static_cast<double>(models[0]["parameters"].get<int64_t>()) /
                               static_cast<double>(models[1]["parameters"].get<int64_t>());
    report["draft_vs_target"] = {{"target", models[0]["model"]},
                                 {"draft", models[1]["model"]},
                                 {"target_over_draft_1_token_cpu_time", target_us / draft_us},
                                 {"target_over_draft_parameters", flops_ratio},
                                 {"c_draft_over_target", draft_us / target_us}};
    os << "\ndraft vs target, 1-token forward CPU time: the draft costs " << std::setprecision(3)
       << draft_us / target_us << " of the target (c in verify/ALGORITHMS.md §7); parameters " << std::setprecision(1)
       << flops_ratio << "x fewer\n";
  }
  return report;
}

}  // namespace specula::bench
