// `specula bench verify`: what one speculative verification step costs on the CPU (the target rows of the
// draft through the sampler pipeline, each with its own path history, then the verifier's decisions and
// draws), for chain and block verification at K in {1, 4, 8} and tree verification on two tree shapes, at
// V in {32000, 128256}. The baseline is plain decoding's sampler pass (pipeline + one draw) once per
// verified position, measured in the same run: a step that costs no more than that per position makes
// verification free beyond the sampling that decoding does anyway. Google Benchmark; torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specula::bench {

struct VerifyBenchOptions {
  int threads = 1;           // omp_set_num_threads (the verifiers are sequential; rows are not batched)
  double min_time_s = 0.5;   // Google Benchmark's minimum measuring time per case
  std::string filter = ".";  // POSIX extended regex searched in case names, e.g. "chain|sampler_passes"
};

// The methods measured on each draft shape, in report order: every lossless, non-greedy method of the
// verification methods' table (verify/verifiers/verify_methods.h; the greedy ones need temperature 0, the
// workload samples), each as process_tree_rows + its verifier, on chains or, for methods that verify trees, on
// tree shapes; then the baseline
//   sampler_passes  SamplerPipeline::process + sample_categorical, once per verified position
std::vector<std::string> verify_bench_methods();

struct VerifyBenchCase {
  std::string name;    // Google Benchmark name, "verify/<method>/<shape>/V=<V>"
  std::string method;  // one of verify_bench_methods()
  std::string shape;   // "K=4" (a chain of 4 drafts) or "tree=2,2,1"
  int32_t vocab_size = 0;
  int32_t positions = 0;  // verified positions per step: draft tokens + 1 (rows of the target)
  int64_t iterations = 0;
  double mean_wall_us = 0.0;  // wall time per step
  double mean_cpu_us = 0.0;   // CPU time of the main thread per step
  double mean_us = 0.0;       // CPU time with one thread, wall time with more (as `bench sampler`)
};

// What the steps of one shape did, from the same steps as the timed loop (outside it).
struct VerifyBenchAcceptance {
  std::string method;
  std::string shape;
  int32_t vocab_size = 0;
  int32_t steps = 0;
  double mean_accepted = 0.0;      // accepted draft tokens per step
  double all_accepted_rate = 0.0;  // fraction of steps that ended with a bonus token
};

struct VerifyBenchResult {
  std::vector<VerifyBenchCase> cases;
  std::vector<VerifyBenchAcceptance> acceptance;
  std::string pipeline;  // the target's sampler chain, SamplerPipeline::describe()
  std::string workload;  // logits, draft laws, histories, in words
};

// Registers the cases matching options.filter, runs them (Google Benchmark's console output goes to
// stdout) and returns one VerifyBenchCase per case that ran. Throws Error when a case fails.
VerifyBenchResult run_verify_benchmarks(const VerifyBenchOptions& options);

}  // namespace specula::bench
