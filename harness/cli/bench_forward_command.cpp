// `specula bench forward`: the options of the forward benchmark (harness/bench/forward_benchmark.h), checked here,
// before the benchmark itself (a LibTorch entry, "run_forward_benchmark") loads the module; its table on stdout
// and its JSON report.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "harness/bench/forward_benchmark.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/experiment/cost_profile.h"
#include "harness/experiment/environment.h"
#include "harness/io/output_file.h"
#include "harness/models/registry/torch_module.h"
#include "kernels/shared/error.h"

namespace specula::cli {

int bench_forward_command(const Args& args) {
  const bench::ForwardBenchOptions d;
  po::options_description desc(
      "specula bench forward --model transformer:DIR [--model transformer:DIR2] [options]\n\n"
      "Times one forward of 1 token, K-token chunks and whole token trees (tree mask, one call) after the same\n"
      "cached context, and reports each as a ratio to the 1-token forward (median of the timed calls). With\n"
      "two models (target first, then draft), also reports the draft's per-token cost relative to the target.\n"
      "The report holds the cost profile `specula run --cost-profile` reads: these ratios, and each draft's.\n"
      "Options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("model", po::value<std::vector<std::string>>(), "transformer:DIR (repeatable)")
    ("device", po::value<std::string>()->default_value(d.device), "cpu | cuda (the model on the GPU in its stored dtype; needs a CUDA LibTorch) | libtorch (the GPU's path on the CPU)")
    ("threads", po::value<int>()->default_value(d.threads), "LibTorch/OpenMP threads (with 2, OMP_WAIT_POLICY=passive)")
    ("weights-dtype", po::value<std::string>()->default_value(d.weights_dtype), "matrices in memory: float32 | bfloat16 | float16 | auto (as stored)")
    ("context", po::value<int64_t>()->default_value(d.context), "cached tokens before each timed forward")
    ("chunks", po::value<std::string>()->default_value("1,2,4,8,16,32,64"), "chunk sizes K (must include 1)")
    ("trees", po::value<std::string>()->default_value("2,2,1;4,2,1"), "tree shapes separated by ';'")
    ("batches", po::value<std::string>()->default_value(""), "batch sizes B >= 2: each chunk as one pooled step of B sequences (cuda, libtorch)")
    ("min-time", double_value(d.min_time_s), "minimum seconds timed per case")
    ("min-iterations", po::value<int64_t>()->default_value(d.min_iterations), "minimum timed forwards per case")
    ("output", po::value<std::string>(), "JSON report (default results/bench/forward-<hostname>.json), with the cost profile")
    ("cost-profile", po::value<std::string>(), "also write the cost profile alone to this file (for run --cost-profile)");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "bench", "");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  bench::ForwardBenchOptions o;
  o.threads = vm["threads"].as<int>();
  o.device = vm["device"].as<std::string>();
  o.weights_dtype = vm["weights-dtype"].as<std::string>();
  o.context = vm["context"].as<int64_t>();
  o.min_time_s = vm["min-time"].as<double>();
  o.min_iterations = vm["min-iterations"].as<int64_t>();
  o.chunk_sizes.clear();
  for (Token k : parse_token_list(vm["chunks"].as<std::string>(), "chunks")) o.chunk_sizes.push_back(k);
  if (!vm["batches"].as<std::string>().empty())
    for (Token b : parse_token_list(vm["batches"].as<std::string>(), "batches")) o.batches.push_back(b);
  o.trees.clear();
  std::stringstream trees(vm["trees"].as<std::string>());
  for (std::string item; std::getline(trees, item, ';');)
    if (!item.empty()) o.trees.push_back(item);
  const std::vector<std::string> models =
      vm.count("model") ? vm["model"].as<std::vector<std::string>>() : std::vector<std::string>{};
  o.validate(models);
  const std::string profile_file = vm.count("cost-profile") ? vm["cost-profile"].as<std::string>() : "";
  if (!profile_file.empty()) {
    create_parent_folder(profile_file, "--cost-profile");
    check_output_file_writable(profile_file, "--cost-profile");
  }
  const std::filesystem::path output =
      vm.count("output") ? vm["output"].as<std::string>() : default_bench_report("forward");
  check_output_file_writable(output.string(), "--output", true);  // before the timings
  nlohmann::json report =
      torch_function<decltype(&bench::run_forward_benchmark)>("run_forward_benchmark")(models, o, std::cout);
  // The step costs as `run --cost-profile` reads them (harness/experiment/cost_profile.h): the report holds them,
  // and --cost-profile writes them alone.
  report["cost_profile"] = cost_profile_from_forward_report(report, o.device);
  create_parent_folder(output.string(), "--output");
  write_output_file(output.string(), report.dump(2) + "\n", "--output");
  std::cout << "wrote " << output.string() << "\n";
  if (!profile_file.empty()) {
    write_output_file(profile_file, report["cost_profile"].dump(2) + "\n", "--cost-profile");
    std::cout << "wrote " << profile_file << "\n";
  }
  return 0;
}

}  // namespace specula::cli
