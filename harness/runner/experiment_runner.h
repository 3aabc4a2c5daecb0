// `specula run`: runs an experiment's sweep — the autoregressive baseline and every speculative setting
// in the same process, over the prompts and repetitions — into a results folder:
//   results/NAME/<UTC time>-<git sha>[-shard-i-of-N]/
//     config.resolved.ini  env.json  records.jsonl  summary.csv  (+ plots from `specula plot`)
#pragma once

#include <string>
#include <vector>

namespace specula {

struct RunOptions {
  std::vector<std::string> overrides;  // --set section.key=value
  int shard_index = 1, shard_count = 1;
  bool quiet = false;
  std::string command_line;
};

// Returns the results folder. Records are flushed as they are produced, so an interrupted run keeps them.
std::string run_experiment(const std::string& experiment_path, const RunOptions& options);

// `specula merge`: combines the records of shard folders (baselines deduplicated) into `output`, with a
// fresh summary; the config and environment of the first shard are copied.
void merge_results(const std::vector<std::string>& shard_dirs, const std::string& output);

// Loads the prompts of an experiment as token ids (text prompts through the target's tokenizer).
std::vector<std::vector<int32_t>> load_prompts(const struct ExperimentConfig& config, const std::string& target_spec);

}  // namespace specula
