#include "harness/runner/setting_configs.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/generation/draft_schedule.h"
#include "harness/io/input_file.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "verify/device/batch_verifier.h"

namespace specula {
namespace {

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

// Every prompt's token ids against the target's vocabulary, naming the prompts' file.
void check_prompt_tokens(const ExperimentConfig& config, const LanguageModel& target,
                         const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < prompts.size(); ++i)
    for (int32_t t : prompts[i])
      if (t < 0 || t >= target.vocab_size())
        fail(config.prompts_file.empty() ? config.prompts_from_corpus : config.prompts_file, ": prompt ", i + 1,
             " holds token ", t, ", outside the target's vocabulary (", target.vocab_size(), " tokens)");
}

// A setting's token ids (stop_tokens, logit_bias, ...) in [sampling] and [draft_sampling] against the target's
// vocabulary. SamplingParams::validate names the parameter first in its message, so the key is the setting's key of
// that name.
void check_setting_tokens(const ExperimentConfig& config, const LanguageModel& target, const Setting& setting) {
  for (const std::string section : {"sampling", "draft_sampling"}) {
    const auto vocabulary = [&] {
      return " (the target " + target.description() + " has " + std::to_string(target.vocab_size()) + " tokens)";
    };
    try {
      sampler_params(setting, section, sampler_params(setting, "sampling", SamplingParams{}))
          .validate(target.vocab_size());
    } catch (const ParameterError& e) {
      // The key of the section being checked; a draft value inherited from [sampling] is that section's key.
      std::string key = section + "." + e.parameter();
      if (!config.origin.count(key) && config.origin.count("sampling." + e.parameter()))
        key = "sampling." + e.parameter();
      const std::string where = config.where(key);
      fail(where, ": key '", key, "' (setting ", setting.id, "): ", e.what(), vocabulary());
    } catch (const Error& e) {  // a rule over two parameters: the section's values, with those it inherits
      fail(config.file, ": (setting ", setting.id, ") [", section, "]",
           section == "sampling" ? "" : " (with the [sampling] values it inherits)", ": ", e.what(), vocabulary());
    }
  }
}

}  // namespace

SamplingParams sampler_params(const Setting& setting, const std::string& section, SamplingParams params) {
  std::map<std::string, std::string> values;
  for (const auto& [key, value] : setting.values) {
    if (key.rfind(section + ".", 0) != 0) continue;
    const std::string name = key.substr(section.size() + 1);
    if (name != "regex" && name != "json_schema" && name != "token_strings") values[name] = value;  // constraints
  }
  return read_sampler_values(values, params);
}

RunDescription describe_setting(const Setting& setting, const ExperimentConfig& config) {
  RunDescription run;
  run.target_spec = config.target;
  run.method = setting_method(setting);
  const GenerationConfig g = setting_generation(setting, config.max_new_tokens);
  run.shape.num_draft_tokens = g.num_draft_tokens;
  run.shape.num_draft_tokens_given = true;  // setting_generation already applied the default's cut
  run.shape.tree_shape = g.tree_shape;
  run.shape.tree_sampling = g.tree_sampling;
  run.shape.num_draft_tokens_schedule = g.num_draft_tokens_schedule;
  run.shape.confidence_threshold = g.confidence_threshold;
  run.target_params = sampler_params(setting, "sampling", SamplingParams{});
  run.draft_params = sampler_params(setting, "draft_sampling", run.target_params);
  run.temperature_given = setting.values.count("sampling.temperature") > 0;
  run.draft_temperature_given = run.temperature_given || setting.values.count("draft_sampling.temperature") > 0;
  if (!setting.baseline && run.method.speculative()) run.drafter_spec = setting.get("draft.drafter");
  if (setting.get_or("sampling.regex", "none") != "none") run.constraint.regex = setting.get("sampling.regex");
  if (setting.get_or("sampling.json_schema", "none") != "none")
    run.constraint.json_schema_file = setting.get("sampling.json_schema");
  run.constraint.token_strings_file = setting.get_or("sampling.token_strings", "");
  run.ignore_eos = config.ignore_eos;
  run.max_new_tokens = config.max_new_tokens;
  run.seed = config.seed;
  run.device = parse_device(config.device);
  for (const auto& [k, v] : setting.values)
    if (k.rfind("sampling.", 0) == 0 || k.rfind("draft_sampling.", 0) == 0) run.sampler_text += k + "=" + v + ";";
  return run;
}

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
    shape.num_draft_tokens_schedule =
        parse_draft_schedule(setting.get_or("draft.num_draft_tokens_schedule", "constant"));
    shape.confidence_threshold = parse_confidence_threshold(setting.get_or("draft.confidence_threshold", "0"));
  }
  return generation_config(method, shape, max_new_tokens, 0);
}

GenerationConfig setting_generation(const Setting& setting, const ExperimentConfig& config) {
  GenerationConfig g = setting_generation(setting, config.max_new_tokens);
  g.device = parse_device(config.device);
  g.lockstep = config.lockstep;
  return g;
}

void check_settings_fit(const ExperimentConfig& config, const LanguageModel& target,
                        const std::vector<std::vector<int32_t>>& prompts, const std::vector<Setting>& settings) {
  const Device device = parse_device(config.device);
  require_device(device);  // "no CUDA device: ..." before a results folder is made
  check_prompt_tokens(config, target, prompts);
  for (const Setting& setting : settings) {  // each setting's draft shape against max_new_tokens
    try {
      check_setting_tokens(config, target, setting);
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

[[noreturn]] void fail_at_key(const ExperimentConfig& config, const Setting& setting, const ParameterError& e) {
  static const std::map<std::string, std::string> keys = {
      {"draft", "draft.drafter"},
      {"method", "draft.method"},
      {"num_draft_tokens", "draft.num_draft_tokens"},
      {"num_draft_tokens_schedule", "draft.num_draft_tokens_schedule"},
      {"confidence_threshold", "draft.confidence_threshold"},
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
  };
  // Sampler parameters are keys of [sampling] by their own names (an option's name with '_' for '-').
  const auto it = keys.find(e.parameter());
  const std::string key = it != keys.end()                                   ? it->second
                          : config.origin.count("sampling." + e.parameter()) ? "sampling." + e.parameter()
                                                                             : e.parameter();
  const std::string where = config.where(key);
  fail(where, ": key '", key, "' (setting ", setting.id, "): ", e.parameter(), e.detail());
}

namespace {

// The key an experiment's prompts come from, and where it was set, for messages.
std::string prompts_key(const ExperimentConfig& c) {
  const std::string key = c.prompts_file.empty() ? "experiment.prompts_from_corpus" : "experiment.prompts";
  return c.where(key) + ": key '" + key + "'";
}

}  // namespace

void check_prompts_readable(const ExperimentConfig& c) {
  open_input_file(c.prompts_file.empty() ? c.prompts_from_corpus : c.prompts_file, prompts_key(c));
}

void check_prompt_count(const ExperimentConfig& c, size_t prompts) {
  if (!c.prompts_file.empty() && c.origin.count("experiment.num_prompts") &&
      prompts < static_cast<size_t>(c.num_prompts))
    fail(c.origin.at("experiment.num_prompts"), ": key 'experiment.num_prompts' = ", c.num_prompts, ", but ",
         c.prompts_file, " holds ", prompts, " prompts");
}

std::vector<std::vector<int32_t>> load_prompts(const ExperimentConfig& c, const std::string& target_spec) {
  const std::shared_ptr<const Tokenizer> tokenizer = load_tokenizer_for(target_spec);
  std::vector<std::string> texts;
  if (!c.prompts_file.empty()) {
    std::istringstream in(read_text_file(c.prompts_file, prompts_key(c)));
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();  // a file with Windows line ends
      if (!line.empty() && line[0] != '#') texts.push_back(unescape_newlines(line));
    }
    if (c.origin.count("experiment.num_prompts") && static_cast<int>(texts.size()) > c.num_prompts)
      texts.resize(c.num_prompts);
  } else {
    const std::string corpus = read_input_file(c.prompts_from_corpus, prompts_key(c));
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

}  // namespace specula
