#include "harness/bench/benchmark_cases.h"

#include "kernels/shared/error.h"

namespace specula::bench {
namespace {

// Google Benchmark's console output, plus a copy of every run for the JSON report.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  explicit CollectingReporter(OutputOptions options) : benchmark::ConsoleReporter(options) {}
  void ReportRuns(const std::vector<Run>& runs) override {
    benchmark::ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs)
      if (run.run_type == Run::RT_Iteration) runs_.push_back(run);
  }
  const std::vector<Run>& runs() const { return runs_; }

 private:
  std::vector<Run> runs_;
};

std::regex filter_regex(const std::string& filter) {
  try {
    return std::regex(filter, std::regex::extended);
  } catch (const std::regex_error& e) {
    fail_parameter("filter", ": '", filter, "' is not a regular expression: ", e.what());
  }
}

}  // namespace

void check_benchmark_options(int threads, double min_time_s, const std::string& filter) {
  if (threads < 1) fail_parameter("threads", " must be >= 1, got ", threads);
  if (!(min_time_s > 0.0)) fail_parameter("min_time", " must be > 0 seconds, got ", min_time_s);
  filter_regex(filter);
}

BenchmarkCases::BenchmarkCases(const char* program, int threads, double min_time_s, const std::string& filter)
    : program_(program), threads_(threads), min_time_s_(min_time_s), filter_text_(filter) {
  check_benchmark_options(threads, min_time_s, filter);
  // The filter is applied here, to our names: Google Benchmark's own filter sees suffixes such as
  // "/min_time:0.500/real_time" that would make an anchored regex miss.
  filter_ = filter_regex(filter);
  int argc = 1;
  char* argv[] = {program_.data(), nullptr};
  benchmark::Initialize(&argc, argv);
  benchmark::ClearRegisteredBenchmarks();
}

bool BenchmarkCases::add(const std::string& name, std::function<void(benchmark::State&)> body) {
  if (!std::regex_search(name, filter_)) return false;
  auto* bench = benchmark::RegisterBenchmark(name.c_str(), std::move(body));
  bench->Unit(benchmark::kMicrosecond)->MinTime(min_time_s_);
  // With one thread everything runs on the main thread, whose CPU time is immune to other processes on a shared
  // machine; with more, only wall time counts the workers.
  if (threads_ > 1) bench->UseRealTime();
  ++registered_;
  return true;
}

std::vector<CaseRun> BenchmarkCases::run() {
  if (registered_ == 0) fail_parameter("filter", " '", filter_text_, "' matches no benchmark case");
  CollectingReporter reporter(benchmark::ConsoleReporter::OO_Tabular);
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::ClearRegisteredBenchmarks();
  std::vector<CaseRun> out;
  for (const auto& run : reporter.runs()) {
    if (run.error_occurred) fail("benchmark ", run.benchmark_name(), " failed: ", run.error_message);
    CaseRun r;
    r.name = run.run_name.function_name;
    r.iterations = static_cast<int64_t>(run.iterations);
    r.mean_wall_us = run.real_accumulated_time / static_cast<double>(run.iterations) * 1e6;
    r.mean_cpu_us = run.cpu_accumulated_time / static_cast<double>(run.iterations) * 1e6;
    r.mean_us = threads_ > 1 ? r.mean_wall_us : r.mean_cpu_us;
    out.push_back(r);
  }
  return out;
}

}  // namespace specula::bench
