// `specula bench end-to-end`: the experiment runner on experiments/bench-end-to-end.ini (every bundled drafter x
// verifier against autoregressive decoding, T = 0 and 0.8), reduced to one JSON file under results/bench/
// with the machine it ran on: per setting the measured speedups (whole run, and the decoding loop without
// the prompt) beside Leviathan et al.'s prediction and the cost model that adds the measured verification
// cost (harness/experiment/summary.h defines each number).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/experiment/environment.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "harness/io/output_file.h"
#include "harness/runner/experiment_runner.h"
#include "harness/runner/results_folder.h"
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
            {"decode_tokens_per_s", number(r.decode_tokens_per_s)}};
  if (r.baseline) return j;
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

}  // namespace

int bench_end_to_end(const Args& args) {
  po::options_description desc("specula bench end-to-end [--experiment FILE] [--set section.key=value ...]\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("experiment", po::value<std::string>()->default_value("experiments/bench-end-to-end.ini"), "experiment file")
    ("set", po::value<std::vector<std::string>>()->composing(), "override a value: section.key=value (repeatable)")
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
  if (vm.count("cost-profile"))
    options.overrides.push_back("experiment.cost_profile=" + vm["cost-profile"].as<std::string>());
  options.command_line = "specula bench end-to-end";
  for (const std::string& a : args) options.command_line += " " + a;
  const std::string experiment = vm["experiment"].as<std::string>();
  const std::string load_before = load_averages();
  const std::string dir = run_experiment(experiment, options);
  const std::optional<CostProfile> profile = folder_cost_profile(dir);
  const std::vector<SummaryRow> rows = summarize(read_records(dir + "/records.jsonl"), profile);
  // The run's own env.json (threads, BLAS, library versions) inside the report's machine block.
  std::ifstream env_file(dir + "/env.json");
  const json environment = json::parse(env_file, nullptr, /*allow_exceptions=*/false);
  if (environment.is_discarded()) fail("bench end-to-end: cannot read ", dir, "/env.json");
  json machine = machine_json(environment.value("threads", 0), load_before);
  machine["environment"] = environment;

  json report = {{"benchmark", "end-to-end"},      {"experiment", experiment},         {"results_dir", dir},
                 {"git_revision", git_revision()}, {"time_utc", utc_timestamp(false)}, {"machine", machine},
                 {"settings", json::array()}};
  const SummaryRow* best = nullptr;  // the highest decoding speedup at T = 0
  for (const SummaryRow& r : rows) {
    report["settings"].push_back(row_json(r));
    if (!r.baseline && setting_value(r, "sampling.temperature") == "0" &&
        (!best || r.decode_speedup > best->decode_speedup))
      best = &r;
  }
  if (best) report["best_at_temperature_0"] = row_json(*best);
  if (profile)
    report["cost_profile"] = {{"file", profile->file}, {"machine", profile->machine}, {"device", profile->device}};

  const std::string out =
      vm.count("output") ? vm["output"].as<std::string>() : "results/bench/end-to-end-" + hostname() + ".json";
  create_parent_folder(out, "--output");
  write_output_file(out, report.dump(2) + "\n", "--output");

  print_summary_table(rows, std::cout, profile);
  std::cout << "speedup: whole run; decode: the decoding loop without the prompt (both means of ratios within "
               "pairs, each speculative run timed beside a baseline run of the same prompt);\npredicted: Leviathan et "
               "al. from alpha and c (chains); cost model: tau / (draft + verify cost in 1-token target calls); drift: "
               "the repetitions differ beyond chance (F-test at 1%); results: "
            << dir << "\nwrote " << out << "\n";
  return 0;
}

}  // namespace specula::cli
