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
#include <iomanip>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "draft/registry/drafter_registry.h"
#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/experiment/environment.h"
#include "harness/experiment/experiment_config.h"
#include "harness/experiment/run_progress.h"
#include "harness/experiment/run_record.h"
#include "harness/experiment/summary.h"
#include "harness/experiment/sweep.h"
#include "harness/generation/beam_search.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/generator.h"
#include "harness/io/input_file.h"
#include "harness/io/log.h"
#include "harness/io/output_file.h"
#include "harness/io/stop_signals.h"
#include "harness/models/eos_tokens.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/registry/torch_module.h"
#include "harness/models/tokenizer.h"
#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/skinny_linear.h"
#include "harness/runner/results_folder.h"
#include "harness/runner/run_inputs.h"
#include "harness/runner/setting_configs.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "verify/device/batch_verifier.h"
#include "verify/sampling/token_constraint.h"

namespace specula {
namespace fs = std::filesystem;
namespace {

// The 1-minute load average (/proc/loadavg), recorded around each timed pair; NaN where there is none.
double load_average() {
  std::ifstream in("/proc/loadavg");
  double load = NAN;
  if (!(in >> load)) return NAN;
  return load;
}

std::string record_key(const std::string& setting_id, size_t prompt, int repetition) {
  return setting_id + "#" + std::to_string(prompt) + "#" + std::to_string(repetition);
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
  if (config.profile) write_folder_cost_profile(dir, *config.profile);
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
  // `stop_here`: whether a stop requested by a signal ends the run after this record. A lockstep batch's records are
  // decoded together, so they are written together: a stop waits for the batch's last.
  void add(RunRecord r, const std::string& label, bool stop_here = true) {
    records_out.append(r.to_json_line() + "\n");
    records.push_back(std::move(r));
    progress.update(++done, label);
    if (stop_here) throw_if_stop_requested();
  }
};

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
  const Generator generator(run.target, params, std::move(drafter), gen);
  if (gen.device == Device::cpu && !gen.lockstep) {
    GenerationMetrics ignored;
    generator.generate(run.prompts[0], 0, ignored);
    return;
  }
  // Lockstep: the whole batch, so the batched path's buffers are sized before the first record.
  std::vector<const std::vector<Token>*> prompts;
  std::vector<uint64_t> ids;
  for (size_t j = 0; j < run.prompts.size(); ++j) {
    prompts.push_back(&run.prompts[j]);
    ids.push_back(j);
  }
  std::vector<GenerationMetrics> ignored(prompts.size());
  generator.generate_batch(prompts, ids, ignored);
}

// The paired baseline's generation: autoregressive, the speculative setting's seed and device.
GenerationConfig baseline_generation(const GenerationConfig& seeded, const ExperimentConfig& config) {
  GenerationConfig base;
  base.max_new_tokens = config.max_new_tokens;
  base.seed = seeded.seed;
  base.device = seeded.device;
  base.lockstep = seeded.lockstep;
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

// A setting on a device (or in lockstep on the CPU): per repetition, every prompt not yet written runs in one
// lockstep batch (one target forward and one device launch per step for all of them), after an unrecorded warm-up. With
// paired timing the baseline runs as a batch of the same prompts right before or after (alternating by repetition), and
// each record's pair holds its prompt's baseline from that batch.
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
      r.lockstep = true;
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
      run.add(std::move(r), setting.baseline ? "baseline " + setting.id : setting.id, k + 1 == todo.size());
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
  if (gen.device != Device::cpu || gen.lockstep)
    return run_generation_setting_on_device(run, setting, params, drafter, base_params);
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

// --resume: the run continues as it was configured, from its resolved configuration and on its shard. Returns
// that configuration's path and sets the shard in `options`.
std::string resumed_configuration(RunOptions& options) {
  const fs::path folder(options.resume_dir);
  if (!fs::exists(folder / "config.resolved.ini"))
    fail_parameter("resume", ": ", options.resume_dir, " is not a results folder");
  const std::string status = read_status(folder, "run --resume");
  if (status == "complete\n")
    fail_parameter("resume", ": ", options.resume_dir, " is complete; there is nothing to resume");
  check_not_running(folder, status);
  if (!options.overrides.empty())
    fail_parameter("set", ": a resumed run continues as it was configured; give no overrides");
  const std::string path = (folder / "config.resolved.ini").string();
  const std::pair<int, int> shard = split_shard_line(path).second;
  if (shard.second > 0) std::tie(options.shard_index, options.shard_count) = shard;
  // The folder keeps the profile it was started with: the file it came from may have moved since.
  if (fs::exists(folder / "cost-profile.json"))
    options.overrides.push_back("experiment.cost_profile=" + (folder / "cost-profile.json").string());
  return path;
}

// Bounded before any model loads: every record is kept until the run ends (its summary is made from them all) and
// written to records.jsonl, each at least kMinRecordBytes of JSON whatever its tokens, so a run whose records could not
// fit in this machine's memory, or on the disk that holds `folder` (a new run's: a resumed one has written some), is
// refused by the key that multiplies them.
void check_records_fit(const ExperimentConfig& config, size_t settings, size_t prompts, const fs::path& folder,
                       bool resume) {
  constexpr double kMinRecordBytes = 800;
  const double records = static_cast<double>(settings) * static_cast<double>(prompts) * config.repetitions;
  const double bytes = records * kMinRecordBytes;
  const auto gb = [](double b) {
    std::ostringstream os;
    os << std::setprecision(3) << b / 1e9 << " GB";
    return os.str();
  };
  const std::string what = std::to_string(settings) + " settings x " + std::to_string(prompts) + " prompts x " +
                           std::to_string(config.repetitions) + " repetitions, each record at least " +
                           std::to_string(static_cast<int>(kMinRecordBytes)) + " bytes: " + gb(bytes);
  const std::string key = config.where("experiment.repetitions");
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (memory > 0 && bytes > memory)
    fail(key, ": key 'experiment.repetitions' = ", config.repetitions, ": the run's records (", what,
         ") would not fit in this machine's ", gb(memory), " of memory, which keeps them for the summary");
  if (resume) return;
  std::error_code ec;
  fs::path disk = fs::absolute(folder, ec);
  while (!disk.empty() && disk != disk.root_path() && !fs::exists(disk, ec)) disk = disk.parent_path();
  const fs::space_info space = fs::space(disk.empty() ? fs::path(".") : disk, ec);
  if (!ec && bytes > static_cast<double>(space.available))
    fail(key, ": key 'experiment.repetitions' = ", config.repetitions, ": the run's records (", what,
         ") would not fit in the ", gb(static_cast<double>(space.available)), " free on the disk of ", disk.string());
}

// The records a resumed run keeps, read once and checked against the run they belong to before its folder changes:
// each from a setting, prompt and repetition of this run's configuration, baseline or not as its setting is, and
// none written twice, its tokens the target's. A folder begun by an earlier version, whose config.resolved.ini wrote
// num_prompts = 4 for a prompts file that was not cut, would otherwise resume on fewer prompts than it began with; an
// edited or corrupt records.jsonl would be summarised as more prompts, or another setting, than the run has. A last
// line cut short is left out, as the resume drops it (drop_partial_record).
std::vector<RunRecord> check_resumed_records(const fs::path& dir, size_t prompts, const std::vector<Setting>& settings,
                                             int repetitions, int32_t vocab_size) {
  const fs::path records = dir / "records.jsonl";
  if (!fs::exists(records)) return {};
  std::vector<RunRecord> out = read_records(records.string(), true);
  std::map<std::string, const Setting*> by_id;
  for (const Setting& s : settings) by_id[s.id] = &s;
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < out.size(); ++i) {
    const RunRecord& r = out[i];
    const std::string which = records.string() + ": record " + std::to_string(i + 1);
    if (r.prompt_index < 0 || static_cast<size_t>(r.prompt_index) >= prompts)
      fail("run --resume: ", dir.string(), ": its records hold prompt_index ", r.prompt_index, ", but ",
           (dir / "config.resolved.ini").string(), " gives ", prompts,
           " prompts (a num_prompts line that an earlier version wrote for a prompts file cuts it: remove that line "
           "to resume)");
    const auto setting = by_id.find(r.setting_id);
    if (setting == by_id.end())
      fail("run --resume: ", which, ": setting '", r.setting_id, "' is not one of this run's ", settings.size(),
           " settings (", (dir / "config.resolved.ini").string(), ")");
    if (r.baseline != setting->second->baseline)
      fail("run --resume: ", which, ": setting '", r.setting_id, "' is ", setting->second->baseline ? "" : "not ",
           "a baseline, but the record says it is", r.baseline ? "" : " not");
    if (r.repetition < 0 || r.repetition >= repetitions)
      fail("run --resume: ", which, ": repetition ", r.repetition, " is outside the run's ", repetitions,
           " (experiment.repetitions)");
    for (const Token t : r.tokens)
      if (t < 0 || t >= vocab_size)
        fail("run --resume: ", which, ": token ", t, " is outside the target's vocabulary [0, ", vocab_size, ")");
    const auto [first, fresh] = seen.emplace(record_key(r.setting_id, r.prompt_index, r.repetition), i + 1);
    if (!fresh)
      fail("run --resume: ", which, " repeats record ", first->second, " (setting '", r.setting_id, "', prompt ",
           r.prompt_index, ", repetition ", r.repetition, "): one of them was written twice or edited in");
  }
  return out;
}

// The experiment's target; an error about the model spec names the configuration's key.
std::shared_ptr<const LanguageModel> load_target(const ExperimentConfig& config) {
  try {
    return load_language_model(config.target, "target", config.weights_dtype,
                               model_device_for(parse_device(config.device)));
  } catch (const ParameterError& e) {
    const std::string where = config.where("experiment.target");
    fail(where, ": key 'experiment.target': ", e.parameter(), e.detail());
  }
}

// Runs the settings one after another, each assembled by run_builder.h as `generate` assembles its run, sharing
// what settings have in common (RunAssemblyCache: a drafter per drafter and draft sampler, a constraint's
// automaton). Errors about a parameter name the setting's key.
class SettingsRun {
 public:
  SettingsRun(RunState& run, const std::vector<Setting>& settings, RunAssemblyCache cache)
      : run_(run), cache_(std::move(cache)) {
    for (const Setting& s : settings) by_id_[s.id] = &s;
  }

  void run(const Setting& setting) {
    try {
      run_setting(setting);
    } catch (const ParameterError& e) {
      fail_at_key(run_.config, setting, e);
    }
  }

 private:
  void run_setting(const Setting& setting) {
    const RunDescription description = describe_setting(setting, run_.config);
    if (description.method.beam) {  // one search per recorded_settings (sweep.h): the draft axes do not apply
      run_beam_setting(run_, setting, assemble_target_sampler(description, *run_.target, cache_));
      return;
    }
    const AssembledRun assembled = assemble_run(description, run_.target, cache_);
    std::optional<SamplingParams> base_params;
    if (run_.config.paired_timing && !setting.baseline && by_id_.count(setting.baseline_id)) {
      RunDescription baseline = describe_setting(*by_id_.at(setting.baseline_id), run_.config);
      baseline.method = description.method;  // like for like: greedy against greedy
      baseline.temperature_given = description.temperature_given;
      base_params = assemble_target_sampler(baseline, *run_.target, cache_);
    }
    run_generation_setting(run_, setting, assembled.target_params, assembled.drafter,
                           base_params ? &*base_params : nullptr);
  }

  RunState& run_;
  std::map<std::string, const Setting*> by_id_;
  RunAssemblyCache cache_;
};

// `work` for one setting, an error in it named by the setting's key (a parameter) or id.
template <class Work>
auto at_setting(const ExperimentConfig& config, const Setting& setting, Work&& work) {
  try {
    return work();
  } catch (const ParameterError& e) {
    fail_at_key(config, setting, e);
  } catch (const Error& e) {
    fail(config.file, ": setting ", setting.id, ": ", e.what());
  }
}

// Every setting's target sampler assembled once before the results folder exists: a constraint's automaton is built
// over the target's tokens here (a pattern no token can begin, a token-strings file of the wrong length, both a
// regex and a schema), not when its setting's turn comes after earlier records. The settings reuse what is built. The
// target's own files (its end of sequence, its tokenizer's strings) are read first, so that an error in them names
// the target's key rather than a setting.
RunAssemblyCache check_setting_samplers(const ExperimentConfig& config, const LanguageModel& target,
                                        const std::vector<Setting>& settings) {
  RunAssemblyCache cache;
  std::vector<RunDescription> runs;
  bool eos = false, token_strings = false;
  for (const Setting& setting : settings) {
    const RunDescription& run =
        runs.emplace_back(at_setting(config, setting, [&] { return describe_setting(setting, config); }));
    eos = eos || !run.ignore_eos;
    token_strings = token_strings || (run.constraint.any() && run.constraint.token_strings_file.empty());
  }
  try {
    read_target_files(config.target, target.vocab_size(), eos, token_strings, cache);
  } catch (const Error& e) {
    fail(config.where("experiment.target"), ": key 'experiment.target' = '", config.target, "': ", e.what());
  }
  std::set<std::string> unread;  // said once per value, not once per setting
  for (size_t i = 0; i < settings.size(); ++i) {
    const SamplingParams params =
        at_setting(config, settings[i], [&] { return assemble_target_sampler(runs[i], target, cache); });
    if (const std::string why = min_tokens_unread_because(runs[i], params); !why.empty())
      if (unread.insert("min_tokens = " + std::to_string(params.min_tokens)).second)
        log(LogLevel::warn, "min_tokens = ", params.min_tokens, " is left unread: ", why);
  }
  return cache;
}

}  // namespace

std::string run_experiment(const std::string& path, const RunOptions& requested) {
  RunOptions options = requested;
  const bool resume = !options.resume_dir.empty();
  const std::string experiment_path = resume ? resumed_configuration(options) : path;
  const ExperimentConfig config = load_experiment(experiment_path, options.overrides, options.override_options);
  if (!resume) check_new_experiment(config);
  std::vector<Setting> settings = expand_sweep(config);
  if (options.shard_count > 1) {
    const int64_t speculative =
        std::count_if(settings.begin(), settings.end(), [](const Setting& s) { return !s.baseline; });
    settings = shard_of(settings, options.shard_index, options.shard_count);
    // Still run (its folder is what merge counts shards by), but said: more shards than settings waste their tasks.
    if (settings.empty())
      log(LogLevel::warn, "shard ", options.shard_index, "/", options.shard_count, " holds no setting: the sweep has ",
          speculative, " speculative settings, fewer than its shards");
  }
  settings = recorded_settings(settings);

  // Where the results go (output_dir/NAME/, which may exist already), before any model loads; a resumed run writes
  // into its own folder.
  if (!resume)
    check_output_folder_writable((fs::path(config.output_dir) / config.name).string(),
                                 config.where("experiment.output_dir") + ": key 'experiment.output_dir'");
  check_prompts_readable(config);
  // The [beam] values together (num_return against the width, groups dividing it), as generate checks them. Beam search
  // decodes one prompt at a time: in lockstep its time would be set against a batched baseline's.
  for (const Setting& setting : settings)
    if (setting_method(setting).beam)
      at_setting(config, setting, [&] {
        check_beam_config(beam_config(config));
        if (config.lockstep && parse_device(config.device) == Device::cpu)  // a device refuses beam search itself
          fail_parameter("method",
                         " beam decodes one prompt at a time, but lockstep = true times the baseline as a "
                         "batch of them: the ratio would be no speedup (run beam search without lockstep)");
      });
  // Every drafter's spec, then the target's vocabulary from its description and every drafter's against it, before
  // the first record (each drafter loads only when its settings run).
  const auto at_drafter_key = [&](const std::string& drafter, auto&& check) {
    try {
      check();
    } catch (const Error& e) {
      fail(config.where("draft.drafter"), ": key 'draft.drafter' = '", drafter, "': ", e.what());
    }
  };
  for (const std::string& drafter : config.axes.at("draft.drafter"))
    at_drafter_key(drafter, [&] { check_drafter_spec(drafter); });
  int32_t target_vocab = 0;
  try {
    target_vocab = language_model_vocab_size(config.target, "target");
  } catch (const Error& e) {
    fail(config.where("experiment.target"), ": key 'experiment.target' = '", config.target, "': ", e.what());
  }
  for (const std::string& drafter : config.axes.at("draft.drafter"))
    at_drafter_key(drafter, [&] { check_drafter_vocabulary(drafter, target_vocab, config.target); });
  // Each setting's method against its sampler (a greedy method with a temperature) and its draft's depth against its
  // drafter's (Medusa's heads), which the Generator checks once the models load: said here, not when its turn comes.
  for (const Setting& setting : settings)
    at_setting(config, setting, [&] {
      const RunDescription run = describe_setting(setting, config);
      SamplingParams target = run.target_params;
      apply_method_temperature(run.method, run.temperature_given, target);
      check_method_temperature(run.method.verify, target);
      if (!run.drafter_spec.empty()) {
        const GenerationConfig g = setting_generation(setting, config.max_new_tokens);
        check_drafter_depth(run.drafter_spec, draft_depth(g),
                            setting.values.count("draft.tree") ? "tree" : "num_draft_tokens");
        check_drafter_confidence(run.drafter_spec, g.confidence_threshold);
      }
    });
  omp_set_num_threads(config.threads);
  set_compute_threads(config.threads);
  // The prompts before the target: they need its tokenizer alone, and a corpus too short for them stops nothing loaded.
  const std::vector<std::vector<int32_t>> prompts = load_prompts(config, config.target);
  if (!resume) check_prompt_count(config, prompts.size());
  check_records_fit(config, settings.size(), prompts.size(), fs::path(config.output_dir) / config.name, resume);
  const std::shared_ptr<const LanguageModel> target = load_target(config);
  log(LogLevel::info, "experiment ", config.name, ": target ", target->description(), ", ", settings.size(),
      " settings x ", prompts.size(), " prompts x ", config.repetitions, " repetitions");
  check_settings_fit(config, *target, prompts, settings);
  // Said before the run rather than found as blank columns after it.
  const bool batched = config.lockstep || parse_device(config.device) != Device::cpu;
  if (config.profile && batched && prompts.size() > 1 &&
      std::isnan(config.profile->verify_cost(1, static_cast<int64_t>(prompts.size()))))
    log(LogLevel::warn, "the cost profile ", config.profile->file, " measured no batch of ", prompts.size(),
        " sequences, which this lockstep run decodes: its settings get no profile prediction (`bench forward "
        "--batches ",
        prompts.size(), "` measures one)");
  RunAssemblyCache cache = check_setting_samplers(config, *target, settings);
  // Checked before the folder's status changes: a refused resume leaves it as it was.
  const nlohmann::json inputs = run_inputs(config, prompts);
  std::vector<RunRecord> resumed;
  if (resume) {
    check_inputs_unchanged(options.resume_dir, inputs);
    resumed =
        check_resumed_records(options.resume_dir, prompts.size(), settings, config.repetitions, target->vocab_size());
  }

  const fs::path dir = open_results_folder(config, options, resume);
  write_status(dir, running_status());
  SignalGuard signals((dir / "status").string(), dir.string());
  try {
    if (resume) {
      // A folder begun before inputs.json was kept gets it now, so that later resumes are checked: its configuration
      // as the folder's file has it (an earlier version may have written it otherwise than this one would).
      if (!fs::exists(dir / "inputs.json")) {
        nlohmann::json kept = inputs;
        kept["configuration"] =
            configuration_compared(read_input_file((dir / "config.resolved.ini").string(), "run --resume"));
        write_output_file((dir / "inputs.json").string(), kept.dump() + "\n", "run");
      }
      drop_partial_record(dir);
      log(LogLevel::info, "resuming ", dir.string(), ": ", resumed.size(), " records already written");
    } else {
      write_run_description(dir, config, options);
      write_output_file((dir / "inputs.json").string(), inputs.dump() + "\n", "run");
    }
    AppendedOutput records_out((dir / "records.jsonl").string(), "run");
    RunProgress progress(static_cast<int64_t>(settings.size() * prompts.size() * config.repetitions), options.quiet);
    RunState run{config, target, prompts, std::move(resumed), {}, records_out, progress};
    for (const RunRecord& r : run.records) run.written.insert(record_key(r.setting_id, r.prompt_index, r.repetition));
    SettingsRun settings_run(run, settings, std::move(cache));
    for (const Setting& setting : settings) settings_run.run(setting);
    progress.finish();
    write_folder_summary(dir, run.records);
    write_status(dir, "complete");
    signals.status_written();
    return dir.string();
  } catch (const StopRequested& stop) {
    // The record in progress was finished and written; summarise what there is and say the run is not whole, and
    // which settings its summary has only in part.
    const std::vector<RunRecord> written = records_so_far(dir);
    write_folder_summary(dir, written);
    const std::string what = std::string("interrupted (") + stop_signal_name(stop.signal) + ")";
    write_status(dir, what);
    signals.status_written();
    const std::vector<std::string> partial =
        partial_settings(written, static_cast<int64_t>(prompts.size()) * config.repetitions);
    throw RunInterrupted("run " + what + ": " + dir.string() + " holds the records written so far and their summary" +
                             (partial.empty() ? "" : " (in part: " + join_items(partial) + ")"),
                         stop.signal);
  } catch (const std::exception& e) {
    // What was written is summarised as for an interrupted run, so that the settings done are not lost with the one
    // that failed (a summary that cannot be written, as on a full disk, is said and leaves the records as they are).
    try {
      // A failed write (a full disk) may have cut the last line: the whole records before it are kept.
      const fs::path path = dir / "records.jsonl";
      const std::vector<RunRecord> written =
          fs::exists(path) ? read_records(path.string(), true) : std::vector<RunRecord>{};
      write_folder_summary(dir, written);
      if (!written.empty())
        log(LogLevel::warn, "the run failed; ", dir.string(), "/summary.csv summarises the ", written.size(),
            " records written before it (`specula plot ", dir.string(), " --allow-incomplete` draws them)");
    } catch (const std::exception& summary) {
      log(LogLevel::warn, "the run failed, and its records could not be summarised: ", summary.what());
    }
    write_status(dir, std::string("failed: ") + e.what());
    signals.status_written();
    throw;
  }
}

}  // namespace specula
