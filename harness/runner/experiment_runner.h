// `specula run`: runs an experiment's sweep — the autoregressive baseline and every speculative setting
// in the same process, over the prompts and repetitions — into a results folder (results_folder.h), timing
// each speculative generation beside a baseline generation of the same prompt. What a setting becomes is
// setting_configs.h's; the folder's lifecycle (status, resume, merge) results_folder.h's.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kernels/shared/error.h"

namespace specula {

struct RunOptions {
  std::vector<std::string> overrides;  // --set section.key=value
  // The command-line option that gave an override's key, where it is not --set (load_experiment's override_options).
  std::map<std::string, std::string> override_options;
  int shard_index = 1, shard_count = 1;
  bool quiet = false;
  std::string command_line;
  // A results folder to continue (interrupted, preempted or killed): its config.resolved.ini and shard line
  // replace the experiment file, records already written are kept and skipped, and the rest are run with the
  // same seeds, so the records are those of an uninterrupted run. Relative paths in the configuration are
  // read from the current folder, as in the original run.
  std::string resume_dir;
};

// A run stopped by SIGINT or SIGTERM: the record in progress was finished, the summary of the records so far
// written and the folder's status says "interrupted (...)". `signal` is the signal's number.
struct RunInterrupted : Error {
  RunInterrupted(const std::string& what, int signal_number) : Error(what), signal(signal_number) {}
  int signal;
};

// Returns the results folder, created for this run alone (a suffix -2, -3, ... when the name is taken). Its
// `status` file says running, then complete | interrupted (SIGINT|SIGTERM) | failed: <error>. Records are
// flushed as they are produced, so an interrupted run keeps them.
std::string run_experiment(const std::string& experiment_path, const RunOptions& options);

}  // namespace specula
