#include "harness/runner/experiment_runner.h"

#include <omp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "draft/registry/drafter_registry.h"
#include "harness/config/command_options.h"
#include "harness/experiment/environment.h"
#include "harness/experiment/experiment_config.h"
#include "harness/experiment/run_progress.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "harness/experiment/sweep.h"
#include "harness/generation/beam_search.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/generator.h"
#include "harness/io/log.h"
#include "harness/io/output_file.h"
#include "harness/models/eos_tokens.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/registry/torch_module.h"
#include "harness/models/tokenizer.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/skinny_linear.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "verify/device/batch_verifier.h"
#include "verify/sampling/token_constraint.h"

namespace specula {
namespace fs = std::filesystem;
namespace {

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) fail(what, ": cannot open '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string unescape_newlines(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Sampler parameters from the setting's values of one section ("sampling" or "draft_sampling"), parsed
// by the same option code as the command line.
SamplingParams sampler_params(const Setting& setting, const std::string& section, SamplingParams params) {
  po::options_description desc;
  add_sampler_options(desc);
  po::parsed_options parsed(&desc);
  for (const auto& [key, value] : setting.values) {
    if (key.rfind(section + ".", 0) != 0) continue;
    std::string option = key.substr(section.size() + 1);
    if (option == "regex" || option == "json_schema" || option == "token_strings") continue;  // constraint_for
    std::replace(option.begin(), option.end(), '_', '-');
    parsed.options.emplace_back(option, std::vector<std::string>{value});
  }
  po::variables_map vm;
  po::store(parsed, vm);
  read_sampler_options(vm, params);
  return params;
}

// The setting's constraint ([sampling] regex / json_schema, `none` = off), one object per distinct
// constraint so that target and cached drafters share the automaton whose state ids they exchange.
std::shared_ptr<const TokenConstraint> constraint_for(
    const Setting& setting, const LanguageModel& target, const std::string& target_spec, const SamplingParams& params,
    std::map<std::string, std::shared_ptr<const TokenConstraint>>& cache) {
  ConstraintOptions options;
  if (setting.get_or("sampling.regex", "none") != "none") options.regex = setting.get("sampling.regex");
  if (setting.get_or("sampling.json_schema", "none") != "none")
    options.json_schema_file = setting.get("sampling.json_schema");
  options.token_strings_file = setting.get_or("sampling.token_strings", "");
  if (!options.any()) return nullptr;
  std::string key = options.regex + "\n" + options.json_schema_file + "\n" + options.token_strings_file + "\n";
  for (Token t : params.stop_tokens) key += std::to_string(t) + ",";
  auto& slot = cache[key];
  if (!slot) {
    std::vector<std::string> tokenizer_strings;
    if (const auto tokenizer = load_tokenizer_for(target_spec))
      tokenizer_strings = token_strings_for_constraints(*tokenizer, target.vocab_size());
    slot = constraint_from_options(options, target.vocab_size(), std::move(tokenizer_strings), params.stop_tokens);
  }
  return slot;
}

// The 1-minute load average (/proc/loadavg), recorded around each timed pair; NaN where there is none.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = NAN;
  if (!(in >> load)) return NAN;
  return load;
}

// A results folder of its own: `base`, or base-2, base-3, ... when another run took that name first (two runs
// started in the same second). Creating the directory is the claim, so two processes never share one.
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

// The folder's state, one line: running | complete | interrupted (SIGINT|SIGTERM) | failed: <error>.
void write_status(const fs::path& dir, const std::string& status) {
  write_output_file((dir / "status").string(), status + "\n", "run");
}

// The status of a run in progress names its process, so that `--resume` can tell a live run from a dead one.
std::string running_status() {
  return "running (pid " + std::to_string(static_cast<long>(getpid())) + " on " + hostname() + ")";
}

// Refuses to resume a folder that a live `specula` process on this machine is still writing: two processes
// appending to one records.jsonl would interleave their records. A run recorded on another machine cannot be
// checked from here; it is resumed with a warning (a preempted Slurm task's process is gone).
void check_not_running(const fs::path& dir, const std::string& status) {
  long pid = 0;
  char host[256] = {};
  if (std::sscanf(status.c_str(), "running (pid %ld on %255[^)])", &pid, host) != 2) return;
  if (host != hostname()) {
    log(LogLevel::warn, dir.string(), "'s status says it is running as process ", pid, " on ", host,
        "; if that process is alive, both will write this folder");
    return;
  }
  if (pid <= 0 || pid == static_cast<long>(getpid())) return;
  const bool alive = kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  // A recycled process id belongs to some other program: only a live `specula` counts.
  if (alive && (!comm || name == "specula"))
    fail_parameter("resume", ": ", dir.string(), " is still being written by process ", pid,
                   " on this machine (its status reads running); stop that run first");
}

// SIGINT and SIGTERM during a run ask it to stop after the record in progress (a Slurm preemption sends
// SIGTERM). The handlers are installed for the run only.
volatile std::sig_atomic_t g_stop_signal = 0;
// The first signal asks for a stop after the record in progress; the handler then steps aside, so a second
// one ends the process at once (signal() is async-signal-safe).
extern "C" void request_stop(int signal) {
  g_stop_signal = signal;
  std::signal(signal, SIG_DFL);
}

struct StopRequested {
  int signal;
};

void throw_if_stop_requested() {
  if (g_stop_signal) throw StopRequested{g_stop_signal};
}

class SignalGuard {
 public:
  SignalGuard() {
    g_stop_signal = 0;
    previous_int_ = std::signal(SIGINT, request_stop);
    previous_term_ = std::signal(SIGTERM, request_stop);
  }
  ~SignalGuard() {
    std::signal(SIGINT, previous_int_);
    std::signal(SIGTERM, previous_term_);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  void (*previous_int_)(int);
  void (*previous_term_)(int);
};

std::vector<RunRecord> records_so_far(const fs::path& dir) {
  return fs::exists(dir / "records.jsonl") ? read_records((dir / "records.jsonl").string()) : std::vector<RunRecord>{};
}

// A shard's resolved configuration (the file `path`) without its "; shard = i/N" line, and that line's i and N
// (0, 0: none). A bad line is an error naming the file, not the --shard flag.
std::pair<std::string, std::pair<int, int>> split_shard_line(const std::string& path) {
  const std::string resolved = read_file(path, "the run's resolved configuration");
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

// A resumed run's folder: its records.jsonl cut after the last whole line (a process killed in the middle of
// a write leaves part of one), then the records it holds.
std::vector<RunRecord> records_to_resume(const fs::path& dir) {
  const fs::path path = dir / "records.jsonl";
  if (!fs::exists(path)) return {};
  const std::string text = read_file(path.string(), "run --resume");
  const size_t whole = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
  if (whole < text.size()) fs::resize_file(path, whole);
  return read_records(path.string());
}

std::string record_key(const std::string& setting_id, size_t prompt, int repetition) {
  return setting_id + "#" + std::to_string(prompt) + "#" + std::to_string(repetition);
}

// [beam] over the defaults of harness/generation/beam_search.h (the values were checked when the config was read).
BeamSearchConfig beam_config(const ExperimentConfig& c) {
  BeamSearchConfig b;
  if (c.beam.count("width")) b.beam_width = std::stoi(c.beam.at("width"));
  if (c.beam.count("groups")) b.num_groups = std::stoi(c.beam.at("groups"));
  if (c.beam.count("diversity_penalty")) b.diversity_penalty = std::stod(c.beam.at("diversity_penalty"));
  if (c.beam.count("length_penalty")) b.length_penalty = std::stod(c.beam.at("length_penalty"));
  if (c.beam.count("early_stopping")) b.early_stopping = c.beam.at("early_stopping") == "true";
  if (c.beam.count("num_return")) b.num_return = std::stoi(c.beam.at("num_return"));
  b.max_new_tokens = c.max_new_tokens;
  return b;
}

// A setting's method, draft shape and generation config (ar for the baselines).
DecodingMethod setting_method(const Setting& setting) {
  return parse_decoding_method(setting.get("draft.method"));  // "ar" for the baselines
}

GenerationConfig setting_generation(const Setting& setting, int32_t max_new_tokens) {
  const DecodingMethod method = setting_method(setting);
  DraftShape shape;
  if (method.speculative()) {
    shape.num_draft_tokens =
        std::stoi(setting.get_or("draft.num_draft_tokens", std::to_string(kDefaultNumDraftTokens)));
    shape.num_draft_tokens_given = setting.values.count("draft.num_draft_tokens") > 0;
    if (setting.values.count("draft.tree")) shape.tree_shape = parse_tree_shape(setting.get("draft.tree"));
    shape.tree_sampling = parse_sibling_scheme(setting.get_or("draft.tree_sampling", "iid"));
  }
  return generation_config(method, shape, max_new_tokens, 0);
}

GenerationConfig setting_generation(const Setting& setting, const ExperimentConfig& config) {
  GenerationConfig g = setting_generation(setting, config.max_new_tokens);
  g.device = parse_device(config.device);
  return g;
}

// Every prompt must fit the target with the longest generation and draft tree of the sweep: checked before the
// run starts, not at the position that overflows halfway through it.
[[noreturn]] void fail_at_key(const ExperimentConfig& config, const Setting& setting, const ParameterError& e);

void check_settings_fit(const ExperimentConfig& config, const LanguageModel& target,
                        const std::vector<std::vector<int32_t>>& prompts, const std::vector<Setting>& settings) {
  const Device device = parse_device(config.device);
  require_device(device);                    // "no CUDA device: ..." before a results folder is made
  for (const Setting& setting : settings) {  // each setting's draft shape against max_new_tokens
    try {
      const GenerationConfig g = setting_generation(setting, config);
      if (device == Device::cpu) continue;
      // What the device path cannot do is refused here, by key, before any work.
      if (setting_method(setting).beam)
        fail_parameter("device", " ", config.device, ": beam search runs on the CPU (device = cpu)");
      for (const char* key : {"sampling.regex", "sampling.json_schema"})
        if (setting.values.count(key) && setting.get(key) != "none")
          fail_parameter(std::string(key).substr(9), " is not supported on device ", config.device,
                         " (constrained decoding runs on the CPU)");
      check_device_support(g.method, sampler_params(setting, "sampling", SamplingParams{}), draft_nodes(g), device);
    } catch (const ParameterError& e) {
      fail_at_key(config, setting, e);
    }
  }
  const int64_t limit = target.max_positions();
  if (limit <= 0) return;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  for (const Setting& setting : settings) {
    const int64_t depth = draft_depth(setting_generation(setting, config.max_new_tokens));
    const int64_t needed = static_cast<int64_t>(longest) + config.max_new_tokens - 1 + depth;
    if (needed > limit)
      fail(config.file, ": the target holds ", limit, " positions, but the longest prompt (", longest,
           " tokens), max_new_tokens ", config.max_new_tokens, " and setting ", setting.id, "'s draft depth ", depth,
           " need ", needed);
  }
}

// A new run's results folder (its own: see create_results_folder), or the folder of the run being resumed.
fs::path open_results_folder(const ExperimentConfig& config, const RunOptions& options, bool resume) {
  if (resume) return fs::path(options.resume_dir);
  std::string folder = utc_timestamp(true) + "-" + git_revision();
  if (options.shard_count > 1)
    folder += "-shard-" + std::to_string(options.shard_index) + "-of-" + std::to_string(options.shard_count);
  return create_results_folder(fs::path(config.output_dir) / config.name / folder);
}

// What a new run writes before its first record: the resolved configuration (with its shard) and the machine.
void write_run_description(const fs::path& dir, const ExperimentConfig& config, const RunOptions& options) {
  std::string resolved = config.resolved_ini();
  if (options.shard_count > 1)
    resolved += "; shard = " + std::to_string(options.shard_index) + "/" + std::to_string(options.shard_count) + "\n";
  write_output_file((dir / "config.resolved.ini").string(), resolved, "run");
  nlohmann::json env = nlohmann::json::parse(environment_json(config.threads, options.command_line));
  env["weights_dtype"] = config.weights_dtype;
  env["skinny_kernel_isa"] = skinny_isa_name(skinny_linear_isa());      // SPECULA_SKINNY_ISA may force one
  env["weight_layout"] = weight_layout_name(decoding_weight_layout());  // SPECULA_WEIGHT_LAYOUT may force one
  env["huge_pages"] = decoding_weights_on_huge_pages() ? "on" : "off";  // SPECULA_HUGE_PAGES=off turns them off
  write_output_file((dir / "env.json").string(), env.dump(2) + "\n", "run");
}

// What the settings of one run share: the target, prompts, the records written so far and where they go.
struct RunState {
  const ExperimentConfig& config;
  std::shared_ptr<const LanguageModel> target;
  const std::vector<std::vector<int32_t>>& prompts;
  std::vector<RunRecord> records;
  std::set<std::string> written;  // (setting, prompt, repetition) already in records.jsonl: a resumed run skips them
  AppendedOutput& records_out;
  RunProgress& progress;
  int64_t done = 0;

  // Whether the record is already written (counted as done), so the caller skips it.
  bool skip(const Setting& setting, size_t prompt, int rep) {
    if (!written.count(record_key(setting.id, prompt, rep))) return false;
    progress.update(++done, setting.id);
    return true;
  }
  void add(RunRecord r, const std::string& label) {
    records_out.append(r.to_json_line() + "\n");
    records.push_back(std::move(r));
    progress.update(++done, label);
    throw_if_stop_requested();
  }
};

// A lower layer's error about a parameter (harness/generation names them), said as the experiment key that set it.
[[noreturn]] void fail_at_key(const ExperimentConfig& config, const Setting& setting, const ParameterError& e) {
  static const std::map<std::string, std::string> keys = {
      {"draft", "draft.drafter"},
      {"method", "draft.method"},
      {"num_draft_tokens", "draft.num_draft_tokens"},
      {"tree", "draft.tree"},
      {"max_new_tokens", "experiment.max_new_tokens"},
      {"beam_width", "beam.width"},
      {"num_beam_groups", "beam.groups"},
      {"diversity_penalty", "beam.diversity_penalty"},
      {"length_penalty", "beam.length_penalty"},
      {"num_return", "beam.num_return"},
      {"regex", "sampling.regex"},
      {"json_schema", "sampling.json_schema"},
      {"device", "experiment.device"},
      {"typical_p", "sampling.typical_p"},
      {"tfs_z", "sampling.tfs_z"},
      {"mirostat", "sampling.mirostat"},
      {"dynatemp_range", "sampling.dynatemp_range"},
      {"bad_words", "sampling.bad_words"},
      {"logit_bias", "sampling.logit_bias"},
  };
  const auto it = keys.find(e.parameter());
  const std::string key = it != keys.end() ? it->second : e.parameter();
  const std::string where = config.origin.count(key) ? config.origin.at(key) : config.file;
  fail(where, ": key '", key, "' (setting ", setting.id, "): ", e.parameter(), e.detail());
}

RunRecord new_record(const Setting& setting, size_t prompt, int rep) {
  RunRecord r;
  r.setting_id = setting.id;
  r.baseline_id = setting.baseline_id;
  r.setting = setting.values;
  r.baseline = setting.baseline;
  r.prompt_index = static_cast<int>(prompt);
  r.repetition = rep;
  return r;
}

// One beam-search setting: every prompt and repetition, after an unrecorded warm-up.
void run_beam_setting(RunState& run, const Setting& setting, const SamplingParams& params) {
  const BeamSearch search(run.target, params, beam_config(run.config));
  {
    BeamSearchConfig warm = search.config();
    warm.max_new_tokens = std::min(warm.max_new_tokens, 8);
    GenerationMetrics ignored;
    BeamSearch(run.target, params, warm).search(run.prompts[0], ignored);
  }
  for (int rep = 0; rep < run.config.repetitions; ++rep)
    for (size_t j = 0; j < run.prompts.size(); ++j) {
      if (run.skip(setting, j, rep)) continue;
      RunRecord r = new_record(setting, j, rep);
      const BeamSearchOutput out = search.search(run.prompts[j], r.metrics);
      r.tokens = out.nbest[0].tokens;
      r.stop_reason = out.nbest[0].stopped ? "stop" : "length";
      r.metrics.wall_seconds = out.wall_seconds;
      run.add(std::move(r), setting.id);
    }
}

void log_setting_totals(const RunState& run, const Setting& setting) {
  if (log_level() >= LogLevel::debug) {
    GenerationMetrics total;
    for (const RunRecord& r : run.records)
      if (r.setting_id == setting.id) total.merge(r.metrics);
    log(LogLevel::debug, setting.id, ": ", total.new_tokens, " tokens, acceptance ", total.acceptance_rate(),
        ", tokens/step ", total.mean_accepted_length());
  }
}

// An unrecorded generation before a setting's records: first calls pay for allocations, lazy initialisation
// and cold caches.
void warm_up(const RunState& run, const SamplingParams& params, std::shared_ptr<const DrafterFactory> drafter,
             GenerationConfig gen) {
  gen.max_new_tokens = std::min(gen.max_new_tokens, 8);
  GenerationMetrics ignored;
  Generator(run.target, params, std::move(drafter), gen).generate(run.prompts[0], 0, ignored);
}

// The paired baseline's generation: autoregressive, the speculative setting's seed and device.
GenerationConfig baseline_generation(const GenerationConfig& seeded, const ExperimentConfig& config) {
  GenerationConfig base;
  base.max_new_tokens = config.max_new_tokens;
  base.seed = seeded.seed;
  base.device = seeded.device;
  base.emulation = seeded.emulation;
  return base;
}

// A record's continuation and its counters from one generated sequence.
void record_output(RunRecord& r, const SequenceOutput& out) {
  r.tokens = out.tokens;
  r.stop_reason = stop_reason_name(out.stop_reason);
  r.accept_lengths = out.accept_lengths;
  r.metrics.wall_seconds = out.wall_seconds;
}

// A setting on a device: per repetition, every prompt not yet written runs in one lockstep batch (one device
// launch per step for all of them), after an unrecorded warm-up. With paired timing the baseline runs as a
// batch of the same prompts right before or after (alternating by repetition), and each record's pair holds
// its prompt's baseline from that batch.
void run_generation_setting_on_device(RunState& run, const Setting& setting, const SamplingParams& params,
                                      std::shared_ptr<const DrafterFactory> drafter,
                                      const SamplingParams* base_params) {
  const GenerationConfig gen = setting_generation(setting, run.config);
  warm_up(run, params, drafter, gen);
  for (int rep = 0; rep < run.config.repetitions; ++rep) {
    std::vector<size_t> todo;
    std::vector<const std::vector<Token>*> prompts;
    std::vector<uint64_t> ids;
    for (size_t j = 0; j < run.prompts.size(); ++j) {
      if (run.skip(setting, j, rep)) continue;
      todo.push_back(j);
      prompts.push_back(&run.prompts[j]);
      ids.push_back(j);
    }
    if (todo.empty()) continue;
    GenerationConfig seeded = gen;
    seeded.seed = run.config.seed + static_cast<uint64_t>(rep);
    const Generator generator(run.target, params, drafter, seeded);
    std::vector<GenerationMetrics> metrics(todo.size()), base_metrics(todo.size());
    std::vector<SequenceOutput> base_out;
    const auto run_baseline = [&] {
      base_out = Generator(run.target, *base_params, nullptr, baseline_generation(seeded, run.config))
                     .generate_batch(prompts, ids, base_metrics);
    };
    const bool baseline_first = rep % 2 == 1;
    const double load_before = load_average();
    if (base_params && baseline_first) run_baseline();
    const std::vector<SequenceOutput> out = generator.generate_batch(prompts, ids, metrics);
    if (base_params && !baseline_first) run_baseline();
    const double load_after = load_average();
    for (size_t k = 0; k < todo.size(); ++k) {
      RunRecord r = new_record(setting, todo[k], rep);
      r.device = device_name(gen.device);
      r.metrics = metrics[k];
      record_output(r, out[k]);
      if (base_params) {
        r.pair.present = true;
        r.pair.new_tokens = base_metrics[k].new_tokens;
        r.pair.wall_seconds = base_out[k].wall_seconds;
        r.pair.prompt_seconds = base_metrics[k].prompt_seconds;
        r.pair.baseline_first = baseline_first;
        r.pair.load_before = load_before;
        r.pair.load_after = load_after;
      }
      run.add(std::move(r), setting.baseline ? "baseline " + setting.id : setting.id);
    }
  }
  log_setting_totals(run, setting);
}

// One speculative or autoregressive setting: every prompt and repetition, after an unrecorded warm-up. With
// paired timing, the setting's baseline (same [sampling] values, same seeds; `base_params`, when given) runs
// beside every speculative generation, alternately before and after it. On a device, the batched version above.
void run_generation_setting(RunState& run, const Setting& setting, const SamplingParams& params,
                            std::shared_ptr<const DrafterFactory> drafter, const SamplingParams* base_params) {
  const GenerationConfig gen = setting_generation(setting, run.config);
  if (gen.device != Device::cpu) return run_generation_setting_on_device(run, setting, params, drafter, base_params);
  warm_up(run, params, drafter, gen);
  for (int rep = 0; rep < run.config.repetitions; ++rep) {
    GenerationConfig seeded = gen;
    seeded.seed = run.config.seed + static_cast<uint64_t>(rep);
    const Generator generator(run.target, params, drafter, seeded);
    const std::unique_ptr<const Generator> base_generator =
        base_params ? std::make_unique<const Generator>(run.target, *base_params, nullptr,
                                                        baseline_generation(seeded, run.config))
                    : nullptr;
    for (size_t j = 0; j < run.prompts.size(); ++j) {
      if (run.skip(setting, j, rep)) continue;
      RunRecord r = new_record(setting, j, rep);
      auto run_baseline = [&] {
        GenerationMetrics m;
        const SequenceOutput b = base_generator->generate(run.prompts[j], j, m);
        r.pair.present = true;
        r.pair.new_tokens = m.new_tokens;
        r.pair.wall_seconds = b.wall_seconds;
        r.pair.prompt_seconds = m.prompt_seconds;
      };
      r.pair.baseline_first = (rep + static_cast<int>(j)) % 2 == 1;  // ABAB, then BABA
      r.pair.load_before = load_average();
      if (base_generator && r.pair.baseline_first) run_baseline();
      const SequenceOutput out = generator.generate(run.prompts[j], j, r.metrics);
      if (base_generator && !r.pair.baseline_first) run_baseline();
      r.pair.load_after = load_average();
      record_output(r, out);
      run.add(std::move(r), setting.baseline ? "baseline " + setting.id : setting.id);
    }
  }
  log_setting_totals(run, setting);
}

}  // namespace

std::vector<std::vector<int32_t>> load_prompts(const ExperimentConfig& c, const std::string& target_spec) {
  const std::shared_ptr<const Tokenizer> tokenizer = load_tokenizer_for(target_spec);
  std::vector<std::string> texts;
  if (!c.prompts_file.empty()) {
    std::istringstream in(read_file(
        c.prompts_file, c.origin.count("experiment.prompts") ? c.origin.at("experiment.prompts") : "prompts"));
    std::string line;
    while (std::getline(in, line))
      if (!line.empty() && line[0] != '#') texts.push_back(unescape_newlines(line));
    if (c.origin.count("experiment.num_prompts") && static_cast<int>(texts.size()) > c.num_prompts)
      texts.resize(c.num_prompts);
  } else {
    const std::string corpus = read_file(c.prompts_from_corpus, c.origin.at("experiment.prompts_from_corpus"));
    texts = corpus_excerpts(corpus, c);
  }
  if (texts.empty()) fail(c.prompts_file, ": no prompts");
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : texts) {
    if (tokenizer) {
      prompts.push_back(tokenizer->encode(text));
    } else {
      try {
        prompts.push_back(parse_token_list(text, "prompt"));
      } catch (const ParameterError& e) {
        fail(c.prompts_file.empty() ? c.prompts_from_corpus : c.prompts_file, ": prompt '", text,
             "' (token ids, for a model without a tokenizer)", e.detail());
      }
    }
    if (prompts.back().empty()) fail("a prompt is empty after tokenisation: '", text, "'");
  }
  return prompts;
}

namespace {

// --resume: the run continues as it was configured, from its resolved configuration and on its shard. Returns
// that configuration's path and sets the shard in `options`.
std::string resumed_configuration(RunOptions& options) {
  const fs::path folder(options.resume_dir);
  if (!fs::exists(folder / "config.resolved.ini"))
    fail_parameter("resume", ": ", options.resume_dir, " is not a results folder");
  const std::string status =
      fs::exists(folder / "status") ? read_file((folder / "status").string(), "run --resume") : "";
  if (status == "complete\n")
    fail_parameter("resume", ": ", options.resume_dir, " is complete; there is nothing to resume");
  check_not_running(folder, status);
  if (!options.overrides.empty())
    fail_parameter("set", ": a resumed run continues as it was configured; give no overrides");
  const std::string path = (folder / "config.resolved.ini").string();
  const std::pair<int, int> shard = split_shard_line(path).second;
  if (shard.second > 0) std::tie(options.shard_index, options.shard_count) = shard;
  return path;
}

// The experiment's target; an error about the model spec names the configuration's key.
std::shared_ptr<const LanguageModel> load_target(const ExperimentConfig& config) {
  try {
    return load_language_model(config.target, "target", config.weights_dtype);
  } catch (const ParameterError& e) {
    const std::string where =
        config.origin.count("experiment.target") ? config.origin.at("experiment.target") : config.file;
    fail(where, ": key 'experiment.target': ", e.parameter(), e.detail());
  }
}

// Runs the settings one after another, sharing what settings have in common: a drafter between settings with
// the same draft sampler (loading a model costs time), a constraint's automaton, one beam search for settings
// that differ only in draft axes. Errors about a parameter name the setting's key.
class SettingsRun {
 public:
  SettingsRun(RunState& run, const std::vector<Setting>& settings) : run_(run) {
    for (const Setting& s : settings) by_id_[s.id] = &s;
    // One stop rule for every setting: [sampling] stop_tokens plus the checkpoint's end of sequence.
    if (!run.config.ignore_eos) eos_ = checkpoint_eos_tokens(run.config.target, run.target->vocab_size());
  }

  void run(const Setting& setting) {
    try {
      run_setting(setting);
    } catch (const ParameterError& e) {
      fail_at_key(run_.config, setting, e);
    }
  }

 private:
  // The setting's [sampling] (or another section's) sampler with the stop rule and the output constraint.
  SamplingParams target_sampler(const Setting& setting) {
    SamplingParams params = sampler_params(setting, "sampling", SamplingParams{});
    add_stop_tokens(params, eos_);
    params.constraint = constraint_for(setting, *run_.target, run_.config.target, params, constraints_);
    return params;
  }

  void run_setting(const Setting& setting) {
    SamplingParams target_params = target_sampler(setting);
    const DecodingMethod method = setting_method(setting);
    if (method.beam) {
      std::string key;
      for (const auto& [k, v] : setting.values)
        if (k.rfind("draft.", 0) != 0) key += k + "=" + v + ";";
      if (beam_settings_.insert(key).second) run_beam_setting(run_, setting, target_params);
      return;
    }
    std::shared_ptr<const DrafterFactory> drafter;
    const bool temperature_given = setting.values.count("sampling.temperature") > 0;
    if (!setting.baseline) {
      apply_method_temperature(method, temperature_given, target_params);
      drafter = drafter_for(setting, target_params);
    }
    std::optional<SamplingParams> base_params;
    if (run_.config.paired_timing && !setting.baseline && by_id_.count(setting.baseline_id)) {
      base_params = target_sampler(*by_id_.at(setting.baseline_id));
      apply_method_temperature(method, temperature_given, *base_params);  // like for like: greedy against greedy
    }
    run_generation_setting(run_, setting, target_params, drafter, base_params ? &*base_params : nullptr);
  }

  std::shared_ptr<const DrafterFactory> drafter_for(const Setting& setting, const SamplingParams& target_params) {
    const SamplingParams draft_params = sampler_params(setting, "draft_sampling", target_params);
    const std::string spec = setting.get("draft.drafter");
    std::string key = spec + "|";
    for (const auto& [k, v] : setting.values)
      if (k.rfind("sampling.", 0) == 0 || k.rfind("draft_sampling.", 0) == 0) key += k + "=" + v + ";";
    if (!drafters_.count(key)) drafters_[key] = load_drafter(spec, draft_params, run_.target, target_params);
    return drafters_[key];
  }

  RunState& run_;
  std::vector<Token> eos_;
  std::map<std::string, const Setting*> by_id_;
  std::map<std::string, std::shared_ptr<const DrafterFactory>> drafters_;
  std::map<std::string, std::shared_ptr<const TokenConstraint>> constraints_;
  std::set<std::string> beam_settings_;
};

}  // namespace

std::string run_experiment(const std::string& path, const RunOptions& requested) {
  RunOptions options = requested;
  const bool resume = !options.resume_dir.empty();
  const std::string experiment_path = resume ? resumed_configuration(options) : path;
  const ExperimentConfig config = load_experiment(experiment_path, options.overrides);
  std::vector<Setting> settings = expand_sweep(config);
  if (options.shard_count > 1) settings = shard_of(settings, options.shard_index, options.shard_count);

  omp_set_num_threads(config.threads);
  set_compute_threads(config.threads);
  const std::shared_ptr<const LanguageModel> target = load_target(config);
  const std::vector<std::vector<int32_t>> prompts = load_prompts(config, config.target);
  log(LogLevel::info, "experiment ", config.name, ": target ", target->description(), ", ", settings.size(),
      " settings x ", prompts.size(), " prompts x ", config.repetitions, " repetitions");
  check_settings_fit(config, *target, prompts, settings);

  const fs::path dir = open_results_folder(config, options, resume);
  write_status(dir, running_status());
  const SignalGuard signals;
  try {
    std::vector<RunRecord> resumed;
    if (resume) {
      resumed = records_to_resume(dir);
      log(LogLevel::info, "resuming ", dir.string(), ": ", resumed.size(), " records already written");
    } else {
      write_run_description(dir, config, options);
    }
    AppendedOutput records_out((dir / "records.jsonl").string(), "run");
    RunProgress progress(static_cast<int64_t>(settings.size() * prompts.size() * config.repetitions), options.quiet);
    RunState run{config, target, prompts, std::move(resumed), {}, records_out, progress};
    for (const RunRecord& r : run.records) run.written.insert(record_key(r.setting_id, r.prompt_index, r.repetition));
    SettingsRun settings_run(run, settings);
    for (const Setting& setting : settings) settings_run.run(setting);
    progress.finish();
    write_summary_csv(summarize(run.records), (dir / "summary.csv").string());
    write_status(dir, "complete");
    return dir.string();
  } catch (const StopRequested& stop) {
    // The record in progress was finished and written; summarise what there is and say the run is not whole.
    write_summary_csv(summarize(records_so_far(dir)), (dir / "summary.csv").string());
    const std::string what = std::string("interrupted (") + (stop.signal == SIGTERM ? "SIGTERM" : "SIGINT") + ")";
    write_status(dir, what);
    throw RunInterrupted("run " + what + ": " + dir.string() + " holds the records written so far and their summary",
                         stop.signal);
  } catch (const std::exception& e) {
    write_status(dir, std::string("failed: ") + e.what());
    throw;
  }
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
  // Validate every input before writing anything.
  std::string config;
  int count = 0;
  std::set<int> indices;
  bool incomplete = false;
  for (const std::string& d : shard_dirs) {
    const fs::path dir(d);
    const std::string status =
        fs::exists(dir / "status") ? read_file((dir / "status").string(), "merge") : "(no status file)\n";
    if (status != "complete\n") {
      if (!allow_incomplete)
        fail("merge: ", d, " is not a complete run (status: ", status.substr(0, status.size() - 1),
             "); pass --allow-incomplete to merge it anyway");
      incomplete = true;
    }
    const auto [rest, shard] = split_shard_line((dir / "config.resolved.ini").string());
    if (config.empty()) config = rest;
    if (rest != config)
      fail("merge: ", d, "/config.resolved.ini differs from ", shard_dirs[0],
           "'s beyond the shard line: the shards are not slices of one run");
    if (shard.second == 0) fail("merge: ", d, " is not a shard (its config.resolved.ini has no shard line)");
    if (count && shard.second != count)
      fail("merge: ", d, " is shard ", shard.first, "/", shard.second, " but an earlier one was of ", count);
    count = shard.second;
    if (!indices.insert(shard.first).second)
      fail("merge: shard ", shard.first, "/", count, " is given twice (", d, ")");
  }
  if (static_cast<int>(indices.size()) != count) {
    std::string missing;
    for (int i = 1; i <= count; ++i)
      if (!indices.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    if (!allow_incomplete) fail("merge: shards ", missing, " of ", count, " are missing");
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
                      read_file((fs::path(shard_dirs[0]) / "env.json").string(), "merge"), "merge");
  std::string lines;
  for (const RunRecord& r : records) lines += r.to_json_line() + "\n";
  write_output_file((fs::path(output) / "records.jsonl").string(), lines, "merge");
  write_summary_csv(summarize(records), (fs::path(output) / "summary.csv").string());
  write_status(output, incomplete ? "incomplete (merged with --allow-incomplete)" : "complete");
}

}  // namespace specula
