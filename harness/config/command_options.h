// Command-line parsing shared by the subcommands: Boost.Program_options for the command line, plus an
// optional INI file (`--config FILE`) whose keys are the same option names; the command line wins.
// Errors name the option (and for the INI file, the file and line) and the offending value.
#pragma once

#include <boost/program_options.hpp>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

namespace po = boost::program_options;

// Parses `args` against `desc`; if the option `config_option` is given, reads that INI file too.
// Keys in the INI file may use '_' or '-' and may sit in a section named `section` (or none).
po::variables_map parse_options(const std::vector<std::string>& args, const po::options_description& desc,
                                const std::string& section, const std::string& config_option = "config");

// The options `args` itself gives (their long names), as against what parse_options read from the --config file:
// an option a command refuses in some combination is refused where it was typed and left unused, with a note, where a
// shared config file gave it.
std::set<std::string> command_line_options(const std::vector<std::string>& args, const po::options_description& desc);

// "1,2,3" -> {1,2,3}; throws naming `option` on a bad entry. Empty text gives an empty list. (The sampler's
// stop_tokens, banned_tokens and bad_words also take "none": read_sampler_options.)
std::vector<Token> parse_token_list(const std::string& text, const std::string& option);
// "3:2.5,7:-1.5" -> {(3, 2.5), (7, -1.5)}.
std::vector<std::pair<Token, float>> parse_logit_bias(const std::string& text, const std::string& option);
// "1,4,16" -> {1,4,16}: distinct whole numbers in [lo, hi], each `what` ("batch size"); a ParameterError for
// `parameter` (the option's name with underscores) names the bad entry and the text.
std::vector<int> parse_count_list(const std::string& text, const std::string& parameter, const std::string& what,
                                  int lo, int hi);
// "1 2;5" -> {{1,2},{5}}: sequences separated by ';', tokens by spaces or commas.
std::vector<std::vector<Token>> parse_token_sequences(const std::string& text, const std::string& option);

// The sampler options shared by `sample`, `generate` and experiments. With a non-empty `prefix` (e.g.
// "draft-") every option is registered under that prefix, for `--draft-temperature` and friends.
void add_sampler_options(po::options_description& desc, const std::string& prefix = "");

// The shortest text that reads back as `v` (std::to_chars): a --help default, a value a written config keeps.
std::string shortest_text(double v);

// A number option whose --help shows its default as the shortest text that reads back as it ("0.1"), where Boost
// would print seventeen digits ("0.10000000000000001").
po::typed_value<double>* double_value(double default_value);
// Reads the options registered by add_sampler_options into `params`, starting from `params` as given
// (options not set keep their value). Validation against the vocabulary is the pipeline's job.
void read_sampler_options(const po::variables_map& vm, SamplingParams& params, const std::string& prefix = "");
// Checks sampler values as the options with `prefix` gave them (SamplingParams::validate): a bad value is a
// ParameterError for the option's own parameter ("draft_temperature" for --draft-temperature), so the command line
// names the flag the user typed. Run it with vocab_size INT32_MAX before any model loads, and again with the
// target's vocabulary once it has loaded.
void check_sampler_options(const SamplingParams& params, int32_t vocab_size, const std::string& prefix = "");
// Notes on standard error each sampler option given (on the command line or in the --config file) that the samplers
// leave unread at the values given (SamplingParams::unread_because: --top-p under greedy decoding, --mirostat-tau with
// mirostat off). Noted, not refused: a value, not the command's shape, leaves them unread, so a loop over values runs
// through. `draft` is the draft's sampler where the run drafts (it reads its --draft-* options and the target's options
// it does not override), else null.
void note_unread_sampler_options(const po::variables_map& vm, const SamplingParams& target,
                                 const SamplingParams* draft);
// The same reading from an experiment's values: `values` maps sampler parameter names ("top_p", underscores) to
// their text, and each is read over `params` by the command line's own option code (one reading for flags and
// INI keys alike). A name that is no sampler option is an Error naming it.
SamplingParams read_sampler_values(const std::map<std::string, std::string>& values, SamplingParams params);
// Prompt/output token histories shared by `sample` and others.
bool sampler_option_given(const po::variables_map& vm, const std::string& name);

}  // namespace specula
