// `specula bench end-to-end`: the experiment runner on experiments/bench-end-to-end.ini (every bundled drafter x
// verifier against autoregressive decoding, T = 0 and 0.8), reduced to one JSON file under results/bench/
// with the machine it ran on: per setting the measured speedups (whole run, and the decoding loop without
// the prompt) beside Leviathan et al.'s prediction and the cost model that adds the measured verification
// cost (harness/experiment/summary.h defines each number). --device sets the run's device (cuda: the models, sampler
// and verifier on the GPU). --batch B1,B2,..: one run per batch size B, each repetition of a setting decoding B
// prompts together in lockstep ([experiment] lockstep, num_prompts = B) against autoregressive decoding of the same
// batch: the report's batch_curve is the best speedup at each batch size.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/experiment/environment.h"
#include "harness/experiment/experiment_config.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "harness/io/output_file.h"
#include "harness/runner/experiment_runner.h"
#include "harness/runner/results_folder.h"
#include "harness/runner/setting_configs.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

#ifndef SPECULA_SOURCE_DIR
#define SPECULA_SOURCE_DIR "."
#endif

namespace specula::cli {
namespace {

using nlohmann::json;

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string setting_value(const SummaryRow& row, const std::string& key) {
  const auto it = row.setting.find(key);
  return it == row.setting.end() ? "" : it->second;
}

json row_json(const SummaryRow& r) {
  json j = {{"drafter", setting_value(r, "draft.drafter")},
            {"method", r.baseline ? "ar" : setting_value(r, "draft.method")},
            {"num_draft_tokens", setting_value(r, "draft.num_draft_tokens")},
            {"tree", setting_value(r, "draft.tree")},
            {"temperature", setting_value(r, "sampling.temperature")},
            {"tokens_per_s", number(r.tokens_per_s)},
            {"decode_tokens_per_s", number(r.decode_tokens_per_s)},
            {"device_waits_per_step", number(r.device_waits_per_step)},
            {"step_graph_replay_share", number(r.step_graph_replay_share)},
            {"step_graphs_evicted_per_step", number(r.step_graphs_evicted_per_step)}};
  if (r.baseline) return j;
  // Only a sweep that names a schedule has it: rows of a fixed K read as before.
  if (const std::string schedule = setting_value(r, "draft.num_draft_tokens_schedule"); !schedule.empty())
    j["num_draft_tokens_schedule"] = schedule;
  if (const std::string threshold = setting_value(r, "draft.confidence_threshold"); !threshold.empty())
    j["confidence_threshold"] = std::stod(threshold);
  j.update({{"alpha", number(r.alpha)},
            {"tau", number(r.tau)},
            {"c", number(r.c)},
            {"verify_cost", number(r.verify_cost)},
            {"speedup", number(r.speedup)},
            {"speedup_ci", {number(r.speedup_ci_low), number(r.speedup_ci_high)}},
            {"decode_speedup", number(r.decode_speedup)},
            {"decode_speedup_ci", {number(r.decode_speedup_ci_low), number(r.decode_speedup_ci_high)}},
            {"predicted_speedup", number(r.predicted_speedup)},
            {"decode_over_predicted", number(r.decode_speedup / r.predicted_speedup)},
            {"cost_model_speedup", number(r.cost_model_speedup)},
            {"decode_over_cost_model", number(r.decode_speedup / r.cost_model_speedup)},
            {"greedy_lossless", r.greedy_lossless},
            {"pairs", r.pairs},
            {"pair_load_average", number(r.pair_load_average)},
            {"pair_drift", r.pair_drift}});
  if (!r.profile_draft_source.empty())
    j.update({{"profile_verify_cost", number(r.profile_verify_cost)},
              {"profile_draft_cost", number(r.profile_draft_cost)},
              {"profile_draft_source", r.profile_draft_source},
              {"profile_speedup", number(r.profile_speedup)},
              {"decode_over_profile", number(r.decode_speedup / r.profile_speedup)}});
  return j;
}

// --batch "1,4,16,64": whole numbers in [1, kMaxBatch], refused by name before any work.
constexpr int kMaxBatch = 4096;
std::vector<int> parse_batches(const std::string& text) {
  return parse_count_list(text, "batch", "batch size", 1, kMaxBatch);
}

// One run's summary as the report holds it: every setting, and the best decoding speedup at T = 0 and at T = 0.8.
json run_json(const std::vector<SummaryRow>& rows) {
  json out = {{"settings", json::array()}};
  for (const char* temperature : {"0", "0.8"}) {
    const SummaryRow* best = nullptr;
    for (const SummaryRow& r : rows)
      if (!r.baseline && std::isfinite(r.decode_speedup) &&
          std::strtod(setting_value(r, "sampling.temperature").c_str(), nullptr) == std::strtod(temperature, nullptr) &&
          (!best || r.decode_speedup > best->decode_speedup))
        best = &r;
    if (best) out[std::string("best_at_temperature_") + temperature] = row_json(*best);
  }
  for (const SummaryRow& r : rows) out["settings"].push_back(row_json(r));
  return out;
}

}  // namespace

int bench_end_to_end(const Args& args) {
  po::options_description desc(
      "specula bench end-to-end [--experiment FILE] [--device D] [--batch B,B,..] [--set section.key=value ...]\n\n"
      "Options");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("experiment", po::value<std::string>()->default_value("experiments/bench-end-to-end.ini"), "experiment file")
    ("set", po::value<std::vector<std::string>>()->composing(), "override a value: section.key=value (repeatable)")
    ("device", po::value<std::string>(), "where rows are sampled and verified (cpu | cuda | cuda-host; cuda also runs the models there): [experiment] device")
    ("batch", po::value<std::string>(), "batch sizes, e.g. 1,4,16,64: one run each, its settings' prompts decoded together in lockstep (num_prompts = B), each against autoregressive decoding of the same batch")
    ("cost-profile", po::value<std::string>(), "a machine's step costs (bench forward): each setting's speedup there beside the measured one")
    ("output", po::value<std::string>(), "JSON report (default results/bench/end-to-end-<hostname>.json)");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "bench");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  RunOptions options;
  if (vm.count("set")) options.overrides = vm["set"].as<std::vector<std::string>>();
  if (vm.count("device")) {
    const std::string device = vm["device"].as<std::string>();
    try {
      parse_device(device);
    } catch (const Error&) {
      fail_parameter("device", ": '", device, "' is not cpu, cuda or cuda-host");
    }
    options.overrides.push_back("experiment.device=" + device);
    options.override_options["experiment.device"] = "--device";
  }
  if (vm.count("cost-profile")) {
    options.overrides.push_back("experiment.cost_profile=" + vm["cost-profile"].as<std::string>());
    options.override_options["experiment.cost_profile"] = "--cost-profile";
  }
  options.command_line = "specula bench end-to-end";
  for (const std::string& a : args) options.command_line += " " + a;
  const std::string experiment = vm["experiment"].as<std::string>();
  const std::vector<int> batches =
      vm.count("batch") ? parse_batches(vm["batch"].as<std::string>()) : std::vector<int>{};
  bool lockstep_set = false;  // `--set experiment.lockstep=true` beside --batch, which sets it too
  if (!batches.empty()) {
    // --batch sets these itself for each run: a --set of them would be overridden without a word. The --set values
    // as load_experiment reads them (its spellings, its origins).
    const ExperimentConfig given = load_experiment(experiment, options.overrides, options.override_options);
    const auto set = [&](const char* key) {
      return given.origin.count(key) && given.origin.at(key).rfind("--set", 0) == 0;
    };
    for (const char* key : {"experiment.num_prompts", "experiment.lockstep"})
      if (set(key) && (std::string(key) == "experiment.num_prompts" || !given.lockstep))
        fail("--set ", key, ": --batch sets it for each run (num_prompts = the batch size, lockstep = true)");
    lockstep_set = set("experiment.lockstep");
    // Checked before any run: the largest batch's prompts must come from the corpus (num_prompts sets the batch).
    std::vector<std::string> largest = options.overrides;
    largest.push_back("experiment.num_prompts=" + std::to_string(*std::max_element(batches.begin(), batches.end())));
    const ExperimentConfig config = load_experiment(experiment, largest, options.override_options);
    if (config.prompts_from_corpus.empty())
      fail_parameter("batch",
                     " needs an experiment whose prompts come from a corpus ([experiment] prompts_from_corpus: "
                     "num_prompts is the batch size); ",
                     experiment, " names a prompts file");
    // The largest batch's prompts exist (the corpus has that many places to take one from).
    with_source("--batch " + std::to_string(*std::max_element(batches.begin(), batches.end())),
                [&] { return load_prompts(config, config.target); });
  }
  const std::string load_before = load_averages();
  const std::string out = vm.count("output") ? vm["output"].as<std::string>() : default_bench_report("end-to-end");
  create_parent_folder(out, "--output");
  check_output_file_writable(out, "--output");  // before the runs

  // Each run: its summary and folder. Without --batch, one run as the experiment says.
  struct Run {
    int batch = 0;
    std::string dir;
    std::vector<SummaryRow> rows;
  };
  std::vector<Run> runs;
  for (size_t i = 0; i < std::max<size_t>(1, batches.size()); ++i) {
    RunOptions o = options;
    Run run;
    if (!batches.empty()) {
      run.batch = batches[i];
      o.overrides.push_back("experiment.num_prompts=" + std::to_string(run.batch));
      if (!lockstep_set) o.overrides.push_back("experiment.lockstep=true");
      std::cout << "== batch " << run.batch << "\n" << std::flush;
    }
    run.dir = run_experiment(experiment, o);
    run.rows = summarize(read_records(run.dir + "/records.jsonl"), folder_cost_profile(run.dir));
    runs.push_back(std::move(run));
  }
  const std::string& dir = runs.back().dir;
  const std::optional<CostProfile> profile = folder_cost_profile(dir);
  // The run's own env.json (threads, BLAS, library versions) inside the report's machine block.
  std::ifstream env_file(dir + "/env.json");
  json environment;
  try {
    environment = parse_bounded_json(env_file);
  } catch (const json::exception& e) {
    fail("bench end-to-end: cannot read ", dir, "/env.json: ", e.what());
  }
  json machine = machine_json(environment.value("threads", 0), load_before);
  machine["environment"] = environment;

  json report = {{"benchmark", "end-to-end"},
                 {"experiment", experiment},
                 {"git_revision", git_revision()},
                 {"time_utc", utc_timestamp(false)},
                 {"device", load_experiment(dir + "/config.resolved.ini", {}).device},
                 {"machine", machine}};
  if (batches.empty()) {
    report["results_dir"] = dir;
    report.update(run_json(runs[0].rows));
  } else {
    // The curve every serving paper plots: the best speedup at each batch size, against batched autoregressive
    // decoding of the same prompts.
    report["batches"] = json::array();
    report["batch_curve"] = json::array();
    for (const Run& run : runs) {
      json entry = {{"batch", run.batch}, {"results_dir", run.dir}};
      entry.update(run_json(run.rows));
      json point = {{"batch", run.batch}};
      for (const char* key : {"best_at_temperature_0", "best_at_temperature_0.8"})
        if (entry.contains(key))
          point[key] = {{"drafter", entry[key]["drafter"]},
                        {"method", entry[key]["method"]},
                        {"decode_speedup", entry[key]["decode_speedup"]},
                        {"decode_speedup_ci", entry[key]["decode_speedup_ci"]}};
      report["batches"].push_back(entry);
      report["batch_curve"].push_back(point);
    }
  }
  if (profile)
    report["cost_profile"] = {{"file", profile->file}, {"machine", profile->machine}, {"device", profile->device}};
  write_output_file(out, report.dump(2) + "\n", "--output");

  for (const Run& run : runs) {
    if (run.batch > 0) std::cout << "\nbatch " << run.batch << " (" << run.dir << ")\n";
    print_summary_table(run.rows, std::cout, folder_cost_profile(run.dir));  // each run's own copy, named by its folder
  }
  if (!batches.empty()) {
    std::cout << "\nbest decoding speedup against autoregressive decoding of the same batch:\n"
              << std::left << std::setw(8) << "batch" << std::setw(14) << "T = 0"
              << "T = 0.8\n";
    for (const json& point : report["batch_curve"]) {
      std::cout << std::setw(8) << point["batch"].get<int>();
      for (const char* key : {"best_at_temperature_0", "best_at_temperature_0.8"}) {
        std::ostringstream cell;
        if (point.contains(key) && point[key]["decode_speedup"].is_number())
          cell << std::fixed << std::setprecision(2) << point[key]["decode_speedup"].get<double>() << "x";
        else
          cell << "-";
        std::cout << std::setw(14) << cell.str();
      }
      std::cout << "\n";
    }
  }
  std::cout << "speedup: whole run; decode: the decoding loop without the prompt (both means of ratios within "
               "pairs, each speculative run timed beside a baseline run of the same prompt";
  if (!batches.empty()) std::cout << ", a batch beside a baseline batch of the same prompts";
  std::cout << ");\npredicted: Leviathan et al. from alpha and c (chains); cost model: tau / (draft + verify cost in "
               "1-token target calls); drift: the repetitions differ beyond chance (F-test at 1%); results: "
            << dir << "\nwrote " << out << "\n";
  return 0;
}

}  // namespace specula::cli
