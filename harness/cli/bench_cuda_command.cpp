// `specula bench sampler|verify --device cuda`: the command line of the CUDA kernels' benchmarks; the timing
// itself is kernels/cuda_bench.h.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <tuple>

#include "harness/bench/torch_sampler_baseline.h"
#include "harness/bench/torch_verify_baseline.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/io/output_file.h"
#include "harness/models/registry/torch_module.h"
#include "kernels/cuda_bench.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"

namespace specula::cli {

bool bench_wants_cuda(const Args& args) {
  bool cuda = false;
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--device" && i + 1 < args.size())
      cuda = parse_device(args[i + 1]) == Device::cuda;
    else if (args[i].rfind("--device=", 0) == 0)
      cuda = parse_device(args[i].substr(9)) == Device::cuda;
  }
  return cuda;
}

Args without_device_option(const Args& args) {
  Args out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i > 0 && args[i] == "--device" && i + 1 < args.size() && parse_device(args[i + 1]) == Device::cpu) {
      ++i;
      continue;
    }
    if (i > 0 && args[i].rfind("--device=", 0) == 0 && parse_device(args[i].substr(9)) == Device::cpu) continue;
    out.push_back(args[i]);
  }
  return out;
}

namespace {

// Times each sampler case's and chain verification case's work in LibTorch's CUDA operations
// (harness/bench/torch_sampler_baseline.h, torch_verify_baseline.h), once per setting and shape (the unstaged and
// one-block variants share their case's). Without a CUDA LibTorch the kernels' figures stand alone and the report says
// why.
void add_libtorch_baseline(CudaBenchReport& report, int iterations) {
  try {
    const auto sampler = torch_function<decltype(&bench::time_torch_sampler)>("time_torch_sampler");
    const auto chain = torch_function<decltype(&bench::time_torch_chain_verify)>("time_torch_chain_verify");
    std::map<std::tuple<int, int32_t, int32_t, int32_t>, double> measured;  // setting (-1: chain), V, B, K
    for (CudaBenchCase& c : report.cases) {
      const bool is_chain = c.kernel.rfind("verify/chain", 0) == 0;
      if (c.setting < 0 && !is_chain) continue;
      const auto key = std::make_tuple(c.setting, c.vocab, c.batch, c.width);
      if (!measured.count(key))
        measured[key] = is_chain ? chain(c.vocab, c.batch, c.width, "cuda", iterations)
                                 : sampler(sampler_bench_settings()[static_cast<size_t>(c.setting)], c.vocab, c.batch,
                                           "cuda", iterations);
      c.libtorch_us = measured[key];
    }
    report.libtorch_baseline = "measured";
  } catch (const Error& e) {
    report.libtorch_baseline = std::string("not measured: ") + e.what();
    std::cerr << "bench " << report.what << " --device cuda: LibTorch baseline " << report.libtorch_baseline << "\n";
  }
}

}  // namespace

int bench_cuda_command(const Args& args) {
  if (args.empty()) fail("bench --device cuda: which benchmark? (sampler or verify)");
  CudaBenchOptions o;
  o.what = args[0];
  if (o.what != "sampler" && o.what != "verify")
    fail("bench --device cuda: unknown benchmark '", o.what, "' (known: sampler, verify)");
  const std::string default_output = "results/bench/" + o.what + "-cuda-" + cuda_bench_host_name() + ".json";
  po::options_description desc(
      "specula bench " + o.what + " --device cuda [options]\n\nTimes the CUDA " +
      (o.what == "verify" ? "chain, block and tree verification kernels" : std::string("fused sampler")) +
      " with CUDA events on synthetic inputs (V in {32000, 128256}, B in {1, 64}) and"
      " reports GB/s against the device's peak bandwidth. Options");
  desc.add_options()("help,h", "this help")("device", po::value<std::string>(), "cuda")(
      "iterations", po::value<int>(&o.iterations)->default_value(o.iterations),
      "timed launches per case (after 3 warm-up launches)")(
      "no-flush-l2", po::bool_switch(), "keep L2 warm: time launches back to back (default: overwrite L2 before each)")(
      "no-libtorch-baseline", po::bool_switch(),
      "skip the same work timed in LibTorch's CUDA operations beside each sampler and chain case")(
      "output", po::value<std::string>()->default_value(default_output), "JSON report");
  const po::variables_map vm = parse_options(Args(args.begin() + 1, args.end()), desc, "", "");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (o.iterations < 1) fail("--iterations: must be >= 1, got ", o.iterations);
  o.flush_l2 = !vm["no-flush-l2"].as<bool>();
  const std::string output = vm["output"].as<std::string>();
  check_output_file_writable(output, "--output", true);  // before the timings
  CudaBenchReport report = run_cuda_bench(o);
  if (!vm["no-libtorch-baseline"].as<bool>()) add_libtorch_baseline(report, o.iterations);
  print_cuda_bench(report, std::cout);
  create_parent_folder(output, "--output");
  write_output_file(output, cuda_bench_json(report), "--output");
  std::cout << "wrote " << output << "\n";
  return 0;
}

}  // namespace specula::cli
