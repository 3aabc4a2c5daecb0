#include "harness/config/command_options.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <typeinfo>

#include "harness/config/ini_file.h"
#include "kernels/shared/error.h"
#include "verify/sampling/filter_stages.h"

namespace specula {
namespace {

// The parameter an option names: "draft-stop-tokens" -> "draft_stop_tokens". Errors raise it as a ParameterError,
// which the command line prints as the flag and an experiment as its file:line: key.
std::string parameter_of(const std::string& option) {
  std::string p = option;
  std::replace(p.begin(), p.end(), '-', '_');
  return p;
}

long parse_long(const std::string& item, const std::string& option, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(item.c_str(), &end, 10);
  if (item.empty() || *end != '\0' || errno != 0)
    fail_parameter(parameter_of(option), ": '", item, "' is not an integer token id (in '", text, "')");
  return v;
}

// A sampler option's number as the user wrote it: refused, quoting the text, when it is not a number or when
// float32 cannot hold it (1e-300 would become 0 and 1e50 infinity, and the range check would then report a
// value the user never wrote).
float parse_float_option(const std::string& text, const std::string& option) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (trim(text).empty() || *end != '\0') fail_parameter(parameter_of(option), ": '", text, "' is not a number");
  const float f = static_cast<float>(v);
  if (v != 0.0 && std::isfinite(v) && f == 0.0f)
    fail_parameter(parameter_of(option), ": '", text, "' is too small for a 32-bit float (it would be 0)");
  if (std::isfinite(v) && !std::isfinite(f))
    fail_parameter(parameter_of(option), ": '", text, "' is too large for a 32-bit float");
  return f;
}

// An integer sampler option (top_k, mirostat) as the user wrote it: refused, quoting the text, when it is not an
// integer or does not fit 32 bits.
int32_t parse_int_option(const std::string& text, const std::string& option) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (trim(text).empty() || *end != '\0') fail_parameter(parameter_of(option), ": '", text, "' is not an integer");
  if (errno == ERANGE || v < INT32_MIN || v > INT32_MAX)
    fail_parameter(parameter_of(option), ": '", text, "' does not fit a 32-bit integer");
  return static_cast<int32_t>(v);
}

// Boost reads "-1" into an unsigned option as 2^64 - 1 (a seed the user never wrote): refused, naming the option.
void refuse_negative_unsigned(const po::parsed_options& parsed, const po::variables_map& vm) {
  for (const po::option& o : parsed.options) {
    if (o.string_key.empty() || !vm.count(o.string_key)) continue;
    const std::type_info& type = vm[o.string_key].value().type();
    if (type != typeid(uint64_t) && type != typeid(uint32_t) && type != typeid(size_t)) continue;
    for (const std::string& token : o.value)
      if (trim(token).rfind('-', 0) == 0) fail("--", o.string_key, ": '", token, "' is negative");
  }
}

}  // namespace

std::set<std::string> command_line_options(const std::vector<std::string>& args, const po::options_description& desc) {
  std::set<std::string> out;
  for (const po::option& o : po::command_line_parser(args).options(desc).run().options) out.insert(o.string_key);
  return out;
}

po::variables_map parse_options(const std::vector<std::string>& args, const po::options_description& desc,
                                const std::string& section, const std::string& config_option) {
  po::variables_map vm;
  try {
    const po::parsed_options parsed = po::command_line_parser(args).options(desc).run();
    for (const std::string& stray : po::collect_unrecognized(parsed.options, po::include_positional))
      fail("unexpected argument '", stray, "' (options start with --)");
    po::store(parsed, vm);
    refuse_negative_unsigned(parsed, vm);
  } catch (const po::error& e) {
    fail(e.what());
  }
  if (vm.count(config_option)) {
    const std::string path = vm[config_option].as<std::string>();
    for (const IniEntry& entry : read_ini_file(path)) {
      std::string key = entry.key;
      if (!section.empty() && key.rfind(section + ".", 0) == 0) key = key.substr(section.size() + 1);
      std::replace(key.begin(), key.end(), '_', '-');
      if (key == config_option || !desc.find_nothrow(key, false))
        fail(entry.where(), ": unknown key '", entry.key, "'");
      po::parsed_options one(&desc);
      one.options.emplace_back(key, std::vector<std::string>{entry.value});
      try {
        po::variables_map probe;
        po::store(one, probe);
        refuse_negative_unsigned(one, probe);
        // Sampler values are range-checked here too, so an error names the file and line.
        SamplingParams checked, draft_checked;
        read_sampler_options(probe, checked);
        check_sampler_options(checked, INT32_MAX);
        read_sampler_options(probe, draft_checked, "draft-");  // a command without draft options reads none
        check_sampler_options(draft_checked, INT32_MAX, "draft-");
        po::store(one, vm);  // values already given on the command line are kept: the command line wins
      } catch (const po::error& e) {
        fail(entry.where(), ": key '", entry.key, "' = '", entry.value, "': ", e.what());
      } catch (const Error& e) {
        fail(entry.where(), ": key '", entry.key, "' = '", entry.value, "': ", e.what());
      }
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e.what());
  }
  return vm;
}

// The comma-separated items of `text`, trimmed; an empty one ("1,,3", "1,3,") is an error naming `option`.
std::vector<std::string> comma_items(const std::string& text, const std::string& option) {
  std::vector<std::string> items;
  if (trim(text).empty()) return items;
  size_t from = 0;
  while (true) {
    const size_t comma = text.find(',', from);
    items.push_back(trim(text.substr(from, comma == std::string::npos ? std::string::npos : comma - from)));
    if (items.back().empty()) fail_parameter(parameter_of(option), ": empty item in '", text, "'");
    if (comma == std::string::npos) return items;
    from = comma + 1;
  }
}

std::vector<Token> parse_token_list(const std::string& text, const std::string& option) {
  std::vector<Token> out;
  for (const std::string& item : comma_items(text, option)) {
    std::stringstream ids(item);  // spaces separate ids too: "0 3 5"
    std::string id;
    while (ids >> id) {
      const long v = parse_long(id, option, text);
      if (v < 0 || v > INT32_MAX)
        fail_parameter(parameter_of(option), ": token id ", v, " is out of range (in '", text, "')");
      out.push_back(static_cast<Token>(v));
    }
  }
  return out;
}

std::vector<int> parse_count_list(const std::string& text, const std::string& parameter, const std::string& what,
                                  int lo, int hi) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const bool digits = !item.empty() && item.size() <= 9 &&
                        std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    const long n = digits ? std::stol(item) : -1;
    if (n < lo || n > hi)
      fail_parameter(parameter, ": '", item, "' in '", text, "' is not a ", what, " in [", lo, ", ", hi, "]");
    if (std::find(out.begin(), out.end(), n) != out.end())
      fail_parameter(parameter, ": ", n, " is named twice in '", text, "'");
    out.push_back(static_cast<int>(n));
  }
  if (out.empty() || text.back() == ',') fail_parameter(parameter, ": '", text, "' is not a list of ", what, "s");
  return out;
}

std::vector<std::pair<Token, float>> parse_logit_bias(const std::string& text, const std::string& option) {
  std::vector<std::pair<Token, float>> out;
  for (const std::string& item : comma_items(text, option)) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      fail_parameter(parameter_of(option), ": '", item, "' is not TOKEN:BIAS (in '", text, "')");
    const long token = parse_long(trim(item.substr(0, colon)), option, text);
    const std::string bias_text = trim(item.substr(colon + 1));
    char* end = nullptr;
    const float bias = std::strtof(bias_text.c_str(), &end);
    if (bias_text.empty() || *end != '\0')
      fail_parameter(parameter_of(option), ": bias '", bias_text, "' is not a number (in '", text, "')");
    if (token < 0 || token > INT32_MAX) fail_parameter(parameter_of(option), ": token id ", token, " is out of range");
    for (const auto& [seen, b] : out)
      if (seen == token) fail_parameter(parameter_of(option), ": token ", token, " is biased twice (in '", text, "')");
    out.emplace_back(static_cast<Token>(token), bias);
  }
  return out;
}

std::vector<std::vector<Token>> parse_token_sequences(const std::string& text, const std::string& option) {
  std::vector<std::vector<Token>> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (trim(item).empty()) continue;
    out.push_back(parse_token_list(item, option));
  }
  return out;
}

void add_sampler_options(po::options_description& desc, const std::string& prefix) {
  auto name = [&](const char* n) { return prefix + n; };
  // clang-format off
  desc.add_options()
    (name("temperature").c_str(), po::value<double>(), "temperature T (0 = greedy, else >= 0.001); default 1")
    (name("sampler-order").c_str(), po::value<std::string>(), "order of the filters (default min_p,top_k,top_p)")
    (name("repetition-penalty").c_str(), po::value<std::string>(), "repetition penalty over prompt and output (1 = off)")
    (name("frequency-penalty").c_str(), po::value<std::string>(), "frequency penalty over output tokens")
    (name("presence-penalty").c_str(), po::value<std::string>(), "presence penalty over output tokens")
    (name("logit-bias").c_str(), po::value<std::string>(), "TOKEN:BIAS,... added to logits")
    (name("allowed-tokens").c_str(), po::value<std::string>(), "only these token ids may be sampled")
    (name("banned-tokens").c_str(), po::value<std::string>(), "these token ids are never sampled")
    (name("bad-words").c_str(), po::value<std::string>(), "token sequences 'a b;c': last token banned after the rest")
    (name("min-tokens").c_str(), po::value<int32_t>(), "stop tokens are banned until the output has N tokens")
    (name("stop-tokens").c_str(), po::value<std::string>(), "stop token ids (for --min-tokens and generation)")
    (name("dynatemp-range").c_str(), po::value<std::string>(), "dynamic temperature range (0 = off)")
    (name("dynatemp-exponent").c_str(), po::value<std::string>(), "dynamic temperature exponent (default 1)");
  // clang-format on
  // The filter stages' parameters, from their table (verify/sampling/filter_stages.h).
  for (const FilterStageRow& row : filter_stages())
    for (const StageParameter& p : row.parameters) {
      std::string flag = p.name;
      std::replace(flag.begin(), flag.end(), '_', '-');
      desc.add_options()(name(flag.c_str()).c_str(), po::value<std::string>(), p.help);
    }
}

SamplingParams read_sampler_values(const std::map<std::string, std::string>& values, SamplingParams params) {
  po::options_description desc;
  add_sampler_options(desc);
  po::parsed_options parsed(&desc);
  for (const auto& [name, value] : values) {
    std::string option = name;
    std::replace(option.begin(), option.end(), '_', '-');
    if (!desc.find_nothrow(option, false)) fail("'", name, "' is not a sampler option");
    parsed.options.emplace_back(option, std::vector<std::string>{value});
  }
  po::variables_map vm;
  po::store(parsed, vm);
  read_sampler_options(vm, params);
  return params;
}

std::string shortest_text(double v) {
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, v);
  return std::string(text, r.ptr);
}

po::typed_value<double>* double_value(double default_value) {
  return po::value<double>()->default_value(default_value, shortest_text(default_value));
}

void note_unread_sampler_options(const po::variables_map& vm, const SamplingParams& target,
                                 const SamplingParams* draft) {
  const auto given = [&](const std::string& option) { return vm.count(option) && !vm[option].defaulted(); };
  po::options_description desc;
  add_sampler_options(desc);
  for (const auto& option : desc.options()) {
    const std::string flag = option->long_name();
    std::string parameter = flag;
    std::replace(parameter.begin(), parameter.end(), '-', '_');
    const std::string draft_flag = "draft-" + flag;
    if (given(flag)) {
      const std::string why = target.unread_because(parameter);
      const bool draft_reads = draft && !given(draft_flag) && draft->unread_because(parameter).empty();
      if (!why.empty() && !draft_reads) std::cerr << "note: --" << flag << " is left unread: " << why << "\n";
    }
    if (draft && given(draft_flag)) {
      const std::string why = draft->unread_because(parameter);
      if (!why.empty())
        std::cerr << "note: --" << draft_flag << " is left unread by the draft's sampler: " << why << "\n";
    }
  }
}

bool sampler_option_given(const po::variables_map& vm, const std::string& name) { return vm.count(name) > 0; }

void check_sampler_options(const SamplingParams& params, int32_t vocab_size, const std::string& prefix) {
  try {
    params.validate(vocab_size);
  } catch (const ParameterError& e) {
    if (prefix.empty()) throw;
    throw ParameterError(parameter_of(prefix) + e.parameter(), e.detail());
  } catch (const Error& e) {
    if (prefix.empty()) throw;
    fail("the draft's sampler (the --", prefix, "* options, and the target's values they inherit): ", e.what());
  }
}

void read_sampler_options(const po::variables_map& vm, SamplingParams& s, const std::string& prefix) {
  auto has = [&](const char* n) { return vm.count(prefix + n) > 0; };
  auto str = [&](const char* n) { return vm[prefix + n].as<std::string>(); };
  auto opt = [&](const char* n) { return prefix + n; };
  if (has("temperature")) {
    // Read as a double so that a value float32 would round to 0 (1e-50) is refused, not turned into greedy.
    const double t = vm[opt("temperature")].as<double>();
    if (!std::isfinite(t))  // NaN compares false with every bound: said as what it is, not as "below the smallest"
      fail_parameter(parameter_of(opt("temperature")), ": '", t, "' is not a finite number (0 = greedy)");
    if (t != 0.0 && !(static_cast<float>(std::fabs(t)) >= kMinTemperature))  // as stored: 0.001 is allowed
      fail_parameter(parameter_of(opt("temperature")), ": ", t, " is below the smallest temperature, ", kMinTemperature,
                     " (0 = greedy)");
    s.temperature = static_cast<float>(t);
  }
  if (has("sampler-order")) s.order = parse_filter_order(str("sampler-order"), parameter_of(opt("sampler-order")));
  if (has("repetition-penalty"))
    s.repetition_penalty = parse_float_option(str("repetition-penalty"), opt("repetition-penalty"));
  if (has("frequency-penalty"))
    s.frequency_penalty = parse_float_option(str("frequency-penalty"), opt("frequency-penalty"));
  if (has("presence-penalty"))
    s.presence_penalty = parse_float_option(str("presence-penalty"), opt("presence-penalty"));
  if (has("logit-bias")) s.logit_bias = parse_logit_bias(str("logit-bias"), opt("logit-bias"));
  if (has("allowed-tokens")) {
    s.allowed_tokens = parse_token_list(str("allowed-tokens"), opt("allowed-tokens"));
    if (s.allowed_tokens.empty())
      fail_parameter(parameter_of(opt("allowed-tokens")), ": the list is empty, so no token could be sampled");
  }
  // A list whose empty form means "none of them" takes `none` (read as the empty text, an empty list), so a sweep can
  // set one against none, as a regex.
  const auto listed = [&](const char* option) { return trim(str(option)) == "none" ? std::string() : str(option); };
  if (has("banned-tokens")) s.banned_tokens = parse_token_list(listed("banned-tokens"), opt("banned-tokens"));
  if (has("bad-words")) s.bad_words = parse_token_sequences(listed("bad-words"), opt("bad-words"));
  if (has("min-tokens")) s.min_tokens = vm[opt("min-tokens")].as<int32_t>();
  if (has("stop-tokens")) s.stop_tokens = parse_token_list(listed("stop-tokens"), opt("stop-tokens"));
  if (has("dynatemp-range")) s.dynatemp_range = parse_float_option(str("dynatemp-range"), opt("dynatemp-range"));
  if (has("dynatemp-exponent"))
    s.dynatemp_exponent = parse_float_option(str("dynatemp-exponent"), opt("dynatemp-exponent"));
  for (const FilterStageRow& row : filter_stages())
    for (const StageParameter& p : row.parameters) {
      std::string flag = p.name;
      std::replace(flag.begin(), flag.end(), '_', '-');
      if (!vm.count(prefix + flag)) continue;
      const std::string text = vm[prefix + flag].as<std::string>();
      p.set(s, p.integer ? static_cast<double>(parse_int_option(text, prefix + flag))
                         : static_cast<double>(parse_float_option(text, prefix + flag)));
    }
}

}  // namespace specula
