#include "harness/runner/results_folder.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "harness/experiment/environment.h"
#include "harness/experiment/experiment_config.h"
#include "harness/experiment/summary.h"
#include "harness/experiment/sweep.h"
#include "harness/io/differing_lines.h"
#include "harness/io/input_file.h"
#include "harness/io/log.h"
#include "harness/io/output_file.h"
#include "harness/runner/run_inputs.h"
#include "kernels/shared/error.h"

namespace specula {
namespace fs = std::filesystem;
namespace {

// The records of a CSV text (RFC 4180: a quoted field may hold commas, newlines and doubled quotes), each as
// its number of fields; a text that ends inside a quoted field or without a newline ends with a cut record,
// reported as `cut`.
std::vector<int64_t> csv_field_counts(const std::string& text, bool& cut) {
  std::vector<int64_t> counts;
  int64_t fields = 1;
  bool quoted = false, started = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    started = true;
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        ++i;
      } else if (c == '"') {
        quoted = false;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      ++fields;
    } else if (c == '\n') {
      counts.push_back(fields);
      fields = 1;
      started = false;
    }
  }
  cut = quoted || started;
  if (cut) counts.push_back(fields);
  return counts;
}

// The settings config.resolved.ini (`config`, read from the folder `dir`) describes: its sweep, its shard's slice for a
// shard, one per beam search.
int64_t configured_settings(const fs::path& dir, const ExperimentConfig& config) {
  const std::pair<int, int> shard = split_shard_line((dir / "config.resolved.ini").string()).second;
  std::vector<Setting> settings = expand_sweep(config);
  if (shard.second > 1) settings = shard_of(settings, shard.first, shard.second);
  return static_cast<int64_t>(recorded_settings(settings).size());
}

// The folder's status line without its newline; "" without a status file.
std::string status_line(const fs::path& dir, const std::string& what) {
  std::string status = read_status(dir, what);
  if (!status.empty() && status.back() == '\n') status.pop_back();
  return status;
}

}  // namespace

fs::path create_results_folder(const fs::path& base) {
  fs::create_directories(base.parent_path());
  for (int n = 1; n < 10000; ++n) {
    const fs::path dir = n == 1 ? base : fs::path(base.string() + "-" + std::to_string(n));
    std::error_code ec;
    if (fs::create_directory(dir, ec)) return dir;
    if (ec) fail(dir.string(), ": cannot create the results folder: ", ec.message());
  }
  fail(base.string(), ": no free results folder name");
}

void write_status(const fs::path& dir, const std::string& status) {
  write_output_file((dir / "status").string(), status + "\n", "run");
}

std::string running_status() {
  return "running (pid " + std::to_string(static_cast<long>(getpid())) + " on " + hostname() + ")";
}

namespace {

// The process a status "running (pid P on HOST)" names, where it is a live `specula` on this machine (another process,
// as the command asking). A recycled process id belongs to some other program: only a live `specula` counts.
std::optional<long> live_run_process(const std::string& status) {
  long pid = 0;
  char host[256] = {};
  if (std::sscanf(status.c_str(), "running (pid %ld on %255[^)])", &pid, host) != 2) return std::nullopt;
  if (host != hostname() || pid <= 0 || pid == static_cast<long>(getpid())) return std::nullopt;
  const bool alive = kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  if (alive && (!comm || name == "specula")) return pid;
  return std::nullopt;
}

}  // namespace

void check_not_running(const fs::path& dir, const std::string& status) {
  long pid = 0;
  char host[256] = {};
  if (std::sscanf(status.c_str(), "running (pid %ld on %255[^)])", &pid, host) != 2) return;
  if (host != hostname()) {
    // Not refused: a node that died leaves such a status, and resuming elsewhere is how its run is finished.
    warn_unhidden(dir.string(), "'s status says it is running as process ", pid, " on ", host,
                  "; if that process is alive, both will write this folder");
    return;
  }
  if (const std::optional<long> live = live_run_process(status))
    fail_parameter("resume", ": ", dir.string(), " is still being written by process ", *live,
                   " on this machine (its status reads running); stop that run first");
}

namespace {

// "'temperature = 0.8' where the other has 'temperature = 0.5'": the first line two texts differ at.
std::string first_differing_line(const std::string& a, const std::string& b) {
  const auto lines = first_differing_lines(a, b);
  return lines ? "'" + lines->first + "' where the other has '" + lines->second + "'" : "no line";
}

}  // namespace

std::vector<RunRecord> records_so_far(const fs::path& dir) {
  return fs::exists(dir / "records.jsonl") ? read_records((dir / "records.jsonl").string()) : std::vector<RunRecord>{};
}

std::pair<std::string, std::pair<int, int>> split_shard_line(const std::string& path) {
  const std::string resolved = read_input_file(path, "the run's resolved configuration");
  std::istringstream in(resolved);
  std::string line, rest;
  std::pair<int, int> shard{0, 0};
  while (std::getline(in, line)) {
    if (line.rfind("; shard = ", 0) == 0) {
      shard = with_source(path, [&] { return parse_shard(line.substr(10)); });
      continue;
    }
    rest += line + "\n";
  }
  return {rest, shard};
}

void drop_partial_record(const fs::path& dir) {
  const fs::path path = dir / "records.jsonl";
  if (!fs::exists(path)) return;
  // Only the file's end is read: the last '\n' in its final block (a record is far shorter than the block).
  std::ifstream in = open_input_file(path.string(), "run --resume");
  const uintmax_t size = fs::file_size(path);
  uintmax_t whole = 0;
  for (uintmax_t end = size; end > 0 && whole == 0;) {
    const uintmax_t start = end > (1 << 16) ? end - (1 << 16) : 0;
    std::string block(end - start, '\0');
    in.seekg(static_cast<std::streamoff>(start));
    if (!in.read(block.data(), static_cast<std::streamsize>(block.size())))
      fail("run --resume: cannot read ", path.string());
    const size_t newline = block.rfind('\n');
    if (newline != std::string::npos) whole = start + newline + 1;
    end = start;
  }
  if (whole < size) fs::resize_file(path, whole);
}

bool is_shard_folder(const std::string& dir) {
  const fs::path resolved = fs::path(dir) / "config.resolved.ini";
  return fs::exists(resolved) && split_shard_line(resolved.string()).second.second > 1;
}

void merge_results(const std::vector<std::string>& shard_dirs, const std::string& output, bool allow_incomplete) {
  if (shard_dirs.empty()) fail("merge: no shard folders given");
  std::error_code ec;
  for (const std::string& d : shard_dirs)
    if (fs::exists(output) && fs::equivalent(d, output, ec))
      fail("merge: --output '", output, "' is one of the shards; give a new folder");
  // Another run's results are never written over: its records would be gone before anyone noticed.
  for (const char* file : {"records.jsonl", "status", "summary.csv"})
    if (fs::exists(fs::path(output) / file, ec))
      fail("merge: --output '", output, "' already holds a results folder (", file, "); give a new folder");
  check_output_folder_writable(output, "merge: --output");
  // Validate every input before writing anything.
  std::string config;
  int count = 0;
  std::set<int> indices;
  bool incomplete = false;
  std::optional<nlohmann::json> inputs;  // the first shard's inputs.json that has one, and that shard
  std::string inputs_from;
  bool every_inputs = true;
  for (const std::string& d : shard_dirs) {
    const fs::path dir(d);
    const std::string status =
        fs::exists(dir / "status") ? read_input_file((dir / "status").string(), "merge") : "(no status file)\n";
    if (status != "complete\n") {
      if (!allow_incomplete)
        fail("merge: ", d, " is not a complete run (status: ", status.substr(0, status.size() - 1),
             "); pass --allow-incomplete to merge it anyway");
      incomplete = true;
    }
    const auto [rest, shard] = split_shard_line((dir / "config.resolved.ini").string());
    // Compared without its comments: "# Resolved from FILE" names the file as each shard's command line spelled it.
    const auto values = [](const std::string& text) {
      std::istringstream in(text);
      std::string line, out;
      while (std::getline(in, line))
        if (line.rfind('#', 0) != 0) out += line + "\n";
      return out;
    };
    if (config.empty()) config = rest;
    if (values(rest) != values(config))
      fail("merge: ", d, "/config.resolved.ini differs from ", shard_dirs[0],
           "'s beyond the shard line (first at: ", first_differing_line(values(rest), values(config)),
           "): the shards are not slices of one run");
    if (shard.second == 0) fail("merge: ", d, " is not a shard (its config.resolved.ini has no shard line)");
    if (count && shard.second != count)
      fail("merge: ", d, " is shard ", shard.first, "/", shard.second, " but an earlier one was of ", count);
    count = shard.second;
    // Shards of one run decode the same prompts with the same models (each checks its own files when it starts).
    if (!fs::exists(dir / "inputs.json")) {
      every_inputs = false;
    } else {
      const nlohmann::json own = without_notes(read_run_inputs(dir / "inputs.json", "merge"));
      if (!inputs) inputs = own;
      if (own != *inputs)
        fail("merge: ", d, "/inputs.json differs from ", inputs_from,
             "'s: the shards decoded different prompts or models, so they are not slices of one run");
      if (inputs_from.empty()) inputs_from = d;
    }
    if (!indices.insert(shard.first).second)
      fail("merge: shard ", shard.first, "/", count, " is given twice (", d, ")");
  }
  if (static_cast<int>(indices.size()) != count) {
    std::string missing;
    for (int i = 1; i <= count; ++i)
      if (!indices.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    if (!allow_incomplete)
      fail("merge: ", missing.find(',') == std::string::npos ? "shard " : "shards ", missing, " of ", count,
           missing.find(',') == std::string::npos ? " is" : " are", " missing");
    incomplete = true;
  }

  std::vector<RunRecord> records;
  std::set<std::string> seen;  // baselines appear in several shards: keep one copy
  for (const std::string& d : shard_dirs) {
    for (RunRecord& r : read_records((fs::path(d) / "records.jsonl").string(), allow_incomplete)) {
      const std::string key = r.setting_id + "#" + std::to_string(r.prompt_index) + "#" + std::to_string(r.repetition);
      if (!seen.insert(key).second) continue;
      records.push_back(std::move(r));
    }
  }
  fs::create_directories(output);
  write_output_file((fs::path(output) / "config.resolved.ini").string(), config, "merge");
  if (fs::exists(fs::path(shard_dirs[0]) / "env.json"))
    write_output_file((fs::path(output) / "env.json").string(),
                      read_input_file((fs::path(shard_dirs[0]) / "env.json").string(), "merge"), "merge");
  // Only where every shard kept one (a shard begun by an earlier version has none, and then no file covers the run).
  if (every_inputs && inputs)
    write_output_file((fs::path(output) / "inputs.json").string(), inputs->dump() + "\n", "merge");
  std::string lines;
  for (const RunRecord& r : records) lines += r.to_json_line() + "\n";
  write_output_file((fs::path(output) / "records.jsonl").string(), lines, "merge");
  if (const std::optional<CostProfile> profile = folder_cost_profile(shard_dirs[0]))
    write_folder_cost_profile(output, *profile);
  write_folder_summary(output, records);
  write_status(output, incomplete ? "incomplete (merged with --allow-incomplete)" : "complete");
}

SummaryCoverage check_summary_covers_folder(const std::string& folder, bool allow_incomplete) {
  const fs::path dir(folder);
  const std::string path = (dir / "summary.csv").string();
  if (!fs::exists(path)) {
    // A run killed outright (SIGKILL, a lost node) writes no summary; its records and configuration are there.
    if (fs::exists(dir / "config.resolved.ini") && fs::exists(dir / "records.jsonl")) {
      const std::string status = status_line(dir, "plot");
      if (const std::optional<long> live = live_run_process(status))
        fail(folder, ": no summary.csv yet: the run is still going (process ", *live,
             " on this machine); plot it when it ends, or stop it and `specula run --resume ", folder, "`");
      fail(folder,
           ": no summary.csv: the run was stopped before it wrote one (status: ", status.empty() ? "none" : status,
           "); finish it with `specula run --resume ", folder, "`");
    }
    fail(folder, ": not a results folder (no summary.csv)");
  }
  const std::string text = read_input_file(path, "plot");
  if (text.empty()) fail(path, " is empty: no header and no settings to plot");
  bool cut = false;
  const std::vector<int64_t> fields = csv_field_counts(text, cut);
  if (cut) fail(path, ": the last line is cut (line ", fields.size(), " has no end): the file was not written whole");
  for (size_t i = 1; i < fields.size(); ++i)
    if (fields[i] != fields[0])
      fail(path, ": line ", i + 1, " has ", fields[i], " fields where the header has ", fields[0],
           ": the file is damaged");
  SummaryCoverage c;
  c.rows = static_cast<int64_t>(fields.size()) - 1;
  if (c.rows == 0) fail(path, " holds only its header: no settings to plot");

  const fs::path records = dir / "records.jsonl";
  if (!fs::exists(records)) {
    if (!allow_incomplete)
      fail(folder,
           ": no records.jsonl, so summary.csv cannot be checked against the run (a benchmark's folder keeps "
           "none: --allow-incomplete plots its summary as it is)");
    c.status = status_line(dir, "plot");
    c.configured = c.rows;
    c.checked = false;
    return c;
  }
  const std::vector<RunRecord> all = read_records(records.string());
  const int64_t recorded = static_cast<int64_t>(summarize(all).size());
  if (c.rows != recorded)
    fail(path, " has ", c.rows, " setting rows, but ", records.string(), " holds ", recorded, " settings: the summary ",
         c.rows < recorded ? "misses settings" : "has rows no record supports",
         " (a run or merge rewrites it from the records)");

  c.status = status_line(dir, "plot");
  // The configuration is read once, for the settings it describes and the records a whole one has (prompts x
  // repetitions, the prompts counted in inputs.json; without either file, the most records any setting has).
  const fs::path resolved = dir / "config.resolved.ini", inputs = dir / "inputs.json";
  const std::optional<ExperimentConfig> config =
      fs::exists(resolved) ? std::optional<ExperimentConfig>(load_experiment(resolved.string(), {})) : std::nullopt;
  c.configured = config ? configured_settings(dir, *config) : recorded;
  const int64_t whole =
      config && fs::exists(inputs)
          ? static_cast<int64_t>(read_run_inputs(inputs, "plot").at("prompts").size()) * config->repetitions
          : 0;
  c.partial = partial_settings(all, whole);
  c.complete = (c.status.empty() || c.status == "complete") && c.rows >= c.configured && c.partial.empty();
  if (!c.complete && !allow_incomplete)
    fail(folder, " is not a complete run (status: ", c.status.empty() ? "none" : c.status, "): ", path, " covers ",
         c.rows, " of the ", c.configured, " settings config.resolved.ini describes",
         c.partial.empty() ? "" : ", " + join_items(c.partial) + " only in part",
         "; finish it with `specula run --resume ", folder, "`, or plot what there is with --allow-incomplete");
  return c;
}

std::string join_items(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::vector<std::string> partial_settings(const std::vector<RunRecord>& records, int64_t whole) {
  const std::vector<SummaryRow> rows = summarize(records);
  for (const SummaryRow& row : rows) whole = std::max(whole, row.prompts);
  std::vector<std::string> partial;
  for (const SummaryRow& row : rows)
    if (row.prompts < whole)
      partial.push_back(row.setting_id + " (" + std::to_string(row.prompts) + " of " + std::to_string(whole) +
                        " records)");
  return partial;
}

std::optional<CostProfile> folder_cost_profile(const fs::path& dir) {
  const fs::path file = dir / "cost-profile.json";
  if (!fs::exists(file)) return std::nullopt;
  return read_cost_profile(file.string());
}

void write_folder_cost_profile(const fs::path& dir, const CostProfile& profile) {
  write_output_file((dir / "cost-profile.json").string(), profile.json.dump(2) + "\n", "run");
}

void write_folder_summary(const fs::path& dir, const std::vector<RunRecord>& records) {
  write_summary_csv(summarize(records, folder_cost_profile(dir)), (dir / "summary.csv").string());
}

std::string read_status(const fs::path& dir, const std::string& what) {
  return fs::exists(dir / "status") ? read_input_file((dir / "status").string(), what) : "";
}

}  // namespace specula
