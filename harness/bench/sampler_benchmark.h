// `specula bench sampler`: the sampler pipeline (process_batch + sample_rows) against the same pipeline
// written with plain LibTorch ops, a streaming softmax floor and a plain read of the logits, on Google
// Benchmark. This header keeps LibTorch out of its includers: only sampler_benchmark.cpp includes it,
// because a torch-including translation unit takes ~16 s and ~1 GB to compile.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specula::bench {

struct SamplerBenchOptions {
  int threads = 1;           // torch::set_num_threads and omp_set_num_threads
  double min_time_s = 0.5;   // Google Benchmark's minimum measuring time per case
  std::string filter = ".";  // POSIX extended regex searched in case names, e.g. "specula|torch_ops"
};

// The methods measured on each shape, in report order.
//   specula         process_batch (all stages) + sample_rows
//   torch_ops       the same stages in plain LibTorch ops + torch::multinomial
//   streaming_floor one numerically stable softmax over [B, V] (max, sum of exp, normalise), vectorised
//   torch_softmax   torch::softmax over [B, V] (ATen's vectorised kernel), as a second floor
//   read            a memcpy of [B, V]: what touching the logits once costs
extern const char* const kSamplerBenchMethods[5];

struct SamplerBenchCase {
  std::string name;    // Google Benchmark name, "sampler/<method>/V=<V>/B=<B>"
  std::string method;  // one of kSamplerBenchMethods
  int32_t vocab_size = 0;
  int32_t batch = 0;
  int64_t iterations = 0;
  double mean_wall_us = 0.0;  // wall time per batch
  double mean_cpu_us = 0.0;   // CPU time of the main thread per batch
  // The time the ratios use: CPU time with one thread (robust to other processes on a shared machine, and
  // then all the work runs on the main thread), wall time with more.
  double mean_us = 0.0;
  double bytes_per_second = 0.0;  // logits bytes (B * V * 4) per second of mean_us
};

// Does torch_ops compute the distribution Specula computes? Checked once per vocabulary size on a few rows.
struct SamplerBenchAgreement {
  int32_t vocab_size = 0;
  int32_t rows = 0;
  double max_abs_prob_diff = 0.0;  // max over rows and tokens of |p_specula - p_torch|
  int32_t support_mismatches = 0;  // tokens kept by one implementation and removed by the other
  int32_t min_support = 0;         // smallest number of surviving tokens in a row (checks filters bite)
  int32_t max_support = 0;
};

struct SamplerBenchResult {
  std::vector<SamplerBenchCase> cases;
  std::vector<SamplerBenchAgreement> agreement;
  std::string pipeline;       // the sampler chain, SamplerPipeline::describe()
  std::string workload;       // the parameters and histories, in words
  std::string torch_version;  // TORCH_VERSION
  std::string parallel_info;  // at::get_parallel_info(): OpenMP/MKL/threads as LibTorch sees them
};

// Registers the cases matching options.filter, runs them (Google Benchmark's console output goes to
// stdout) and returns one SamplerBenchCase per case that ran. Throws Error when a case fails.
SamplerBenchResult run_sampler_benchmarks(const SamplerBenchOptions& options);

}  // namespace specula::bench
