// `specula run`: runs an experiment's sweep — the autoregressive baseline and every speculative setting
// in the same process, over the prompts and repetitions — into a results folder:
//   results/NAME/<UTC time>-<git sha>[-shard-i-of-N][-2, -3, ... when the name was taken]/
//     status  config.resolved.ini  env.json  records.jsonl  summary.csv  (+ plots from `specula plot`)
#pragma once

#include <string>
#include <vector>

#include "kernels/shared/error.h"

namespace specula {

struct RunOptions {
  std::vector<std::string> overrides;  // --set section.key=value
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

// Whether `dir` holds one shard of a sweep (its config.resolved.ini has a "; shard = i/N" line, N > 1): a
// shard's results are plotted after the merge, not alone.
bool is_shard_folder(const std::string& dir);

// `specula merge`: combines the records of shard folders (baselines deduplicated) into `output`, with a
// fresh summary; the config and environment of the first shard are copied. Refused, naming the folder: a
// shard whose status is not complete (unless allow_incomplete: the merged status then says so), shards
// whose resolved configurations differ apart from their shard line, a shard count other than their N, an
// index given twice, and an output that is one of the inputs.
void merge_results(const std::vector<std::string>& shard_dirs, const std::string& output,
                   bool allow_incomplete = false);

// Loads the prompts of an experiment as token ids (text prompts through the target's tokenizer).
std::vector<std::vector<int32_t>> load_prompts(const struct ExperimentConfig& config, const std::string& target_spec);

}  // namespace specula
