#include "harness/runner/run_builder.h"

#include "draft/registry/drafter_registry.h"
#include "harness/config/device_options.h"
#include "harness/io/input_file.h"
#include "harness/models/eos_tokens.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

// The stop rule: the sampler's own stop tokens plus, unless ignored, the checkpoint's end of sequence (so that
// min_tokens masks it in every row, the draft's included).
void add_checkpoint_stops(const RunDescription& run, const LanguageModel& target, RunAssemblyCache& cache,
                          SamplingParams& params) {
  if (run.ignore_eos) return;
  read_target_files(run.target_spec, target.vocab_size(), true, false, cache);
  add_stop_tokens(params, cache.eos.at(run.target_spec));
}

// One automaton per distinct constraint, stop set and sampler masks (the target's; the draft shares it, see
// assemble_run).
std::shared_ptr<const TokenConstraint> constraint_of(const RunDescription& run, const LanguageModel& target,
                                                     const SamplingParams& params, RunAssemblyCache& cache) {
  const ConstraintOptions& o = run.constraint;
  if (!o.any()) return nullptr;
  std::string key = run.target_spec + "\n" + o.regex + "\n" + o.json_schema_file + "\n" + o.token_strings_file + "\n";
  for (Token t : params.stop_tokens) key += std::to_string(t) + ",";
  SamplerMasks masks = sampler_masks(params, target.vocab_size());
  key += "\n" + std::to_string(masks.min_tokens) + "\n" + std::string(masks.permitted.begin(), masks.permitted.end());
  for (const std::vector<Token>& word : masks.bad_words) {
    key += "\n";
    for (Token t : word) key += std::to_string(t) + ",";
  }
  std::shared_ptr<const TokenConstraint>& slot = cache.constraints[key];
  if (!slot) {
    std::vector<std::string> tokenizer_strings;
    if (o.token_strings_file.empty()) {
      read_target_files(run.target_spec, target.vocab_size(), false, true, cache);
      tokenizer_strings = cache.token_strings.at(run.target_spec);
    }
    ConstraintFileTexts texts;
    if (!o.json_schema_file.empty())
      texts.json_schema =
          !run.json_schema_text.empty() ? run.json_schema_text : read_parameter_file(o.json_schema_file, "json_schema");
    if (!o.token_strings_file.empty()) texts.token_strings = read_parameter_file(o.token_strings_file, "token_strings");
    slot = constraint_from_options(o, texts, target.vocab_size(), std::move(tokenizer_strings), params.stop_tokens,
                                   std::move(masks));
  }
  return slot;
}

// A sampler as the run uses it: the stop rule, the constraint, and greedy methods' temperature 0 unless given.
// `shared`: the automaton to follow instead of building the run's own (the draft's is the target's).
SamplingParams assembled_sampler(const RunDescription& run, const LanguageModel& target, RunAssemblyCache& cache,
                                 SamplingParams params, bool temperature_given,
                                 std::shared_ptr<const TokenConstraint> shared = nullptr) {
  add_checkpoint_stops(run, target, cache, params);
  params.constraint = shared ? std::move(shared) : constraint_of(run, target, params, cache);
  apply_method_temperature(run.method, temperature_given, params);
  return params;
}

}  // namespace

void read_target_files(const std::string& target_spec, int32_t vocab_size, bool eos, bool token_strings,
                       RunAssemblyCache& cache) {
  if (eos && !cache.eos.count(target_spec)) cache.eos[target_spec] = checkpoint_eos_tokens(target_spec, vocab_size);
  if (token_strings && !cache.token_strings.count(target_spec)) {
    std::vector<std::string> strings;
    if (const auto tokenizer = load_tokenizer_for(target_spec))
      strings = token_strings_for_constraints(*tokenizer, vocab_size);
    cache.token_strings[target_spec] = std::move(strings);
  }
}

SamplingParams assemble_target_sampler(const RunDescription& run, const LanguageModel& target,
                                       RunAssemblyCache& cache) {
  return assembled_sampler(run, target, cache, run.target_params, run.temperature_given);
}

std::string min_tokens_unread_because(const RunDescription& run, const SamplingParams& assembled) {
  if (assembled.min_tokens <= 0 || !assembled.stop_tokens.empty()) return "";
  return std::string("no stop token is set (none is given, and ") +
         (run.ignore_eos ? "the checkpoint's end of sequence is ignored"
                         : "the target names no end-of-sequence token") +
         ")";
}

AssembledRun assemble_run(const RunDescription& run, const std::shared_ptr<const LanguageModel>& target,
                          RunAssemblyCache& cache) {
  AssembledRun out;
  out.target_params = assemble_target_sampler(run, *target, cache);
  // The draft follows the target's automaton even with stop tokens of its own: its rows' histories carry the
  // target's state ids (draft paths start from the committed history), which another automaton numbers otherwise.
  out.draft_params = assembled_sampler(run, *target, cache, run.draft_params, run.draft_temperature_given,
                                       out.target_params.constraint);
  out.draft_params.constraint_yields_to_masks = true;  // the draft's own masks may ban what the automaton allows
  out.config = generation_config(run.method, run.shape, run.max_new_tokens, run.seed);
  out.config.device = run.device;
  out.config.emulation = run.emulation;
  out.config.logprobs = run.logprobs;
  if (run.method.speculative()) {
    if (run.drafter_spec.empty()) fail_parameter("method", " ", run.method.name, " needs a draft model");
    // Drafters keep their sampler: one per drafter and sampler values, and per temperature (greedy methods set 0).
    if (run.sampler_text.empty()) {
      out.drafter =
          load_drafter(run.drafter_spec, out.draft_params, target, out.target_params, model_device_for(run.device));
    } else {
      const std::string key = run.drafter_spec + "|" + run.sampler_text +
                              "|T=" + std::to_string(out.draft_params.temperature) + "," +
                              std::to_string(out.target_params.temperature);
      std::shared_ptr<const DrafterFactory>& slot = cache.drafters[key];
      if (!slot)
        slot =
            load_drafter(run.drafter_spec, out.draft_params, target, out.target_params, model_device_for(run.device));
      out.drafter = slot;
    }
  }
  return out;
}

}  // namespace specula
