// One decoding run, as `generate` reads it from its flags and `run` from each setting of its sweep: the run
// description, read and checked where it was parsed, then assembled here the same way for both front ends into
// the target's and the draft's samplers (with the stop rule, the output constraint and the method's temperature),
// the drafter and the generation loop's configuration.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "draft/drafter.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/generator.h"
#include "harness/models/language_model.h"
#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_constraint.h"

namespace specula {

struct RunDescription {
  std::string target_spec;               // the target's model spec: its checkpoint's end of sequence, its tokenizer
  DecodingMethod method;                 // ar, beam or a verification method
  DraftShape shape;                      // K, the tree, the siblings' scheme
  SamplingParams target_params;          // as read: the [sampling] values, or the sampler flags
  SamplingParams draft_params;           // as read: the target's values with the draft's overrides
  bool temperature_given = false;        // the target's temperature was set (greedy methods default it to 0)
  bool draft_temperature_given = false;  // the draft's was (its own, or the target's)
  std::string drafter_spec;              // --draft / draft.drafter; "" for none
  ConstraintOptions constraint;          // --regex / --json-schema / --token-strings, or [sampling]'s keys
  std::string json_schema_text;          // the schema's text when the command has read it (once: a pipe reads once)
  bool ignore_eos = false;               // no stop at the checkpoint's end-of-sequence tokens
  int32_t max_new_tokens = 0;
  uint64_t seed = 0;
  Device device = Device::cpu;
  EmulationOptions emulation;
  int32_t logprobs = -1;
  // The text of every value the samplers were read from (`run`: the setting's sampling keys), which with the
  // drafter's spec names the drafter in RunAssemblyCache; "" loads a drafter of its own.
  std::string sampler_text;
};

// What the settings of one `run` share while they are assembled: a drafter per distinct drafter and draft sampler
// (loading a model costs time), and one automaton per constraint and target stop set (the draft follows the
// target's: they exchange its state ids).
struct RunAssemblyCache {
  std::map<std::string, std::shared_ptr<const DrafterFactory>> drafters;
  std::map<std::string, std::shared_ptr<const TokenConstraint>> constraints;
  std::map<std::string, std::vector<Token>> eos;  // by target spec
  // By target spec: its tokenizer's token strings, for constraints without a token-strings file (empty: none).
  std::map<std::string, std::vector<std::string>> token_strings;
};

// What a run takes from the target's checkpoint rather than from its settings, read into `cache` once: the end of
// sequence (unless every run ignores it) and, where a constraint needs them, the tokenizer's token strings. Reading
// them before the settings lets an error in them be reported as the target's, not as the first setting's to meet it.
void read_target_files(const std::string& target_spec, int32_t vocab_size, bool eos, bool token_strings,
                       RunAssemblyCache& cache);

struct AssembledRun {
  SamplingParams target_params, draft_params;     // with the stop rule, the constraint and the method's temperature
  std::shared_ptr<const DrafterFactory> drafter;  // null for ar and beam
  GenerationConfig config;
};

// The target's sampler alone (a paired baseline's: `method` decides its temperature, like for like).
SamplingParams assemble_target_sampler(const RunDescription& run, const LanguageModel& target, RunAssemblyCache& cache);

// Why a sampler's min_tokens changes nothing once assembled, or "" where it binds: it bans only stop tokens, and the
// run has none (no stop tokens given, and the checkpoint's end of sequence absent or ignored). Known only after
// assembly, which adds the checkpoint's: the front ends say it then.
std::string min_tokens_unread_because(const RunDescription& run, const SamplingParams& assembled);

// The whole run. The drafter is loaded (or taken from the cache) only for a speculative method.
AssembledRun assemble_run(const RunDescription& run, const std::shared_ptr<const LanguageModel>& target,
                          RunAssemblyCache& cache);

}  // namespace specula
