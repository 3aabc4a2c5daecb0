// An experiment file (`specula run experiments/NAME.ini`): what to run and which axes to sweep.
//
//   [experiment]  name, target, prompts | prompts_from_corpus (+ num_prompts, prompt_length, corpus_tail),
//                 max_new_tokens, repetitions, seed, threads, output_dir, paired_timing, weights_dtype,
//                 ignore_eos, device, cost_profile, lockstep
//   [draft]       drafter, method, num_draft_tokens, num_draft_tokens_schedule, confidence_threshold, tree,
//                 tree_sampling
//   [sampling]    any sampler option of `specula sample` (target and draft)
//   [draft_sampling]  sampler overrides for the draft only
//   [beam]        options of `method = beam` (not swept): width, groups, diversity_penalty,
//                 length_penalty, early_stopping, num_return
//
// [sampling] also takes a constraint (verify/sampling/token_constraint.h), shared by target and draft:
// regex (values separated by ' | ' with spaces, so a pattern's own '|' needs none around it; `none` = no
// constraint), json_schema (schema files, '|'-separated, `none` = no constraint) and token_strings (a
// token-strings file for models without a tokenizer).
//
// Any key of [draft], [sampling] and [draft_sampling] may hold a list of values to sweep. Scalar keys
// separate values with ','  (num_draft_tokens = 1,2,4; temperature = 0, 0.8); keys whose single value
// already contains commas (drafter, tree, token lists, logit_bias, sampler_order) separate values with
// '|' (tree = 2,2,1 | 4,2). Every value is checked when the file is read; errors name file, line, key.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/config/ini_file.h"
#include "harness/experiment/cost_profile.h"

namespace specula {

struct ExperimentConfig {
  std::string file;  // the experiment file as given
  std::string name;
  std::string target;
  std::string prompts_file;         // one prompt per line ("\n" escapes a newline); token ids for table models
  std::string prompts_from_corpus;  // or: num_prompts excerpts of prompt_length characters from a corpus
  int num_prompts = 4;
  int prompt_length = 200;
  // Excerpts come from the last corpus_tail of the corpus (1 = anywhere): e.g. 0.1 is the part a model
  // trained with validation_fraction 0.1 never saw.
  double corpus_tail = 1.0;
  int max_new_tokens = 64;
  int repetitions = 3;
  // Each speculative generation is timed beside a baseline generation of the same prompt (order alternating)
  // and its speedup is the ratio within the pair: drift in the machine's load lands in both arms alike.
  bool paired_timing = true;
  // The target's matrices in memory (transformer: and hf: models): float32 | bfloat16 | float16 | auto (as
  // stored).
  std::string weights_dtype = "auto";
  // Generation ends at a stop token ([sampling] stop_tokens) and, unless ignore_eos, at the target
  // checkpoint's eos_token_id (harness/models/eos_tokens.h).
  bool ignore_eos = false;
  uint64_t seed = 1;
  int threads = 1;
  std::string output_dir = "results";
  // Where target rows are sampled and verified: cpu | cuda | cuda-host (harness/generation/generator.h). On a
  // device the prompts x repetitions of a setting run as one lockstep batch per repetition.
  std::string device = "cpu";
  // On the CPU too, each repetition of a setting runs its prompts as one lockstep batch: one target forward per
  // step for all of them (GenerationConfig::lockstep). num_prompts is then the batch size.
  bool lockstep = false;
  // Another machine's step costs (cost_profile.h; measured on this experiment's target, checked when read): the
  // summary adds the speedup each setting would have there. Copied into the results folder as cost-profile.json.
  std::string cost_profile;
  std::optional<CostProfile> profile;  // that file as read and checked by load_experiment

  // Sweep axes: "section.key" -> values (a single value is an axis of length 1). Ordered for stable sweeps.
  std::map<std::string, std::vector<std::string>> axes;
  // Where each value came from, for error messages ("file:line", or "--set KEY").
  std::map<std::string, std::string> origin;
  // Where `key` was given, or the experiment file for a key left at its default: what an error about it names first.
  std::string where(const std::string& key) const {
    const auto it = origin.find(key);
    return it == origin.end() ? file : it->second;
  }
  // [beam] options, one value each.
  std::map<std::string, std::string> beam;

  // The file with every value actually used (lists as written), for config.resolved.ini.
  std::string resolved_ini() const;
  // Whether some setting drafts (its method is speculative); and whether every method that drafts verifies the tree of
  // draft.tree, whose shape sets the depth, so that no setting reads num_draft_tokens.
  bool drafts() const;
  bool depth_from_tree() const;
};

// Reads `path` and applies `overrides` ("section.key=value", the command line wins). Throws Error naming
// file, line and key for unknown keys, malformed values and missing required keys. An override is named
// "--set section.key" in errors, or by `override_options`' entry for its key where a command-line option of its own
// gave it (run's --cost-profile).
ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                                 const std::map<std::string, std::string>& override_options = {});

// Rules for an experiment a user wrote, which a run's own saved copy (config.resolved.ini, read to resume or plot it)
// need not meet when it was written before them: no sweep value listed twice (it would be merged into one setting),
// no [beam] option where no setting uses method = beam (it would be ignored). Error naming file:line and key.
void check_new_experiment(const ExperimentConfig& config);

// True for keys whose list separator is '|' rather than ','.
bool key_uses_bar_separator(const std::string& key);
std::vector<std::string> split_values(const std::string& key, const std::string& value);

// The num_prompts excerpts of prompt_length characters an experiment takes from `corpus`: at fixed
// pseudo-random offsets (Philox, seeded by the experiment) inside the last corpus_tail of it, each moved back
// to the start of its line when that line starts inside the region.
std::vector<std::string> corpus_excerpts(const std::string& corpus, const ExperimentConfig& config);

}  // namespace specula
