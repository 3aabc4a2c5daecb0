#include "harness/experiment/experiment_config.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/experiment/cost_profile.h"
#include "harness/generation/beam_search.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/draft_schedule.h"
#include "harness/generation/generator.h"
#include "harness/io/home_path.h"
#include "harness/io/input_file.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "kernels/shared/philox.h"
#include "kernels/shared/thread_limit.h"
#include "verify/constraints/json_schema.h"
#include "verify/constraints/regex.h"
#include "verify/verifiers/token_tree.h"
#include "verify/verifiers/verification.h"

namespace specula {
namespace {

// `work`'s value, or its Error placed at the file's line and key.
template <typename Work>
std::string with_where(const std::string& where, const std::string& key, Work&& work) {
  try {
    return work();
  } catch (const Error& e) {
    fail(where, ": key '", key, "': ", e.what());
  }
}

const std::set<std::string>& experiment_keys() {
  static const std::set<std::string> keys = {"name",          "target",        "prompts",     "prompts_from_corpus",
                                             "num_prompts",   "prompt_length", "corpus_tail", "max_new_tokens",
                                             "repetitions",   "seed",          "threads",     "output_dir",
                                             "paired_timing", "weights_dtype", "ignore_eos",  "device",
                                             "cost_profile",  "lockstep"};
  return keys;
}

const std::set<std::string>& draft_keys() {
  static const std::set<std::string> keys = {
      "drafter", "method",       "num_draft_tokens", "num_draft_tokens_schedule", "confidence_threshold",
      "tree",    "tree_sampling"};
  return keys;
}

// The sampler option names of `specula sample`, spelled with underscores.
const std::set<std::string>& sampler_keys() {
  static const std::set<std::string> keys = [] {
    po::options_description desc;
    add_sampler_options(desc);
    std::set<std::string> out;
    for (const auto& opt : desc.options()) {
      std::string name = opt->long_name();
      std::replace(name.begin(), name.end(), '-', '_');
      out.insert(name);
    }
    return out;
  }();
  return keys;
}

// Constraint keys of [sampling]: not sampler options of `specula sample` (they need the model's tokens).
const std::set<std::string>& constraint_keys() {
  static const std::set<std::string> keys = {"regex", "json_schema", "token_strings"};
  return keys;
}

const std::set<std::string>& beam_keys() {
  static const std::set<std::string> keys = {"width",          "groups",         "diversity_penalty",
                                             "length_penalty", "early_stopping", "num_return"};
  return keys;
}

// A count of the int fields they fill: a value past 32 bits is refused as written, never wrapped (4294967304 would
// read as 8).
int parse_int(const std::string& where, const std::string& key, const std::string& value, long min,
              long max = INT32_MAX) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0') fail(where, ": key '", key, "': '", value, "' is not an integer");
  if (v < min) fail(where, ": key '", key, "': ", value, " must be >= ", min);  // strtol's LONG_MIN too
  if (v > max || errno == ERANGE) fail(where, ": key '", key, "': ", value, " must be <= ", max);
  return static_cast<int>(v);
}

// A seed: any 64-bit unsigned value, refused (not wrapped or clamped) outside it.
uint64_t parse_seed(const std::string& where, const std::string& key, const std::string& value) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || value[0] == '-' || value[0] == '+')
    fail(where, ": key '", key, "': '", value, "' is not an unsigned integer");
  if (errno == ERANGE) fail(where, ": key '", key, "': ", value, " does not fit 64 bits");
  return static_cast<uint64_t>(v);
}

// Checks one value of a sweep axis by parsing it the way the run will.
void check_axis_value(const std::string& where, const std::string& key, const std::string& value) {
  const std::string section = key.substr(0, key.find('.'));
  const std::string name = key.substr(key.find('.') + 1);
  try {
    if (key == "draft.method") {
      parse_decoding_method(value);
    } else if (key == "draft.num_draft_tokens") {
      parse_int(where, key, value, 1, kMaxDraftTokens);
    } else if (key == "draft.tree") {
      parse_tree_shape(value, "tree");
    } else if (key == "draft.tree_sampling") {
      parse_sibling_scheme(value);
    } else if (key == "draft.num_draft_tokens_schedule") {
      parse_draft_schedule(value);
    } else if (key == "draft.confidence_threshold") {
      parse_confidence_threshold(value);
    } else if (section == "sampling" && constraint_keys().count(name)) {
      if (name == "regex" && value != "none") compile_regex(value);
      if (name != "regex" && !(name == "json_schema" && value == "none")) {
        // The file's own messages name its path, so the key is named without its value.
        const std::string what = where + ": key '" + key + "'";
        // A schema is text; token strings are bytes (a byte tokenizer's token 0 is a NUL).
        const std::string text = name == "json_schema" ? read_text_file(value, what) : read_input_file(value, what);
        try {
          if (name == "json_schema") compile_json_schema(text, value);
        } catch (const Error& e) {
          fail(what, ": ", e.what());
        }
      }
    } else if (section == "sampling" || section == "draft_sampling") {
      // Read as the run will read it (read_sampler_values: the command line's option code).
      read_sampler_values({{name, value}}, SamplingParams{}).validate(std::numeric_limits<int32_t>::max());
    }
  } catch (const po::error& e) {
    fail(where, ": key '", key, "' = '", value, "': ", e.what());
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.rfind(where, 0) == 0) throw;
    fail(where, ": key '", key, "' = '", value, "': ", msg);
  }
}

// One key's value, the key as written (for messages) and as the options name it (`key`, underscores).
void apply_key(ExperimentConfig& c, const std::string& written, const std::string& key, const std::string& raw,
               const std::string& where) {
  const size_t dot = key.find('.');
  const std::string section = key.substr(0, dot);
  const std::string name = key.substr(dot + 1);
  const std::string value = trim(raw);
  if (section == "experiment") {
    if (!experiment_keys().count(name))
      fail(where, ": unknown key '", written,
           "' (known in [experiment]: name, target, prompts, prompts_from_corpus, "
           "num_prompts, prompt_length, corpus_tail, max_new_tokens, repetitions, seed, threads, output_dir, "
           "paired_timing, weights_dtype, ignore_eos, device, cost_profile, lockstep)");
    if (name == "name") {
      // The results go to output_dir/NAME/: a name is one folder name, never a path out of output_dir.
      if (value.empty() || value == "." || value == ".." || value.find('/') != std::string::npos)
        fail(where, ": key '", key, "': '", value, "' is not a plain folder name");
      c.name = value;
    }
    // Paths written in the file: a leading `~` is the home folder, as on a command line (the shell's expansion).
    const auto path = [&] { return with_where(where, key, [&] { return expand_home(value); }); };
    if (name == "target") c.target = with_where(where, key, [&] { return expand_home_in_spec(value); });
    if (name == "prompts") c.prompts_file = path();
    if (name == "prompts_from_corpus") c.prompts_from_corpus = path();
    if (name == "num_prompts") c.num_prompts = parse_int(where, key, value, 1);
    if (name == "prompt_length") c.prompt_length = parse_int(where, key, value, 1);
    if (name == "corpus_tail") {
      char* end = nullptr;
      const double tail = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(tail > 0.0 && tail <= 1.0))
        fail(where, ": key '", key, "': '", value, "' is not a fraction in (0, 1]");
      c.corpus_tail = tail;
    }
    if (name == "max_new_tokens") c.max_new_tokens = parse_int(where, key, value, 1, kMaxNewTokens);
    if (name == "repetitions") c.repetitions = parse_int(where, key, value, 1);
    if (name == "seed") c.seed = parse_seed(where, key, value);
    if (name == "threads") c.threads = parse_int(where, key, value, 1, kMaxThreads);
    if (name == "output_dir") {
      if (value.empty()) fail(where, ": key '", key, "' has no value");
      c.output_dir = path();
    }
    if (name == "weights_dtype") {
      if (value != "auto" && value != "float32" && value != "float16" && value != "bfloat16")
        fail(where, ": key '", key, "': '", value, "' is not float32, bfloat16, float16 or auto");
      c.weights_dtype = value;
    }
    if (name == "device") {
      try {
        parse_device(value);
      } catch (const Error&) {
        fail(where, ": key '", key, "': '", value, "' is not cpu, cuda or cuda-host");
      }
      c.device = value;
    }
    if (name == "cost_profile") c.cost_profile = path();  // read when the file is whole (load_experiment)
    if (name == "paired_timing" || name == "ignore_eos" || name == "lockstep") {
      if (value != "true" && value != "false") fail(where, ": key '", key, "': '", value, "' is not true or false");
      (name == "paired_timing" ? c.paired_timing : name == "ignore_eos" ? c.ignore_eos : c.lockstep) = value == "true";
    }
    c.origin[key] = where;
    return;
  }
  if (section == "beam") {
    // generate's names (--beam-width, --num-beam-groups) are accepted too, so one spelling works in both.
    const std::string option = name == "beam_width" ? "width" : name == "num_beam_groups" ? "groups" : name;
    if (!beam_keys().count(option))
      fail(where, ": unknown key '", written,
           "' (known in [beam]: width or beam_width, groups or num_beam_groups, diversity_penalty, length_penalty, "
           "early_stopping, num_return)");
    // The file's reader refuses a key given twice; here, one option under both of its names (--set may override).
    if (c.beam.count(option) && where.rfind("--set", 0) != 0 && c.origin.count("beam." + option) &&
        c.origin.at("beam." + option).rfind("--set", 0) != 0)
      fail(where, ": key '", written, "' repeats [beam] ", option, " (", c.origin.at("beam." + option), ")");
    if (option == "early_stopping") {
      if (value != "true" && value != "false") fail(where, ": key '", key, "': '", value, "' is not true or false");
    } else if (option == "diversity_penalty" || option == "length_penalty") {
      char* end = nullptr;
      std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0') fail(where, ": key '", key, "': '", value, "' is not a number");
    } else {
      parse_int(where, key, value, option == "num_return" ? 0 : 1, kMaxBeamWidth);
    }
    c.beam[option] = value;
    c.origin["beam." + option] = where;
    return;
  }
  const bool known = (section == "draft" && draft_keys().count(name)) ||
                     ((section == "sampling" || section == "draft_sampling") && sampler_keys().count(name)) ||
                     (section == "sampling" && constraint_keys().count(name));
  if (!known) fail(where, ": unknown key '", written, "'");
  std::vector<std::string> values;
  try {
    values = split_values(key, value);
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  if (values.empty()) fail(where, ": key '", key, "' has no value");
  for (std::string& v : values) {  // the drafters' and the constraint files' paths: `~` as on a command line
    if (key == "draft.drafter") v = with_where(where, key, [&] { return expand_home_in_spec(v); });
    if (key == "sampling.json_schema" || key == "sampling.token_strings")
      v = with_where(where, key, [&] { return expand_home(v); });
  }
  for (const std::string& v : values) check_axis_value(where, key, v);
  c.axes[key] = values;
  c.origin[key] = where;
}

void apply(ExperimentConfig& c, const std::string& written, const std::string& raw, const std::string& where) {
  const size_t dot = written.find('.');
  if (dot == std::string::npos)
    fail(where, ": key '", written,
         "' is outside any section (use [experiment], [draft], [sampling] or [draft_sampling])");
  // Keys are the options' names, and dashes read as underscores (top-p is top_p, [draft-sampling] is
  // [draft_sampling]), as `generate --config` reads them.
  std::string key = written;
  std::replace(key.begin(), key.end(), '-', '_');
  // The file's reader refuses a key given twice as written; here, one key under both spellings (--set may override).
  if (c.origin.count(key) && where.rfind("--set", 0) != 0 && c.origin.at(key).rfind("--set", 0) != 0)
    fail(where, ": key '", written, "' repeats ", key, " (", c.origin.at(key), ")");
  if (key == written) return apply_key(c, written, key, raw, where);
  // Messages about the value name the key as the file or --set wrote it.
  try {
    apply_key(c, written, key, raw, where);
  } catch (const Error& e) {
    std::string message = e.what();
    const std::string as_read = "'" + key + "'", as_written = "'" + written + "'";
    for (size_t at = message.find(as_read); at != std::string::npos; at = message.find(as_read, at + as_written.size()))
      message.replace(at, as_read.size(), as_written);
    throw Error(message);
  }
}

}  // namespace

bool key_uses_bar_separator(const std::string& key) {
  static const std::set<std::string> bar = {"draft.drafter", "draft.tree", "sampling.json_schema",
                                            "sampling.token_strings"};
  if (bar.count(key)) return true;
  const std::string name = key.substr(key.find('.') + 1);
  static const std::set<std::string> structured = {"logit_bias", "allowed_tokens", "banned_tokens",
                                                   "bad_words",  "stop_tokens",    "sampler_order"};
  return structured.count(name) > 0;
}

std::vector<std::string> split_values(const std::string& key, const std::string& value) {
  if (key == "sampling.regex") {  // ' | ' with spaces: a pattern's own '|' has none around it
    std::vector<std::string> out;
    size_t from = 0;
    while (true) {
      const size_t at = value.find(" | ", from);
      const std::string item = trim(value.substr(from, at == std::string::npos ? std::string::npos : at - from));
      if (!item.empty()) out.push_back(item);
      if (at == std::string::npos) return out;
      from = at + 3;
    }
  }
  const char sep = key_uses_bar_separator(key) ? '|' : ',';
  std::vector<std::string> out;
  if (trim(value).empty()) return out;
  size_t from = 0;
  while (true) {
    const size_t at = value.find(sep, from);
    out.push_back(trim(value.substr(from, at == std::string::npos ? std::string::npos : at - from)));
    if (out.back().empty()) fail("key '", key, "': empty item in '", value, "'");
    if (at == std::string::npos) return out;
    from = at + 1;
  }
}

void check_new_experiment(const ExperimentConfig& c) {
  // A value listed twice would be one setting (settings are keyed by their values): refused, not silently merged; or,
  // written two ways (0 and 0.0, 2 and 02), two settings of one value. Numbers are compared as numbers.
  const auto same = [](const std::string& a, const std::string& b) {
    if (a == b) return true;
    char* end_a = nullptr;
    char* end_b = nullptr;
    const double x = std::strtod(a.c_str(), &end_a), y = std::strtod(b.c_str(), &end_b);
    return !a.empty() && !b.empty() && *end_a == '\0' && *end_b == '\0' && x == y;
  };
  for (const auto& [key, values] : c.axes)
    for (size_t i = 0; i < values.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (values[j] == values[i] ||
            (!key_uses_bar_separator(key) && key != "sampling.regex" && same(values[j], values[i])))
          fail(c.where(key), ": key '", key, "': '", values[i], "' is listed twice",
               values[i] == values[j] ? "" : " (as '" + values[j] + "')");
  // [beam] options only beam search reads: given without it, they would be silently ignored. Likewise the tree keys,
  // which only the methods that verify trees read. Unless --set chose the methods, which leaves the file's [beam] and
  // tree for the file's methods (`bench end-to-end --set draft.method=block` on a file that sweeps trees).
  const std::vector<std::string>& methods = c.axes.at("draft.method");
  const bool methods_set = c.where("draft.method").rfind("--set", 0) == 0;
  if (!c.beam.empty() && !methods_set && std::find(methods.begin(), methods.end(), "beam") == methods.end()) {
    const std::string key = "beam." + c.beam.begin()->first;
    fail(c.where(key), ": key '", key, "' is given, but no setting uses method = beam (draft.method)");
  }
  const bool trees = std::any_of(methods.begin(), methods.end(),
                                 [](const std::string& m) { return parse_decoding_method(m).verifies_trees(); });
  for (const char* key : {"draft.tree", "draft.tree_sampling"})
    if (!trees && !methods_set && c.axes.count(key))
      fail(c.where(key), ": key '", key, "' is given, but no setting uses a method that verifies trees (draft.method)");
  // What only the methods that draft read (the drafter, K, the draft's sampler), with none that drafts; and K where
  // every method that drafts verifies a tree given by draft.tree (the shape sets the depth).
  const bool drafts = c.drafts(), only_shaped_trees = c.depth_from_tree();
  for (const auto& [key, origin] : c.origin) {
    if (methods_set) break;
    const bool drafting_key = key == "draft.drafter" || key == "draft.num_draft_tokens" ||
                              key == "draft.num_draft_tokens_schedule" || key == "draft.confidence_threshold" ||
                              key.rfind("draft_sampling.", 0) == 0;
    if (drafting_key && !drafts)
      fail(origin, ": key '", key, "' is given, but no setting drafts (draft.method is ",
           methods.size() == 1 ? methods[0] : "one of those that draft nothing", ")");
    if (key == "draft.num_draft_tokens" && drafts && only_shaped_trees)
      fail(origin, ": key '", key,
           "' is given, but every method that drafts verifies the tree of draft.tree, whose shape sets the depth");
  }
  // The schedule of a chain's K, with no method that verifies chains (a sweep that has one drops it for the others).
  const bool chains = std::any_of(methods.begin(), methods.end(), [](const std::string& m) {
    const DecodingMethod method = parse_decoding_method(m);
    return method.speculative() && !method.verifies_trees();
  });
  const std::vector<std::string> no_schedule = {draft_schedule_name(DraftSchedule::constant)};
  if (!chains && !methods_set && c.axes.count("draft.num_draft_tokens_schedule") &&
      c.axes.at("draft.num_draft_tokens_schedule") != no_schedule)
    fail(c.where("draft.num_draft_tokens_schedule"),
         ": key 'draft.num_draft_tokens_schedule' moves a chain's K, but no setting uses a method that verifies chains "
         "(draft.method)");
  if (!chains && !methods_set && c.axes.count("draft.confidence_threshold") &&
      std::any_of(c.axes.at("draft.confidence_threshold").begin(), c.axes.at("draft.confidence_threshold").end(),
                  [](const std::string& v) { return parse_confidence_threshold(v) > 0.0; }))
    fail(c.where("draft.confidence_threshold"),
         ": key 'draft.confidence_threshold' stops a chain early, but no setting uses a method that verifies chains "
         "(draft.method)");
  // The corpus's keys with a prompts file, which takes every line (or num_prompts of them).
  if (!c.prompts_file.empty())
    for (const char* key : {"experiment.prompt_length", "experiment.corpus_tail"})
      if (c.origin.count(key))
        fail(c.origin.at(key), ": key '", key, "' is given, but the prompts come from a file (experiment.prompts), ",
             "not from a corpus (prompts_from_corpus)");
  // Token strings are read only for a constraint (as generate refuses --token-strings without one); unless --set chose
  // the constraint (`--set sampling.regex=none`: a quick run without it, the file's strings kept for the file's).
  const auto constrained = [&](const char* key) {
    const auto it = c.axes.find(key);
    return it != c.axes.end() &&
           std::any_of(it->second.begin(), it->second.end(), [](const std::string& v) { return v != "none"; });
  };
  const bool constraint_set =
      c.where("sampling.regex").rfind("--set", 0) == 0 || c.where("sampling.json_schema").rfind("--set", 0) == 0;
  if (c.axes.count("sampling.token_strings") && !constraint_set && !constrained("sampling.regex") &&
      !constrained("sampling.json_schema"))
    fail(c.where("sampling.token_strings"),
         ": key 'sampling.token_strings' is given, but no setting has a constraint (sampling.regex or "
         "sampling.json_schema)");
}

ExperimentConfig load_experiment(const std::string& path, const std::vector<std::string>& overrides,
                                 const std::map<std::string, std::string>& override_options) {
  ExperimentConfig c;
  c.file = path;
  std::vector<IniEntry> sections;
  for (const IniEntry& e : read_ini_file(path, &sections)) apply(c, e.key, e.value, e.where());
  // A section it knows no key of is refused too where it holds none (a misspelt, empty `[samplng]`).
  for (const IniEntry& s : sections) {
    std::string section = s.key;
    std::replace(section.begin(), section.end(), '-', '_');
    if (section != "experiment" && section != "draft" && section != "sampling" && section != "draft_sampling" &&
        section != "beam")
      fail(s.where(), ": unknown section [", s.key, "] (known: [experiment], [draft], [sampling], [draft_sampling], ",
           "[beam])");
  }
  // The overrides' keys as read (dashes as underscores), each given once. An option that stands for a key (run's
  // --cost-profile) is its last override of that key; the user's --set of it come before.
  std::map<std::string, size_t> last_of;
  for (size_t i = 0; i < overrides.size(); ++i) last_of[trim(overrides[i].substr(0, overrides[i].find('=')))] = i;
  std::map<std::string, std::string> set_keys;
  for (size_t i = 0; i < overrides.size(); ++i) {
    const std::string& o = overrides[i];
    const size_t eq = o.find('=');
    if (eq == std::string::npos) fail_parameter("set", " '", o, "': expected section.key=value");
    const std::string key = trim(o.substr(0, eq));
    std::string read = key;
    std::replace(read.begin(), read.end(), '-', '_');
    const auto option = override_options.find(key);
    const std::string given =
        option != override_options.end() && last_of.at(key) == i ? option->second : "--set " + key;
    if (!set_keys.emplace(read, given).second)
      fail(given, ": ", read, " is given twice (also by ", set_keys.at(read),
           "): the last would win unsaid; give one value, or one --set with a list to sweep it");
    // config.resolved.ini holds every value, and a resume reads it: a value it would cut at a comment is refused
    // (but the cost profile's, which a resume takes from its folder's copy, never from that file).
    for (const char* marker : {" #", " ;", "\t#", "\t;"})
      if (read != "experiment.cost_profile" && o.find(marker, eq + 1) != std::string::npos)
        fail(given, ": '", o.substr(eq + 1), "' holds '", std::string(marker).substr(1),
             "' after a space, which config.resolved.ini would read as a comment; write \\",
             std::string(marker).substr(1), " (in a regex, the same character)");
    apply(c, key, o.substr(eq + 1), given);
  }
  if (c.name.empty()) {
    std::string stem = path.substr(path.find_last_of('/') + 1);
    c.name = stem.substr(0, stem.rfind('.'));
  }
  if (c.target.empty())
    fail(path, ": [experiment] target is required (e.g. target = transformer:results/models/target)");
  if (c.prompts_file.empty() == c.prompts_from_corpus.empty())
    fail(path, ": give exactly one of [experiment] prompts (a file) or prompts_from_corpus (a text corpus)");
  // A folder opens as a file and reads as nothing ("no prompts"): named for what it is.
  for (const char* key : {"experiment.prompts", "experiment.prompts_from_corpus"}) {
    const std::string& file = std::string(key) == "experiment.prompts" ? c.prompts_file : c.prompts_from_corpus;
    if (!file.empty() && std::filesystem::is_directory(file))
      fail(c.where(key), ": key '", key, "': '", file, "' is a folder, not a file");
  }
  if (!c.cost_profile.empty()) {
    // Read once the last value is known (--set, or a resumed run's own copy, replaces the file's), so a bad file
    // stops nothing started.
    try {
      c.profile = read_cost_profile(c.cost_profile);
    } catch (const Error& e) {
      fail(c.origin.at("experiment.cost_profile"), ": key 'experiment.cost_profile': ", e.what());
    }
    const std::string& measured = c.profile->target;
    if (!same_model_spec(measured, c.target))
      fail(c.origin.at("experiment.cost_profile"), ": key 'experiment.cost_profile': ", c.cost_profile,
           " was measured on the target ", measured, ", not on this experiment's target ", c.target,
           " (a profile's step costs are its target's)");
  }
  if (!c.axes.count("draft.method")) c.axes["draft.method"] = {"chain"};
  // A drafter for the methods that draft; a sweep of autoregressive decoding and beam search alone needs none.
  if (c.drafts() && !c.axes.count("draft.drafter"))
    fail(path, ": [draft] drafter is required (one or more, separated by '|')");
  if (!c.axes.count("draft.drafter")) c.axes["draft.drafter"] = {};  // an axis of no values: no setting reads it
  // K's default where a setting reads it (config.resolved.ini writes it, and a run of that file must not refuse it).
  if (!c.axes.count("draft.num_draft_tokens") && c.drafts() && !c.depth_from_tree())
    c.axes["draft.num_draft_tokens"] = {std::to_string(kDefaultNumDraftTokens)};
  return c;
}

bool ExperimentConfig::drafts() const {
  const std::vector<std::string>& methods = axes.at("draft.method");
  return std::any_of(methods.begin(), methods.end(),
                     [](const std::string& m) { return parse_decoding_method(m).speculative(); });
}

bool ExperimentConfig::depth_from_tree() const {
  const std::vector<std::string>& methods = axes.at("draft.method");
  return axes.count("draft.tree") && std::all_of(methods.begin(), methods.end(), [](const std::string& m) {
           const DecodingMethod method = parse_decoding_method(m);
           return !method.speculative() || method.verifies_trees();
         });
}

std::string ExperimentConfig::resolved_ini() const {
  std::ostringstream os;
  os << "# Resolved from " << file << " (every value used by this run)\n[experiment]\n";
  os << "name = " << name << "\ntarget = " << target << "\n";
  if (!prompts_file.empty()) os << "prompts = " << prompts_file << "\n";
  if (!prompts_from_corpus.empty())
    os << "prompts_from_corpus = " << prompts_from_corpus << "\nnum_prompts = " << num_prompts
       << "\nprompt_length = " << prompt_length
       << "\ncorpus_tail = " << shortest_text(corpus_tail)  // every digit: a resume reads it
       << "\n";
  else if (origin.count("experiment.num_prompts"))  // a prompts file is cut to num_prompts only where one was given
    os << "num_prompts = " << num_prompts << "\n";
  os << "max_new_tokens = " << max_new_tokens << "\nrepetitions = " << repetitions << "\nseed = " << seed
     << "\nthreads = " << threads << "\noutput_dir = " << output_dir
     << "\npaired_timing = " << (paired_timing ? "true" : "false") << "\nweights_dtype = " << weights_dtype
     << "\nignore_eos = " << (ignore_eos ? "true" : "false") << "\ndevice = " << device
     << "\nlockstep = " << (lockstep ? "true" : "false") << "\n";
  if (!cost_profile.empty()) os << "cost_profile = " << cost_profile << "\n";
  if (!beam.empty()) {
    os << "\n[beam]\n";
    for (const auto& [k, v] : beam) os << k << " = " << v << "\n";
  }
  std::string section;
  for (const auto& [key, values] : axes) {
    if (values.empty()) continue;  // an axis no setting reads (no drafter where none drafts)
    const std::string s = key.substr(0, key.find('.'));
    if (s != section) os << "\n[" << (section = s) << "]\n";
    os << key.substr(key.find('.') + 1) << " = ";
    const char* sep = key_uses_bar_separator(key) || key == "sampling.regex" ? " | " : ", ";
    for (size_t i = 0; i < values.size(); ++i) os << (i ? sep : "") << values[i];
    os << "\n";
  }
  return os.str();
}

std::vector<std::string> corpus_excerpts(const std::string& corpus, const ExperimentConfig& c) {
  const size_t first = corpus.size() - static_cast<size_t>(static_cast<double>(corpus.size()) * c.corpus_tail);
  if (corpus.size() - first <= static_cast<size_t>(c.prompt_length))
    fail(c.where("experiment.prompt_length"), ": key 'experiment.prompt_length' = ", c.prompt_length, ": the ",
         c.corpus_tail < 1.0 ? "corpus_tail region" : "corpus", " of ", c.prompts_from_corpus, " (",
         corpus.size() - first, " characters) is not longer");
  // Prompts start at line starts of the region: there are no more different prompts than such lines (checked
  // before anything is held for them, so num_prompts cannot ask for unbounded memory).
  const size_t last_start = corpus.size() - c.prompt_length;
  int64_t starts = 1;  // the region's first character
  for (size_t at = corpus.find('\n', first); at != std::string::npos && at + 1 <= last_start;
       at = corpus.find('\n', at + 1))
    ++starts;
  if (c.num_prompts > starts)
    fail(c.where("experiment.num_prompts"), ": key 'experiment.num_prompts' = ", c.num_prompts, ": the ",
         c.corpus_tail < 1.0 ? "corpus_tail region" : "corpus", " of ", c.prompts_from_corpus, " has only ", starts,
         " line starts to take a prompt of prompt_length = ", c.prompt_length, " from");
  std::vector<std::string> texts;
  for (int i = 0; i < c.num_prompts; ++i) {
    size_t offset = first + static_cast<size_t>(philox_uniform(c.seed, philox_stream(0, RandomRole::aux), i) *
                                                (corpus.size() - first - c.prompt_length));
    const size_t line_start = corpus.rfind('\n', offset);
    offset = line_start == std::string::npos || line_start + 1 < first ? first : line_start + 1;
    texts.push_back(corpus.substr(offset, c.prompt_length));
  }
  return texts;
}

}  // namespace specula
