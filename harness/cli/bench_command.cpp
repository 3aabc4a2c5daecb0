// `specula bench <what>`: benchmarks (not tests). Results go to results/bench/ as JSON, with the machine,
// build and revision they ran on, because a timing means nothing without them; every claim is a ratio
// against a baseline measured in the same run.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "harness/bench/benchmark_cases.h"
#include "harness/bench/sampler_benchmark.h"
#include "harness/bench/verify_benchmark.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/experiment/environment.h"
#include "harness/experiment/experiment_config.h"
#include "harness/io/output_file.h"
#include "harness/models/registry/torch_module.h"
#include "harness/runner/setting_configs.h"
#include "kernels/shared/error.h"
#include "kernels/shared/thread_limit.h"

namespace specula::cli {
namespace {

using nlohmann::json;

// The machine block of the Google Benchmark reports (sampler, verify). Debian's libbenchmark is built
// without NDEBUG and says so; that affects its timer bookkeeping between measured batches, not the code
// inside them.
json google_benchmark_machine_json(int threads, const std::string& load_before) {
  json machine = machine_json(threads, load_before);
  machine["google_benchmark"] = "libbenchmark 1.7.1 (Debian)";
  return machine;
}

// torch_ops / specula (how much faster Specula is than plain LibTorch ops) and specula / streaming_floor
// (how far Specula is from one softmax pass over the logits), per shape.
json ratios_json(const bench::SamplerBenchResult& result) {
  std::map<std::pair<int32_t, int32_t>, std::map<std::string, double>> by_shape;
  for (const auto& c : result.cases) by_shape[{c.vocab_size, c.batch}][c.method] = c.mean_us;
  json ratios = json::array();
  for (const auto& [shape, times] : by_shape) {
    json r = {{"vocab_size", shape.first}, {"batch", shape.second}};
    auto ratio = [&](const char* num, const char* den) -> json {
      const auto n = times.find(num), d = times.find(den);
      if (n == times.end() || d == times.end()) return nullptr;
      return n->second / d->second;
    };
    r["torch_ops_over_specula"] = ratio("torch_ops", "specula");
    r["specula_over_streaming_floor"] = ratio("specula", "streaming_floor");
    r["specula_over_read"] = ratio("specula", "read");
    r["streaming_floor_over_torch_softmax"] = ratio("streaming_floor", "torch_softmax");
    ratios.push_back(r);
  }
  return ratios;
}

// The targets, at the largest shape (V = 128256, B = 64), judged on this run's ratios.
json targets_json(const json& ratios) {
  json targets = json::object();
  for (const auto& r : ratios) {
    if (r["vocab_size"] != 128256 || r["batch"] != 64) continue;
    auto judge = [](const json& measured, double bound, bool at_least) -> json {
      if (measured.is_null()) return {{"bound", bound}, {"measured", nullptr}, {"met", nullptr}};
      const double v = measured.get<double>();
      return {{"bound", bound}, {"measured", v}, {"met", at_least ? v >= bound : v <= bound}};
    };
    targets["torch_ops_over_specula_at_least"] = judge(r["torch_ops_over_specula"], 10.0, true);
    targets["specula_over_streaming_floor_at_most"] = judge(r["specula_over_streaming_floor"], 2.0, false);
  }
  return targets;
}

void print_ratio_table(const json& ratios, std::ostream& os) {
  auto cell = [](const json& v) {
    std::ostringstream s;
    if (v.is_null())
      s << "-";
    else
      s << std::fixed << std::setprecision(2) << v.get<double>() << "x";
    return s.str();
  };
  os << "\n"
     << std::left << std::setw(8) << "V" << std::setw(5) << "B" << std::right << std::setw(20) << "torch_ops/specula"
     << std::setw(24) << "specula/streaming_floor" << std::setw(15) << "specula/read"
     << "\n";
  for (const auto& r : ratios)
    os << std::left << std::setw(8) << r["vocab_size"].get<int>() << std::setw(5) << r["batch"].get<int>() << std::right
       << std::setw(20) << cell(r["torch_ops_over_specula"]) << std::setw(24) << cell(r["specula_over_streaming_floor"])
       << std::setw(15) << cell(r["specula_over_read"]) << "\n";
  os << "targets at V=128256, B=64: torch_ops/specula >= 10x, specula/streaming_floor <= 2x\n";
}

int bench_sampler(const Args& args) {
  po::options_description desc(
      "specula bench sampler [options]\n\n"
      "Times the sampler pipeline (all stages, then one draw per row) against the same pipeline in plain\n"
      "LibTorch ops, a streaming softmax floor and a plain read, for V in {32000, 128256}, B in {1, 64}.\n"
      "On the GPU: `specula bench sampler --device cuda` (its options: `specula bench sampler --device cuda --help`).\n"
      "Options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("threads", po::value<int>()->default_value(1), "LibTorch and OpenMP threads (>1: set OMP_WAIT_POLICY=passive)")
    ("min-time", double_value(0.5), "minimum measuring time per case, seconds")
    ("output", po::value<std::string>(), "JSON report (default results/bench/sampler-<hostname>.json)")
    ("filter", po::value<std::string>()->default_value("."), "regex searched in sampler/<method>/V=<V>/B=<B>");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "bench", "");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  bench::SamplerBenchOptions options;
  options.threads = vm["threads"].as<int>();
  check_thread_count(options.threads);
  options.min_time_s = vm["min-time"].as<double>();
  options.filter = vm["filter"].as<std::string>();
  bench::check_benchmark_options(options.threads, options.min_time_s, options.filter);  // before loading LibTorch
  const std::filesystem::path output =
      vm.count("output") ? vm["output"].as<std::string>() : default_bench_report("sampler");
  check_output_file_writable(output.string(), "--output", true);  // before the timings
  if (options.threads > 1)
    std::cout << "note: with " << options.threads << " threads, OMP_WAIT_POLICY=passive is advised: LibTorch and "
              << "the pipeline share the OpenMP pool, and spinning idle workers steal the cores of the next region\n";

  const std::string load_before = load_averages();
  // The sampler benchmark times LibTorch's ops beside the pipeline: the LibTorch module's.
  const bench::SamplerBenchResult result =
      torch_function<decltype(&bench::run_sampler_benchmarks)>("run_sampler_benchmarks")(options);

  json cases = json::array();
  for (const auto& c : result.cases)
    cases.push_back({{"name", c.name},
                     {"method", c.method},
                     {"vocab_size", c.vocab_size},
                     {"batch", c.batch},
                     {"iterations", c.iterations},
                     {"mean_us_per_batch", c.mean_us},
                     {"mean_us_per_row", c.mean_us / c.batch},
                     {"mean_wall_us_per_batch", c.mean_wall_us},
                     {"mean_cpu_us_per_batch", c.mean_cpu_us},
                     {"logits_bytes_per_second", c.bytes_per_second}});
  json agreement = json::array();
  for (const auto& a : result.agreement)
    agreement.push_back({{"vocab_size", a.vocab_size},
                         {"rows", a.rows},
                         {"max_abs_prob_diff", a.max_abs_prob_diff},
                         {"support_mismatches", a.support_mismatches},
                         {"min_support", a.min_support},
                         {"max_support", a.max_support}});
  const json ratios = ratios_json(result);
  json sampler_machine = google_benchmark_machine_json(options.threads, load_before);
  sampler_machine["torch_version"] = result.torch_version;
  sampler_machine["torch_parallel_info"] = result.parallel_info;
  const json report = {
      {"benchmark", "sampler"},
      {"utc_time", utc_timestamp(false)},
      {"git_revision", git_revision()},
      {"machine", sampler_machine},
      {"options", {{"threads", options.threads}, {"min_time_s", options.min_time_s}, {"filter", options.filter}}},
      {"time_basis", options.threads > 1 ? "wall time per batch"
                                         : "CPU time of the main thread per batch (all work runs on it with one "
                                           "thread; immune to other processes on a shared machine)"},
      {"pipeline", result.pipeline},
      {"workload", result.workload},
      {"methods",
       {{"specula", "specula::process_batch (all stages) + specula::sample_rows"},
        {"torch_ops", "same stages in plain LibTorch ops (gather/scatter, softmax, topk, sort+cumsum) + multinomial"},
        {"streaming_floor", "one stable softmax over [B, V]: max, exp, sum, normalise; vectorised, AVX2 clone"},
        {"torch_softmax", "at::_softmax_out over [B, V]"},
        {"read", "memcpy of [B, V]"}}},
      {"notes",
       {"with --threads > 1 set OMP_WAIT_POLICY=passive: LibTorch and the pipeline share the OpenMP pool and "
        "spinning idle workers steal the cores of the next parallel region",
        "torch_ops sorts whole rows for top-p, as Hugging Face's TopPLogitsWarper and vLLM's apply_top_k_top_p do",
        "agreement: torch_ops and specula on the same 4 rows per vocabulary, before sampling"}},
      {"agreement_torch_ops_vs_specula", agreement},
      {"cases", cases},
      {"ratios", ratios},
      {"targets_v128256_b64", targets_json(ratios)},
  };

  create_parent_folder(output.string(), "--output");
  write_output_file(output.string(), report.dump(2) + "\n", "--output");

  print_ratio_table(ratios, std::cout);
  for (const auto& a : result.agreement)
    std::cout << "agreement V=" << a.vocab_size << ": max |p_specula - p_torch| = " << a.max_abs_prob_diff << ", "
              << a.support_mismatches << " support mismatches, " << a.min_support << ".." << a.max_support
              << " tokens survive\n";
  std::cout << "wrote " << output.string() << "\n";
  return 0;
}

// One verification step per case over sampler passes per verified position, per (shape, V): the issue's
// target is at most 1.2 for chain, tree and block.
json verify_ratios_json(const bench::VerifyBenchResult& result) {
  std::map<std::pair<std::string, int32_t>, std::map<std::string, const bench::VerifyBenchCase*>> by_shape;
  for (const auto& c : result.cases) by_shape[{c.shape, c.vocab_size}][c.method] = &c;
  json ratios = json::array();
  for (const auto& [key, cases] : by_shape) {
    const auto base = cases.find("sampler_passes");
    for (const auto& [method, c] : cases) {
      if (method == "sampler_passes") continue;
      const double over = base == cases.end() ? std::nan("") : c->mean_us / base->second->mean_us;
      ratios.push_back({{"method", method},
                        {"shape", key.first},
                        {"vocab_size", key.second},
                        {"positions", c->positions},
                        {"step_us", c->mean_us},
                        {"step_us_per_position", c->mean_us / c->positions},
                        {"step_over_sampler_passes", base == cases.end() ? json(nullptr) : json(over)},
                        {"target_at_most", 1.2},
                        {"met", base == cases.end() ? json(nullptr) : json(over <= 1.2)}});
    }
  }
  return ratios;
}

int bench_verify(const Args& args) {
  po::options_description desc(
      "specula bench verify [options]\n\n"
      "Times one speculative verification step (target rows through the sampler pipeline, then the\n"
      "verifier) for chain and block at K in {1, 4, 8} and tree on shapes 2,2,1 and 4,2,1, for V in\n"
      "{32000, 128256}, against one sampler pass (pipeline + draw) per verified position.\n"
      "On the GPU: `specula bench verify --device cuda` (its options: `specula bench verify --device cuda --help`).\n"
      "Options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("threads", po::value<int>()->default_value(1), "OpenMP threads")
    ("min-time", double_value(0.5), "minimum measuring time per case, seconds")
    ("output", po::value<std::string>(), "JSON report (default results/bench/verify-<hostname>.json)")
    ("filter", po::value<std::string>()->default_value("."), "regex searched in verify/<method>/<shape>/V=<V>");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "bench", "");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  bench::VerifyBenchOptions options;
  options.threads = vm["threads"].as<int>();
  check_thread_count(options.threads);
  options.min_time_s = vm["min-time"].as<double>();
  options.filter = vm["filter"].as<std::string>();
  const std::filesystem::path output =
      vm.count("output") ? vm["output"].as<std::string>() : default_bench_report("verify");
  check_output_file_writable(output.string(), "--output", true);  // before the timings

  const std::string load_before = load_averages();
  const bench::VerifyBenchResult result = bench::run_verify_benchmarks(options);

  json cases = json::array();
  for (const auto& c : result.cases)
    cases.push_back({{"name", c.name},
                     {"method", c.method},
                     {"shape", c.shape},
                     {"vocab_size", c.vocab_size},
                     {"positions", c.positions},
                     {"iterations", c.iterations},
                     {"mean_us_per_step", c.mean_us},
                     {"mean_wall_us_per_step", c.mean_wall_us},
                     {"mean_cpu_us_per_step", c.mean_cpu_us}});
  json acceptance = json::array();
  for (const auto& a : result.acceptance)
    acceptance.push_back({{"method", a.method},
                          {"shape", a.shape},
                          {"vocab_size", a.vocab_size},
                          {"steps", a.steps},
                          {"mean_accepted", a.mean_accepted},
                          {"all_accepted_rate", a.all_accepted_rate}});
  const json ratios = verify_ratios_json(result);
  const json report = {
      {"benchmark", "verify"},
      {"utc_time", utc_timestamp(false)},
      {"git_revision", git_revision()},
      {"machine", google_benchmark_machine_json(options.threads, load_before)},
      {"options", {{"threads", options.threads}, {"min_time_s", options.min_time_s}, {"filter", options.filter}}},
      {"time_basis", options.threads > 1 ? "wall time per step"
                                         : "CPU time of the main thread per step (all work runs on it with one "
                                           "thread; immune to other processes on a shared machine)"},
      {"pipeline", result.pipeline},
      {"workload", result.workload},
      {"methods",
       {{"chain", "process_tree_rows + verify_chain (token-wise rejection sampling)"},
        {"block", "process_tree_rows + verify_block (block verification)"},
        {"tree", "process_tree_rows + verify_tree (recursive rejection sampling, i.i.d. siblings)"},
        {"sampler_passes", "SamplerPipeline::process + sample_categorical once per verified position"}}},
      {"cases", cases},
      {"acceptance", acceptance},
      {"ratios", ratios},
  };

  create_parent_folder(output.string(), "--output");
  write_output_file(output.string(), report.dump(2) + "\n", "--output");

  std::cout << "\n"
            << std::left << std::setw(8) << "method" << std::setw(14) << "shape" << std::setw(8) << "V" << std::right
            << std::setw(12) << "step us" << std::setw(20) << "step/sampler_passes"
            << "\n";
  for (const auto& r : ratios) {
    std::ostringstream ratio;
    if (r["step_over_sampler_passes"].is_null())
      ratio << "-";
    else
      ratio << std::fixed << std::setprecision(2) << r["step_over_sampler_passes"].get<double>() << "x";
    std::cout << std::left << std::setw(8) << r["method"].get<std::string>() << std::setw(14)
              << r["shape"].get<std::string>() << std::setw(8) << r["vocab_size"].get<int>() << std::right
              << std::setw(12) << std::fixed << std::setprecision(1) << r["step_us"].get<double>() << std::setw(20)
              << ratio.str() << "\n";
  }
  std::cout << "target: a step costs at most 1.2x the sampler passes of its verified positions\n";
  std::cout << "wrote " << output.string() << "\n";
  return 0;
}

}  // namespace

int bench_command(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: specula bench sampler|verify|forward|end-to-end|constraint [options]\n"
                 "         (`specula bench sampler --help` for the options)\n"
                 "       specula bench all   (each of them with its defaults, one after the other)\n";
    return args.empty() ? 2 : 0;
  }
  // The forward benchmark reads its own --device (the model on the CPU or on the GPU through LibTorch).
  if (args[0] == "forward") return bench_forward_command(Args(args.begin() + 1, args.end()));
  // So does end-to-end (the run's [experiment] device: the sampler and verifier on it, the models too with cuda).
  if (args[0] == "end-to-end") return bench_end_to_end(Args(args.begin() + 1, args.end()));
  // Constrained decoding's automaton runs on the host whatever the device: no --device.
  if (args[0] == "constraint") return bench_constraint_command(Args(args.begin() + 1, args.end()));
  // --device cuda: the CUDA kernels' benchmarks (kernels/cuda_bench.h); --device cpu is the default.
  if (bench_wants_cuda(args)) return bench_cuda_command(args);
  if (without_device_option(args) != args) return bench_command(without_device_option(args));
  if (args[0] == "sampler") return bench_sampler(Args(args.begin() + 1, args.end()));
  if (args[0] == "verify") return bench_verify(Args(args.begin() + 1, args.end()));
  if (args[0] == "all" && args.size() == 2 && (args[1] == "--help" || args[1] == "-h")) {
    std::cout << "specula bench all\n\nRuns sampler, verify, forward (the bundled target and draft), end-to-end ("
                 "experiments/bench-end-to-end.ini) and constraint with their defaults, one after the other, each "
                 "writing its default report (results/bench/<benchmark>-<hostname>.json). It takes no options.\n";
    return 0;
  }
  if (args[0] == "all" && args.size() > 1)
    fail("bench all takes no options (got '", args[1], "'); see bench all --help");
  if (args[0] == "all") {
    // Every default report checked before the first benchmark runs, not when its turn comes after the others; and
    // end-to-end's experiment with its prompts' file, which would otherwise be found missing after three benchmarks.
    for (const char* kind : {"sampler", "verify", "forward", "end-to-end", "constraint"}) default_bench_report(kind);
    check_prompts_readable(load_experiment("experiments/bench-end-to-end.ini", {}));
    for (const Args& a : {Args{"sampler"}, Args{"verify"},
                          Args{"forward", "--model", "transformer:results/models/target", "--model",
                               "transformer:results/models/draft"},
                          Args{"end-to-end"}, Args{"constraint"}}) {
      std::cout << "== specula bench " << a[0] << "\n" << std::flush;
      if (const int status = bench_command(a); status != 0) return status;
    }
    return 0;
  }
  fail("unknown benchmark '", args[0], "' (known: sampler, verify, forward, end-to-end, constraint, all)");
}

}  // namespace specula::cli
