// The Google Benchmark glue `bench sampler` and `bench verify` share: the option checks, the case filter (a
// POSIX extended regex searched in our case names), registration, and the runs kept for the JSON report.
#pragma once

#include <benchmark/benchmark.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

namespace specula::bench {

// One timed run of a case, and its mean times per iteration.
struct CaseRun {
  std::string name;  // the registered name
  int64_t iterations = 0;
  double mean_wall_us = 0.0;
  double mean_cpu_us = 0.0;
  double mean_us = 0.0;  // CPU time with one thread (immune to other processes), wall time with more
};

// The options' checks alone (ParameterError naming threads, min_time or filter), for a caller that checks before it
// loads what the benchmark needs (bench sampler: the LibTorch module).
void check_benchmark_options(int threads, double min_time_s, const std::string& filter);

class BenchmarkCases {
 public:
  // ParameterError naming threads, min_time or filter for a bad value. Starts Google Benchmark with no case.
  BenchmarkCases(const char* program, int threads, double min_time_s, const std::string& filter);
  // Registers the case unless the filter leaves it out; returns whether it was registered.
  bool add(const std::string& name, std::function<void(benchmark::State&)> body);
  // Runs every registered case (the console table as they go) and returns their runs in order. None registered:
  // a ParameterError naming the filter.
  std::vector<CaseRun> run();

 private:
  std::string program_;  // Google Benchmark keeps argv[0]: it must live as long as the cases run
  int threads_;
  double min_time_s_;
  std::string filter_text_;
  std::regex filter_;
  int registered_ = 0;
};

}  // namespace specula::bench
