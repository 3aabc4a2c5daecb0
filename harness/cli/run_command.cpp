// `specula run`, `specula merge` and `specula plot`: experiments from the shell.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "harness/experiment/sweep.h"
#include "harness/io/log.h"
#include "harness/io/stop_signals.h"
#include "harness/runner/experiment_runner.h"
#include "harness/runner/results_folder.h"
#include "kernels/shared/error.h"

#ifndef SPECULA_SOURCE_DIR
#define SPECULA_SOURCE_DIR "."
#endif

namespace specula::cli {
namespace {

std::string join_args(const std::string& command, const Args& args) {
  std::string s = "specula " + command;
  for (const std::string& a : args) s += " " + a;
  return s;
}

// The options, with one positional argument stored as the option `name`; an option error is an Error.
po::variables_map parse_with_positional(const Args& args, const po::options_description& desc, const char* name) {
  po::positional_options_description positional;
  positional.add(name, 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what());
  }
  return vm;
}

// Runs argv[0] (searched on PATH) with these arguments and waits for it; "" when it exits with 0, else what went
// wrong. No shell: a folder whose name holds a quote, a space or a '$' is one argument like any other.
std::string run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (const int err = posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ); err != 0)
    return std::string("cannot start it: ") + std::strerror(err);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return std::string("cannot wait for it: ") + std::strerror(errno);
  if (WIFEXITED(status)) return WEXITSTATUS(status) == 0 ? "" : "exit status " + std::to_string(WEXITSTATUS(status));
  return WIFSIGNALED(status) ? std::string("killed by ") + strsignal(WTERMSIG(status)) : "stopped";
}

}  // namespace

int plot_results(const std::string& dir, bool quiet, bool allow_incomplete) {
  // Nothing is drawn from a summary that is cut or misses settings (results_folder.h).
  const SummaryCoverage coverage = check_summary_covers_folder(dir, allow_incomplete);
  if (!coverage.checked)
    log(LogLevel::warn, dir, " has no records.jsonl: plotting the ", coverage.rows,
        " settings of its summary.csv as they are, unchecked against a run");
  else if (!coverage.complete)
    log(LogLevel::warn, dir, " is not complete (status: ", coverage.status.empty() ? "none" : coverage.status,
        "): plotting the ", coverage.rows, " of ", coverage.configured, " settings its summary holds",
        coverage.partial.empty() ? "" : "; these rest on part of their records: " + join_items(coverage.partial));
  // Debian's python3 has matplotlib; a python3 earlier on PATH (e.g. a pyenv shim) may not.
  const char* env_python = std::getenv("SPECULA_PYTHON");
  const std::string python =
      env_python ? env_python : (std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3");
  const char* env_script = std::getenv("SPECULA_PLOT_SCRIPT");
  const std::string script = env_script ? env_script : SPECULA_SOURCE_DIR "/experiments/plot.py";
  if (!std::filesystem::exists(script)) fail("plot script not found: ", script, " (set SPECULA_PLOT_SCRIPT)");
  std::vector<std::string> argv = {python, script, dir};
  if (quiet) argv.push_back("--quiet");
  if (const std::string why = run_program(argv); !why.empty()) {
    std::string command;
    for (const std::string& a : argv) command += (command.empty() ? "" : " ") + ("'" + a + "'");
    fail("plotting failed (", command, ": ", why, "); ", dir, "/summary.csv and the records are unchanged");
  }
  return 0;
}

int run_command(const Args& args) {
  po::options_description desc(
      "specula run EXPERIMENT.ini [--set section.key=value ...] [options]\n"
      "specula run --resume RESULTS_DIR [options]\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("experiment", po::value<std::string>(), "experiment file (INI)")
    ("set", po::value<std::vector<std::string>>()->composing(), "override a value: section.key=value (repeatable)")
    ("shard", po::value<std::string>(), "run the i-th of N deterministic slices of the sweep: i/N")
    ("resume", po::value<std::string>(), "continue the interrupted run in this results folder (no experiment file)")
    ("cost-profile", po::value<std::string>(), "another machine's step costs (bench forward's report or profile): the summary adds each setting's speedup there (= --set experiment.cost_profile=FILE)")
    ("no-plots", po::bool_switch(), "do not plot at the end (run `specula plot DIR` later)")
    ("log-level", po::value<std::string>(), "error | warn | info | debug (default info, or $SPECULA_LOG_LEVEL)")
    ("quiet,q", po::bool_switch(), "no progress output; only errors are logged (and a resumed folder another host may be writing)");
  // clang-format on
  const po::variables_map vm = parse_with_positional(args, desc, "experiment");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!vm.count("experiment") && !vm.count("resume"))
    fail("give an experiment file: specula run experiments/NAME.ini (or --resume RESULTS_DIR)");
  if (vm.count("experiment") && vm.count("resume"))
    fail("--resume RESULTS_DIR continues that run as it was configured: give no experiment file");
  if (vm.count("resume") && vm.count("shard")) fail("--resume: the shard is the one the run was started with");
  if (vm.count("resume") && vm.count("cost-profile"))
    fail("--resume: the cost profile is the one the run was started with (its cost-profile.json)");
  RunOptions options;
  if (vm.count("resume")) options.resume_dir = vm["resume"].as<std::string>();
  if (vm.count("set")) options.overrides = vm["set"].as<std::vector<std::string>>();
  if (vm.count("cost-profile")) {
    options.overrides.push_back("experiment.cost_profile=" + vm["cost-profile"].as<std::string>());
    options.override_options["experiment.cost_profile"] = "--cost-profile";
  }
  if (vm.count("shard"))
    std::tie(options.shard_index, options.shard_count) = parse_shard(vm["shard"].as<std::string>());
  options.quiet = vm["quiet"].as<bool>();
  if (vm.count("log-level")) set_log_level(parse_log_level(vm["log-level"].as<std::string>()));
  if (options.quiet) set_log_level(LogLevel::error);
  options.command_line = join_args("run", args);
  // A reader of the run's output that goes away (`| head`) fails the writes to it, not the run: from the first line
  // logged, before the results folder exists, to the table printed at the end (the results are in the folder).
  std::signal(SIGPIPE, SIG_IGN);
  std::string dir;
  try {
    dir = run_experiment(vm.count("experiment") ? vm["experiment"].as<std::string>() : "", options);
  } catch (const RunInterrupted& e) {
    std::cerr << "specula run: " << e.what() << "\n";
    return end_by_signal(e.signal);  // a shell reports 130 for SIGINT, 143 for SIGTERM
  }
  // A shard (started with --shard, or resumed from a shard's folder) is plotted after the merge, not alone.
  const bool plot = !vm["no-plots"].as<bool>() && options.shard_count == 1 && !is_shard_folder(dir);
  if (plot) plot_results(dir, options.quiet, false);
  if (!options.quiet) {
    std::cout << "\n";
    const std::optional<CostProfile> profile = folder_cost_profile(dir);
    const std::vector<RunRecord> records = read_records(dir + "/records.jsonl");
    print_summary_table(summarize(records, profile), std::cout, profile);
    // What the speedup column is, as the summary computed it (harness/experiment/summary.h).
    const bool paired = std::any_of(records.begin(), records.end(), [](const RunRecord& r) { return r.pair.present; });
    const bool lockstep = std::any_of(records.begin(), records.end(), [](const RunRecord& r) { return r.lockstep; });
    const bool beam = std::any_of(records.begin(), records.end(), [](const RunRecord& r) {
      return r.setting.count("draft.method") && r.setting.at("draft.method") == "beam";
    });
    std::cout << "decode speedup: the decoding loop without the prompt, "
              << (!paired    ? "the setting's rate over its baseline's per repetition (paired_timing = false), 95% "
                               "interval over repetitions"
                  : lockstep ? "mean of the ratios within pairs (each lockstep batch timed beside a baseline batch of "
                               "the same prompts), 95% interval over repetitions (one batch each)"
                             : "mean of the ratios within pairs (each speculative run timed beside a baseline run of "
                               "the same prompt), 95% interval over prompts")
              << (beam && paired ? "; beam search, not paired: its rate over its baseline's per repetition, 95% "
                                   "interval over repetitions"
                                 : "")
              << "\n\n";
  }
  std::cout << "results: " << dir << "\n  summary: " << dir << "/summary.csv\n";
  if (plot) std::cout << "  plots:   " << dir << "/plots/\n";
  return 0;
}

int merge_command(const Args& args) {
  po::options_description desc("specula merge SHARD_DIR... --output DIR\n\nOptions");
  desc.add_options()("help,h", "show this help")("shards", po::value<std::vector<std::string>>(), "shard folders")(
      "output", po::value<std::string>(), "merged results folder (not one of the shards)")(
      "allow-incomplete", "merge shards that are interrupted or missing; the merged status says so");
  po::positional_options_description positional;
  positional.add("shards", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(desc).positional(positional).run(), vm);
  } catch (const po::error& e) {
    fail(e.what());
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!vm.count("shards") || !vm.count("output")) fail("usage: specula merge SHARD_DIR... --output DIR");
  merge_results(vm["shards"].as<std::vector<std::string>>(), vm["output"].as<std::string>(),
                vm.count("allow-incomplete") > 0);
  std::cout << "merged: " << vm["output"].as<std::string>() << "/summary.csv\n";
  return 0;
}

int plot_command(const Args& args) {
  po::options_description desc(
      "specula plot RESULTS_DIR [--quiet] [--allow-incomplete]\n  writes PNG and SVG plots into RESULTS_DIR/plots/ "
      "after checking that summary.csv is whole and covers the run\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("results", po::value<std::string>(), "the results folder")
    ("quiet,q", po::bool_switch(), "no progress output")
    ("allow-incomplete", po::bool_switch(), "plot an interrupted run's summary (the settings it holds)");
  // clang-format on
  const po::variables_map vm = parse_with_positional(args, desc, "results");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  if (!vm.count("results"))  // an error of the command's own (exit 1), as `run` with no file
    fail("give a results folder: specula plot RESULTS_DIR (`specula plot --help` lists the options)");
  return plot_results(vm["results"].as<std::string>(), vm["quiet"].as<bool>(), vm["allow-incomplete"].as<bool>());
}

}  // namespace specula::cli
