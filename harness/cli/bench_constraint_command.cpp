// `specula bench constraint`: the cost of constrained decoding at a large vocabulary (harness/bench/
// constraint_benchmark.h), reduced to one JSON file under results/bench/ with the machine it ran on. Each figure is
// the median of the repetitions, with their least and greatest beside it; the ratios are to the sampler's row
// without the constraint, measured in the same run.
#include <algorithm>
#include <functional>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/bench/constraint_benchmark.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/experiment/environment.h"
#include "harness/io/output_file.h"

namespace specula::cli {
namespace {

using bench::ConstraintBenchSample;
using nlohmann::json;

// {median, min, max} of one figure over the repetitions (the median of an even count: the mean of the middle two).
json spread(const std::vector<ConstraintBenchSample>& samples,
            const std::function<double(const ConstraintBenchSample&)>& of) {
  std::vector<double> v;
  for (const ConstraintBenchSample& s : samples) v.push_back(of(s));
  return {{"median", bench::median_of(v)},
          {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

json case_json(const bench::ConstraintBenchCase& c) {
  auto figure = [&](auto of) { return spread(c.samples, of); };
  const double tokens = std::max(1, c.tokens);
  json samples = json::array();
  for (const ConstraintBenchSample& s : c.samples)
    samples.push_back({{"build_ms", s.build_ms},
                       {"first_walk_ms", s.first_walk_ms},
                       {"cached_mask_us_per_token", s.cached_mask_us},
                       {"cached_step_us_per_token", s.cached_step_us},
                       {"sampler_row_us", s.sampler_row_us},
                       {"constrained_row_us", s.constrained_row_us},
                       {"peak_resident_growth_bytes", s.peak_resident_growth_bytes}});
  const bool memory_known = std::all_of(c.samples.begin(), c.samples.end(), [](const ConstraintBenchSample& s) {
    return s.peak_resident_growth_bytes >= 0;
  });
  return {
      {"name", c.name},
      {"max_length", c.max_length},
      {"bad_words", c.bad_words},
      {"output_tokens", c.tokens},
      {"output_bytes", c.output_bytes},
      {"states_built", c.states_built},
      {"build_ms", figure([](const auto& s) { return s.build_ms; })},
      {"first_walk_ms", figure([](const auto& s) { return s.first_walk_ms; })},
      {"first_walk_us_per_token", figure([&](const auto& s) { return 1e3 * s.first_walk_ms / tokens; })},
      {"cached_mask_us_per_token", figure([](const auto& s) { return s.cached_mask_us; })},
      {"cached_step_us_per_token", figure([](const auto& s) { return s.cached_step_us; })},
      {"sampler_row_us", figure([](const auto& s) { return s.sampler_row_us; })},
      {"constrained_row_us", figure([](const auto& s) { return s.constrained_row_us; })},
      {"peak_resident_growth_mb",
       memory_known ? figure([](const auto& s) { return s.peak_resident_growth_bytes / 1048576.0; }) : json(nullptr)},
      {"ratios",
       {{"constrained_row_over_sampler_row",
         figure([](const auto& s) { return s.constrained_row_us / s.sampler_row_us; })},
        {"first_walk_per_token_over_sampler_row",
         figure([&](const auto& s) { return 1e3 * s.first_walk_ms / tokens / s.sampler_row_us; })},
        {"build_and_first_walk_over_output_sampling",
         figure([&](const auto& s) { return (s.build_ms + s.first_walk_ms) * 1e3 / (tokens * s.sampler_row_us); })}}},
      {"samples", samples}};
}

void print_table(const json& cases, std::ostream& os) {
  os << "\n"
     << std::left << std::setw(46) << "case" << std::right << std::setw(8) << "tokens" << std::setw(8) << "states"
     << std::setw(11) << "build ms" << std::setw(13) << "1st walk ms" << std::setw(14) << "row ratio" << std::setw(10)
     << "peak MB"
     << "\n";
  for (const json& c : cases) {
    const json& mb = c["peak_resident_growth_mb"];
    os << std::left << std::setw(46) << c["name"].get<std::string>() << std::right << std::setw(8)
       << c["output_tokens"].get<int>() << std::setw(8) << c["states_built"].get<int>() << std::fixed
       << std::setprecision(1) << std::setw(11) << c["build_ms"]["median"].get<double>() << std::setw(13)
       << c["first_walk_ms"]["median"].get<double>() << std::setprecision(3) << std::setw(13)
       << c["ratios"]["constrained_row_over_sampler_row"]["median"].get<double>() << "x" << std::setprecision(1)
       << std::setw(10);
    if (mb.is_null())
      os << "-";
    else
      os << mb["median"].get<double>();
    os << "\n";
  }
  os << "row ratio: the sampler's row with the constraint (its state cached) over the same row without it\n";
}

}  // namespace

int bench_constraint_command(const Args& args) {
  po::options_description desc(
      "specula bench constraint [options]\n\n"
      "Times constrained decoding on a JSON Schema at a large synthetic vocabulary: building the token\n"
      "automaton, the first walk of an output through it (states built on first use), the same walk again\n"
      "(states cached), and the sampler's row with the constraint against the same row without it; and the\n"
      "peak memory all that takes. One case per (max length, bad words) pair, each repeated, interleaved.\n"
      "Options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("vocab-size", po::value<int>()->default_value(128256), "tokens of the synthetic vocabulary (1024..1048576)")
    ("max-length", po::value<std::string>()->default_value("20,100"), "maxLength of every string field, one case each")
    ("bad-words", po::value<std::string>()->default_value("0,1000"), "bad words of two tokens, one case each")
    ("fields", po::value<int>()->default_value(12), "required string fields of the schema")
    ("repeats", po::value<int>()->default_value(3), "repetitions of every case (medians reported)")
    ("output", po::value<std::string>(), "JSON report (default results/bench/constraint-<hostname>.json)");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "bench", "");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  bench::ConstraintBenchOptions options;
  options.vocab_size = vm["vocab-size"].as<int>();
  options.max_lengths =
      parse_count_list(vm["max-length"].as<std::string>(), "max_length", "length", 1, bench::kMaxBenchMaxLength);
  options.bad_words =
      parse_count_list(vm["bad-words"].as<std::string>(), "bad_words", "count", 0, bench::kMaxBenchBadWords);
  options.fields = vm["fields"].as<int>();
  options.repeats = vm["repeats"].as<int>();
  bench::check_constraint_bench_options(options);
  const std::string output = vm.count("output") ? vm["output"].as<std::string>() : default_bench_report("constraint");
  check_output_file_writable(output, "--output", true);  // before the timings

  const std::string load_before = load_averages();
  const bench::ConstraintBenchResult result = bench::run_constraint_benchmark(options);
  json cases = json::array();
  for (const auto& c : result.cases) cases.push_back(case_json(c));
  const json report = {
      {"benchmark", "constraint"},
      {"utc_time", utc_timestamp(false)},
      {"git_revision", git_revision()},
      {"machine", machine_json(1, load_before)},
      {"options",
       {{"vocab_size", options.vocab_size},
        {"max_lengths", options.max_lengths},
        {"bad_words", options.bad_words},
        {"fields", options.fields},
        {"repeats", options.repeats}}},
      {"time_basis", "CPU time of the calling thread (everything runs on it; immune to other processes)"},
      {"pipeline", result.pipeline},
      {"workload", result.workload},
      {"figures",
       {{"build_ms",
         "TokenConstraint::from_json_schema: the schema's regex, its byte DFA, the token trie and the "
         "first liveness search"},
        {"first_walk_ms",
         "allowed() and next_state() along the output the first time: each new state's mask is "
         "built then (the draws' scans of the mask are not timed)"},
        {"cached_mask_us_per_token", "allowed() along the same output again, every state built"},
        {"cached_step_us_per_token", "next_state() along it again"},
        {"sampler_row_us",
         "SamplerPipeline::process of one row without the constraint, each position's history "
         "the output before it (the baseline)"},
        {"constrained_row_us", "the same rows with the constraint, its states built"},
        {"peak_resident_growth_mb",
         "VmHWM after the first walk less VmRSS before the build (null where the "
         "kernel cannot reset the peak)"}}},
      {"cases", cases},
  };
  create_parent_folder(output, "--output");
  write_output_file(output, report.dump(2) + "\n", "--output");
  print_table(cases, std::cout);
  std::cout << "wrote " << output << "\n";
  return 0;
}

}  // namespace specula::cli
