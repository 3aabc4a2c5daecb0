// `specula bench forward` (its options: harness/cli/bench_forward_command.cpp): what one target forward costs as
// a function of how many rows it runs: a 1-token decode step, a K-token chunk (K = 1, 2, 4, 8: chain
// verification) and a whole token tree with its ancestor mask (e.g. shapes 2,2,1 and 4,2,1), each after the same
// cached context, reported as ratios to the 1-token forward measured in the same run, and beside the floor: one
// read of the weight matrices. Those ratios are the t_target(n) / t_target(1) of the speculative speedup
// formulas (verify/ALGORITHMS.md §7), and what a cost profile holds (harness/experiment/cost_profile.h). Torch-free
// header; the work is in forward_benchmark.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace specula::bench {

struct ForwardBenchOptions {
  int threads = 1;                     // LibTorch/OpenMP threads of every forward and of the weight read
  std::string weights_dtype = "auto";  // float32 | bfloat16 | float16 | auto (as stored)
  int64_t context = 128;               // cached tokens before each timed forward
  double min_time_s = 0.5;             // seconds timed per case, at least
  int64_t min_iterations = 30;         // timed forwards per case, at least
  std::vector<int64_t> chunk_sizes = {1, 2, 4, 8, 16, 32, 64};  // must include 1: every ratio is against it
  std::vector<std::string> trees = {"2,2,1", "4,2,1"};
  // Batch sizes B >= 2: each chunk size again as one step of B sequences (a lockstep batch's step: the sessions'
  // caches pooled as one tensor's batch rows, cache_pool.h), a CUDA graph's replay and its eager twin on a GPU.
  // LibTorch's path only (cuda, libtorch).
  std::vector<int64_t> batches;
  // cpu: the decoding step as `generate` runs it (packed matrices, the few-row kernel). cuda: the model moved to
  // the GPU in its stored dtype (16-bit GEMMs), each forward waited for; the floor is then the weights' bytes over
  // a device-to-device copy's bandwidth measured in the same rounds. Needs a CUDA LibTorch. libtorch: the GPU's path
  // (LibTorch's operations, static-shape steps run eagerly) on the CPU.
  std::string device = "cpu";
  // ParameterError naming model (none, or not transformer:DIR), threads, min_iterations or chunks. Torch-free
  // (forward_bench_options.cpp): the command line checks before loading LibTorch.
  void validate(const std::vector<std::string>& models) const;
};

// Times every model (transformer:DIR; with two, the first is the target and the second its draft), prints a
// table per model to `os` and returns the report (machine, options, per-model cases; draft_vs_target with two).
nlohmann::json run_forward_benchmark(const std::vector<std::string>& models, const ForwardBenchOptions& options,
                                     std::ostream& os);

}  // namespace specula::bench
