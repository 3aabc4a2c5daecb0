// What one setting of an experiment's sweep becomes: its sampler parameters, output constraint, decoding method
// and generation config, and its beam search; the checks a whole sweep must pass before any work (device
// support, prompts that fit the target); and the experiment's prompts. Errors about a parameter name the
// setting's key in the experiment file.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/experiment/experiment_config.h"
#include "harness/experiment/sweep.h"
#include "harness/generation/beam_search.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/generator.h"
#include "harness/models/language_model.h"
#include "harness/runner/run_builder.h"
#include "kernels/shared/error.h"
#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_constraint.h"

namespace specula {

// Sampler parameters from the setting's values of one section ("sampling" or "draft_sampling") over `params`,
// parsed by the same option code as the command line.
SamplingParams sampler_params(const Setting& setting, const std::string& section, SamplingParams params);

// The setting as a run description (run_builder.h), which assemble_run turns into samplers and a drafter as it
// does `generate`'s options: its samplers as read, method, draft shape and drafter, and the experiment's target,
// stop rule, constraint and device.
RunDescription describe_setting(const Setting& setting, const ExperimentConfig& config);

// [beam] over the defaults of harness/generation/beam_search.h (the values were checked when the config was read).
BeamSearchConfig beam_config(const ExperimentConfig& config);

// A setting's method, draft shape and generation config (ar for the baselines); the second also sets the device.
DecodingMethod setting_method(const Setting& setting);
GenerationConfig setting_generation(const Setting& setting, int32_t max_new_tokens);
GenerationConfig setting_generation(const Setting& setting, const ExperimentConfig& config);

// Every prompt must fit the target with the longest generation and draft tree of the sweep, and every setting
// must be one the device can run: checked before the run starts, not at the position that overflows halfway
// through it.
void check_settings_fit(const ExperimentConfig& config, const LanguageModel& target,
                        const std::vector<std::vector<int32_t>>& prompts, const std::vector<Setting>& settings);

// A lower layer's error about a parameter (harness/generation names them), said as the experiment key that set it.
[[noreturn]] void fail_at_key(const ExperimentConfig& config, const Setting& setting, const ParameterError& e);

// Whether the experiment's prompts file (or corpus) opens: checked with the other files before the prompts are read
// (they need the target's tokenizer). Throws Error naming the key.
void check_prompts_readable(const ExperimentConfig& config);

// Loads the prompts of an experiment as token ids (text prompts through the target's tokenizer).
std::vector<std::vector<int32_t>> load_prompts(const ExperimentConfig& config, const std::string& target_spec);
// A new run's num_prompts against the prompts its file holds (load_prompts takes the first num_prompts; a file of fewer
// would run fewer than config.resolved.ini records). Not on resume: a folder begun by an earlier version wrote
// num_prompts = 4 for a prompts file it did not cut.
void check_prompt_count(const ExperimentConfig& config, size_t prompts);

}  // namespace specula
