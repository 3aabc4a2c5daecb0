// A run's results folder and its lifecycle, apart from running the settings (experiment_runner.cpp):
//   results/NAME/<UTC time>-<git sha>[-shard-i-of-N][-2, -3, ... when the name was taken]/
//     status  config.resolved.ini  env.json  inputs.json  records.jsonl  summary.csv  plots/  [cost-profile.json]
// `status` is one line: running (pid P on HOST) | complete | interrupted (SIGINT|SIGTERM) | failed: <error>
// | incomplete (merged with --allow-incomplete).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "harness/experiment/cost_profile.h"
#include "harness/experiment/run_record.h"

namespace specula {

// A folder of its own: `base`, or base-2, base-3, ... when another run took that name first (two runs started
// in the same second). Creating the directory is the claim, so two processes never share one.
std::filesystem::path create_results_folder(const std::filesystem::path& base);

// The folder's status line (see above); read_status gives "" when the folder has no status file.
void write_status(const std::filesystem::path& dir, const std::string& status);
std::string read_status(const std::filesystem::path& dir, const std::string& what);
// The status of a run in progress names its process, so that `--resume` can tell a live run from a dead one.
std::string running_status();
// Refuses to resume a folder that a live `specula` process on this machine is still writing: two processes
// appending to one records.jsonl would interleave their records. A run recorded on another machine cannot be
// checked from here; it is resumed with a warning (a preempted Slurm task's process is gone).
void check_not_running(const std::filesystem::path& dir, const std::string& status);

// The cost profile a run was given ([experiment] cost_profile), which the run copies into its folder as
// cost-profile.json when it starts, so that every summary of the folder (the run's, an interrupted run's, a
// merge's, `specula run`'s table) predicts with the same one. None when the folder has none.
std::optional<CostProfile> folder_cost_profile(const std::filesystem::path& dir);
void write_folder_cost_profile(const std::filesystem::path& dir, const CostProfile& profile);
// DIR/summary.csv from `records`, with the folder's cost profile.
void write_folder_summary(const std::filesystem::path& dir, const std::vector<RunRecord>& records);

// The records written so far (none when there is no records.jsonl).
std::vector<RunRecord> records_so_far(const std::filesystem::path& dir);
// A resumed run's folder: its records.jsonl cut after the last whole line (a process killed in the middle of
// a write leaves part of one). Reads only the file's end.
void drop_partial_record(const std::filesystem::path& dir);

// A shard's resolved configuration (the file `path`) without its "; shard = i/N" line, and that line's i and N
// (0, 0: none). A bad line is an error naming the file, not the --shard flag.
std::pair<std::string, std::pair<int, int>> split_shard_line(const std::string& path);
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

// What a folder's summary.csv covers, from check_summary_covers_folder.
struct SummaryCoverage {
  int64_t rows = 0;        // settings in summary.csv
  int64_t configured = 0;  // settings config.resolved.ini describes (its shard's, for a shard)
  std::string status;      // the status line, "" without a status file
  bool complete = false;   // every configured setting is summarised and the status (if any) is complete
  // The summarised settings with fewer records than a whole setting has (partial_settings), each as "ID (R of N
  // records)": an interrupted run's setting in progress, whose row looks like any other.
  std::vector<std::string> partial;
  // False for a folder without records.jsonl (a benchmark's, which keeps its summary and report alone): its summary
  // cannot be checked against the run, and is plotted as it is only with allow_incomplete.
  bool checked = true;
};

// The settings of `records` with fewer records than `whole` (a run's prompts x repetitions; 0: the most records any
// setting has). Each as "ID (R of N records)", in the order of the summary.
std::vector<std::string> partial_settings(const std::vector<RunRecord>& records, int64_t whole);
// "a, b, c": a list of partial_settings for a message.
std::string join_items(const std::vector<std::string>& items);

// Before plotting: summary.csv must be whole (a header, at least one row, every row as many fields as the
// header, a newline after the last) and hold one row per setting of records.jsonl; and, unless
// `allow_incomplete`, the run must be complete: its status (where there is one) "complete", and as many rows
// as config.resolved.ini's sweep has settings. Anything else is an Error naming the file and what is missing,
// so no plot is drawn from a summary that silently misses settings.
SummaryCoverage check_summary_covers_folder(const std::string& dir, bool allow_incomplete);

}  // namespace specula
