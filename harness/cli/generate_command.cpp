// `specula generate`: sample continuations with plain decoding (`ar`) or speculative decoding, and write
// one line of token ids per sample: the generated ids up to and including the stop token that ended the
// sample (--stop-tokens, and the checkpoint's eos_token_id unless --ignore-eos), or the token that ended a
// constraint's match when no stop token is set, at most --max-new-tokens.
// `--method beam` runs beam search instead (harness/generation/beam_search.h): one line, the best hypothesis,
// and with --nbest-output every n-best hypothesis with its score. --regex / --json-schema constrain every
// method (verify/sampling/token_constraint.h). Text: --prompt / --prompt-file in, --print-text / --stream
// out; --logprobs N with --logprobs-output FILE writes every emitted token's logprobs as JSONL.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "draft/registry/drafter_registry.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/config/device_options.h"
#include "harness/generation/beam_search.h"
#include "harness/generation/decoding_method.h"
#include "harness/generation/draft_schedule.h"
#include "harness/generation/generator.h"
#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "harness/models/eos_tokens.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/tokenizer.h"
#include "harness/runner/run_builder.h"
#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"
#include "kernels/shared/thread_limit.h"
#include "verify/constraints/json_schema.h"
#include "verify/constraints/regex.h"
#include "verify/sampling/token_constraint.h"

namespace specula::cli {
namespace {

bool text_prompt(const po::variables_map& vm) { return vm.count("prompt") || vm.count("prompt-file"); }

std::shared_ptr<const Tokenizer> require_tokenizer(const po::variables_map& vm, const LanguageModel& target,
                                                   const std::string& option) {
  const auto tokenizer = load_tokenizer_for(vm["target"].as<std::string>());
  if (!tokenizer)
    fail(option, ": the target ", target.description(), " has no tokenizer; use --prompt-tokens and --output");
  return tokenizer;
}

// The prompt: --prompt TEXT or --prompt-file FILE through the target's tokenizer (which adds BOS as its
// tokenizer config says), or --prompt-tokens ids.
std::vector<Token> read_prompt(const po::variables_map& vm, const LanguageModel& target) {
  std::vector<Token> prompt;
  if (text_prompt(vm)) {
    const char* option = vm.count("prompt") ? "--prompt" : "--prompt-file";
    std::string text;
    if (vm.count("prompt")) {
      text = vm["prompt"].as<std::string>();
    } else {
      text = read_input_file(vm["prompt-file"].as<std::string>(), "--prompt-file");
    }
    prompt = require_tokenizer(vm, target, option)->encode(text);
  }
  if (vm.count("prompt-tokens")) prompt = parse_token_list(vm["prompt-tokens"].as<std::string>(), "prompt-tokens");
  // Named by the option that gave it, not by whichever model first needed a context.
  if (prompt.empty())
    fail(vm.count("prompt")        ? "--prompt"
         : vm.count("prompt-file") ? "--prompt-file"
                                   : "--prompt-tokens",
         ": the prompt has no tokens: a model needs at least one token of context");
  for (Token t : prompt)
    if (t >= target.vocab_size())
      fail("--prompt-tokens: token id ", t, " is outside the vocabulary [0, ", target.vocab_size(), ")");
  return prompt;
}

// --print-text (implied by a text prompt without another output): each sample's decoded continuation on stdout,
// one block per sample. Ids beyond the tokenizer print as <|id:N|>.
void print_text(const po::variables_map& vm, const LanguageModel& target,
                const std::vector<std::vector<Token>>& continuations) {
  const bool implied = text_prompt(vm) && !vm.count("output") && !vm.count("logprobs-output") && !vm.count("stream");
  if (!vm.count("print-text") && !implied) return;
  const auto tokenizer = require_tokenizer(vm, target, "--print-text");
  for (size_t i = 0; i < continuations.size(); ++i) {
    if (continuations.size() > 1) std::cout << "--- sample " << i << " ---\n";
    std::cout << decode_for_output(*tokenizer, continuations[i]) << "\n";
  }
}

// The number of bytes at the end of `text` that begin a UTF-8 sequence the text does not complete.
size_t incomplete_utf8_tail(const std::string& text) {
  for (size_t back = 1; back <= 3 && back <= text.size(); ++back) {
    const unsigned char c = static_cast<unsigned char>(text[text.size() - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

// --stream: the one sample's text printed as its tokens are committed. The whole continuation is decoded
// each time (a token's text can depend on its neighbours) and what extends the printed text is written, less
// an unfinished UTF-8 character, which waits for its next bytes.
class TextStream {
 public:
  explicit TextStream(std::shared_ptr<const Tokenizer> tokenizer) : tokenizer_(std::move(tokenizer)) {}
  void add(const std::vector<Token>& committed) {
    tokens_.insert(tokens_.end(), committed.begin(), committed.end());
    const std::string text = decode_for_output(*tokenizer_, tokens_);
    size_t ready = text.size() - incomplete_utf8_tail(text);
    // A decoder that renders unfinished byte tokens as U+FFFD (SentencePiece) replaces it once the character
    // is complete: hold a trailing one back too.
    static const std::string kReplacement = "\xEF\xBF\xBD";
    while (ready >= kReplacement.size() &&
           text.compare(ready - kReplacement.size(), kReplacement.size(), kReplacement) == 0)
      ready -= kReplacement.size();
    if (ready <= printed_ || text.compare(0, printed_, printed_text_) != 0) return;
    std::cout << text.substr(printed_, ready - printed_) << std::flush;
    printed_text_ = text.substr(0, ready);
    printed_ = ready;
  }
  void finish() {
    const std::string text = decode_for_output(*tokenizer_, tokens_);
    if (text.compare(0, printed_, printed_text_) == 0) {
      std::cout << text.substr(printed_) << "\n" << std::flush;
      return;
    }
    // The decoder rewrote text already printed: say so and print the final continuation whole.
    std::cout << "\n" << std::flush;
    std::cerr << "specula generate: --stream: the decoded text changed after it was printed; the final text:\n";
    std::cout << text << "\n" << std::flush;
  }

 private:
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<Token> tokens_;
  std::string printed_text_;
  size_t printed_ = 0;
};

std::string id_line(const std::vector<Token>& tokens) {
  std::string line;
  for (size_t i = 0; i < tokens.size(); ++i) line += (i ? " " : "") + std::to_string(tokens[i]);
  return line;
}

// --logprobs-output: one JSON line per sample, in sample order.
void write_logprobs(const std::string& path, const std::vector<SequenceOutput>& outputs) {
  std::string text;
  for (size_t i = 0; i < outputs.size(); ++i) {
    nlohmann::json tokens = nlohmann::json::array();
    for (const EmittedLogprobs& e : outputs[i].logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const TokenLogprob& t : e.top) top.push_back({t.token, t.logprob});
      tokens.push_back({{"id", e.token}, {"logprob", e.logprob}, {"raw_logprob", e.raw_logprob}, {"top", top}});
    }
    text += nlohmann::json{{"sample", i}, {"tokens", tokens}}.dump() + '\n';
  }
  write_output_file(path, text, "--logprobs-output");
}

// The beam options, checked where they are read (before any model loads).
BeamSearchConfig read_beam_config(const po::variables_map& vm) {
  if (vm["num-samples"].as<int64_t>() != 1)
    fail("--method beam is deterministic: --num-samples must be 1, got ", vm["num-samples"].as<int64_t>());
  BeamSearchConfig config;
  config.beam_width = vm["beam-width"].as<int32_t>();
  config.num_groups = vm["num-beam-groups"].as<int32_t>();
  config.diversity_penalty = vm["diversity-penalty"].as<double>();
  config.length_penalty = vm["length-penalty"].as<double>();
  config.early_stopping = vm["early-stopping"].as<bool>();
  config.num_return = vm["num-return"].as<int32_t>();
  config.max_new_tokens = vm["max-new-tokens"].as<int32_t>();
  check_beam_config(config);
  return config;
}

// `--method beam`: one deterministic search from the prompt.
// A constrained output that reached --max-new-tokens before it was a whole match is cut: said here, not left for
// whatever parses the text to find.
bool is_cut_match(const SamplingParams& params, bool stopped, const std::vector<Token>& tokens) {
  const TokenConstraint* c = params.constraint.get();
  return c && !stopped && !c->complete(c->walk(tokens));
}
// `who` reached the limit: "3 of 5 samples", "the best hypothesis".
void warn_cut(const std::string& who) {
  std::cerr << "specula generate: warning: " << who
            << " reached --max-new-tokens before a whole match of the constraint: the text is cut (give more "
               "--max-new-tokens)\n";
}

int beam_search_command(const po::variables_map& vm, std::shared_ptr<const LanguageModel> target,
                        const SamplingParams& params, const BeamSearchConfig& config) {
  const std::vector<Token> prompt = read_prompt(vm, *target);
  const BeamSearch search(target, params, config);
  GenerationMetrics metrics;
  const BeamSearchOutput result = search.search(prompt, metrics);
  metrics.wall_seconds = result.wall_seconds;
  const auto ids = id_line;
  print_text(vm, *target, {result.nbest[0].tokens});
  if (vm.count("output"))
    write_output_file(vm["output"].as<std::string>(), ids(result.nbest[0].tokens) + '\n', "--output");
  if (vm.count("nbest-output")) {
    std::ostringstream nbest;
    nbest << "# score\tlogprob\tended\ttokens (best first; score = logprob / length^" << config.length_penalty << ")\n";
    nbest.precision(10);
    for (const BeamHypothesis& h : result.nbest)
      nbest << h.score << '\t' << h.logprob << '\t' << (h.stopped ? "stop" : "length") << '\t' << ids(h.tokens) << '\n';
    write_output_file(vm["nbest-output"].as<std::string>(), nbest.str(), "--nbest-output");
  }
  if (vm.count("metrics-json"))
    write_output_file(vm["metrics-json"].as<std::string>(), metrics.to_json("beam", false), "--metrics-json");
  if (is_cut_match(params, result.nbest[0].stopped, result.nbest[0].tokens)) warn_cut("the best hypothesis");
  return 0;
}

po::options_description generate_options() {
  static const std::string methods = decoding_method_names(" | ", true);
  po::options_description desc("specula generate --target MODEL [--draft MODEL] --method " +
                               decoding_method_names("|") +
                               "\n  --prompt-tokens 0,3 --max-new-tokens L --num-samples N --seed S --output FILE "
                               "[options]\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("target", po::value<std::string>(), "target model, e.g. bigram:PATH")
    ("draft", po::value<std::string>(), "draft model, e.g. bigram:PATH")
    ("method", po::value<std::string>()->default_value("ar"), methods.c_str())
    ("num-draft-tokens", po::value<int32_t>()->default_value(kDefaultNumDraftTokens), "draft length K (a method that verifies trees takes --tree; without it, it drafts a chain of K)")
    ("num-draft-tokens-schedule", po::value<std::string>()->default_value("constant"), "how a chain's K moves between a sample's steps: constant | heuristic (starts at --num-draft-tokens; +2 after a step that accepted every draft, -1 after one that did not, within 1..K)")
    ("confidence-threshold", po::value<double>()->default_value(0.0), "a chain stops early after a draft its law gave less than this, keeping that draft (0: never; Hugging Face's assistant_confidence_threshold)")
    ("tree", po::value<std::string>(), "tree shape for --method tree: children per depth, e.g. 2,2,1")
    ("tree-sampling", po::value<std::string>()->default_value("iid"), "sibling scheme: iid | without-replacement | topk")
    ("prompt-tokens", po::value<std::string>(), "prompt token ids, e.g. 0,3")
    ("prompt", po::value<std::string>(), "prompt text (models with a tokenizer; BOS as the tokenizer config says)")
    ("prompt-file", po::value<std::string>(), "file whose whole content is the prompt text")
    ("print-text", "print each sample's decoded continuation (the default with a text prompt and no other output)")
    ("stream", "print the continuation's text as it is accepted (one sample)")
    ("max-new-tokens", po::value<int32_t>(), "most tokens generated per sample (a stop token ends a sample earlier)")
    ("ignore-eos", "do not stop at the checkpoint's eos_token_id (--stop-tokens still stop)")
    ("logprobs", po::value<int32_t>(), "with --logprobs-output: each emitted token's logprob and the top N")
    ("logprobs-output", po::value<std::string>(), "file: one JSON line of logprobs per sample")
    ("num-samples", po::value<int64_t>()->default_value(1), "number of independent samples")
    ("seed", po::value<uint64_t>()->default_value(0), "Philox seed; sample n uses streams keyed by n")
    ("threads", po::value<int32_t>()->default_value(1), "worker threads (samples run in parallel)")
    ("output", po::value<std::string>(), "file: one line per sample, its token ids (up to and including a stop token)")
    ("metrics-json", po::value<std::string>(), "file for the run's metrics (JSON)")
    ("device", po::value<std::string>()->default_value("cpu"), "where target rows are sampled and verified: cpu | cuda | cuda-host (the CUDA kernels' code on the CPU, block by block)")
    ("cuda-host-threads", po::value<int>()->default_value(EmulationOptions{}.threads), "cuda-host: simulated threads per block (4, 8 or 32)")
    ("cuda-host-schedule", po::value<std::string>()->default_value("forward"), "cuda-host: order of a block's threads between barriers: forward | reverse | rotating")
    ("cuda-host-blocks", po::value<int>()->default_value(EmulationOptions{}.ctas), "cuda-host: blocks per row (1, or a thread-block cluster of 2..16 that splits each row)")
    ("cuda-host-exchange", po::value<std::string>()->default_value("automatic"), "cuda-host: how the blocks of a split row exchange: automatic (a cluster's shared memory) | global_memory (as GPUs without clusters)")
    ("weights-dtype", po::value<std::string>()->default_value("auto"), "transformer:/hf: matrices in memory: float32 | bfloat16 | float16 | auto (as stored)")
    ("config", po::value<std::string>(), "INI file with any of these options (the command line wins)")
    ("regex", po::value<std::string>(), "constrain the output to a regular expression (whole output; stop tokens end it, else its end)")
    ("json-schema", po::value<std::string>(), "constrain the output to compact JSON valid under this schema file")
    ("token-strings", po::value<std::string>(), "file: token t's string on line t (default: the tokenizer, else 'a'+t)")
    ("beam-width", po::value<int32_t>()->default_value(BeamSearchConfig{}.beam_width), "beam: beams kept per step (over all groups)")
    ("num-beam-groups", po::value<int32_t>()->default_value(BeamSearchConfig{}.num_groups), "beam: diverse beam search groups (divides the width)")
    ("diversity-penalty", double_value(BeamSearchConfig{}.diversity_penalty), "beam: Hamming diversity penalty between groups")
    ("length-penalty", double_value(BeamSearchConfig{}.length_penalty), "beam: score = logprob / length^alpha")
    ("early-stopping", po::value<bool>()->default_value(BeamSearchConfig{}.early_stopping), "beam: stop a group at width finished hypotheses")
    ("num-return", po::value<int32_t>()->default_value(BeamSearchConfig{}.num_return), "beam: n-best size (0 = beam width)")
    ("nbest-output", po::value<std::string>(), "beam: file, one hypothesis per line: score, logprob, stop|length, ids");
  // clang-format on
  add_sampler_options(desc);
  po::options_description draft_desc("Draft sampler overrides (default: the target's settings)");
  add_sampler_options(draft_desc, "draft-");
  desc.add(draft_desc);
  return desc;
}

// What one `generate` holds in memory at most: its samples, and their tokens over all samples.
constexpr int64_t kMaxSamples = int64_t{1} << 24;
constexpr int64_t kMaxSampledTokens = int64_t{1} << 28;

// Before any model loads: the options that must be there and those that go together, the bounds, and the outputs.
void check_options_before_loading(const po::variables_map& vm) {
  for (const char* required : {"target", "max-new-tokens"})
    if (!vm.count(required)) fail("--", required, " is required");
  if (vm.count("prompt") + vm.count("prompt-tokens") + vm.count("prompt-file") != 1)
    fail("give one of --prompt TEXT, --prompt-file FILE and --prompt-tokens IDS");
  if (!vm.count("output") && !text_prompt(vm) && !vm.count("print-text") && !vm.count("stream") &&
      !vm.count("logprobs-output"))
    fail("--output FILE is required (or --print-text, --stream, --logprobs-output, or a --prompt TEXT to print)");
  if (vm.count("logprobs") != vm.count("logprobs-output")) fail("--logprobs N and --logprobs-output FILE go together");
  const int32_t max_new_tokens = vm["max-new-tokens"].as<int32_t>();
  // As run's max_new_tokens: a sample of no tokens writes nothing, so 0 is refused before the model loads.
  if (max_new_tokens < 1 || max_new_tokens > kMaxNewTokens)
    fail("--max-new-tokens must be in [1, ", kMaxNewTokens, "], got ", max_new_tokens);
  check_thread_count(vm["threads"].as<int32_t>());
  if (vm.count("stream") && vm["num-samples"].as<int64_t>() != 1)
    fail("--stream prints one sample: use --num-samples 1 (got ", vm["num-samples"].as<int64_t>(), ")");
  if (vm.count("stream") && vm.count("print-text"))
    fail("--stream and --print-text: the stream prints the text already (give one)");
  if (vm.count("stream") && vm["method"].as<std::string>() == "beam")
    fail(
        "--stream: beam search chooses its hypotheses at the end, so there is nothing to stream (use --print-text or "
        "--nbest-output)");
  // The samples' tokens are all kept until they are written: bounded before any model loads.
  const int64_t samples = vm["num-samples"].as<int64_t>();
  if (samples < 1) fail("--num-samples must be >= 1, got ", samples);
  // The count first: the product of an unbounded count could overflow.
  if (samples > kMaxSamples || samples * std::max<int64_t>(1, max_new_tokens) > kMaxSampledTokens)
    fail("--num-samples ", samples, " with --max-new-tokens ", max_new_tokens, ": at most ", kMaxSamples,
         " samples and ", kMaxSampledTokens, " tokens in all");
  // Where the results go, before any model loads: each to a file of its own, none over a file the command reads.
  std::vector<std::pair<std::string, std::string>> outputs, inputs;
  for (const char* option : {"output", "logprobs-output", "metrics-json", "nbest-output"})
    if (vm.count(option) && (std::string(option) != "nbest-output" || vm["method"].as<std::string>() == "beam"))
      outputs.emplace_back(std::string("--") + option, vm[option].as<std::string>());
  for (const char* option : {"prompt-file", "json-schema", "token-strings", "config"})
    if (vm.count(option)) inputs.emplace_back(std::string("--") + option, vm[option].as<std::string>());
  for (const char* option : {"target", "draft"})  // a model spec's file or folder: kind:PATH
    if (vm.count(option) && vm[option].as<std::string>().find(':') != std::string::npos)
      inputs.emplace_back(std::string("--") + option,
                          vm[option].as<std::string>().substr(vm[option].as<std::string>().find(':') + 1));
  check_distinct_files(outputs, inputs);
  for (const auto& [option, path] : outputs) check_output_file_writable(path, option);
}

// What a constraint's options can be checked for without the target's tokens: one constraint, a device that runs
// it, the pattern or schema itself (the schema's text kept for the run), and the token-strings file's presence (read
// once the vocabulary is known).
void check_constraint_before_loading(RunDescription& run, Device device) {
  const ConstraintOptions& c = run.constraint;
  if (!c.regex.empty() && !c.json_schema_file.empty()) fail("--regex and --json-schema: give one constraint, not both");
  if (!c.token_strings_file.empty() && !c.any())
    fail("--token-strings: token strings are read only with --regex or --json-schema");
  if (!c.any()) return;
  const std::string option = c.regex.empty() ? "--json-schema" : "--regex";
  if (device != Device::cpu)
    fail(option, " is not supported on --device ", device_name(device), " (constrained decoding runs on the CPU)");
  if (!c.regex.empty()) compile_regex(c.regex);  // its errors name the pattern and the position
  if (!c.json_schema_file.empty()) {
    run.json_schema_text = read_text_file(c.json_schema_file, "--json-schema");
    compile_json_schema(run.json_schema_text, c.json_schema_file);
  }
  if (!c.token_strings_file.empty()) open_input_file(c.token_strings_file, "--token-strings");
}

// The run as the options describe it (run_builder.h), each value checked where it is read, before any model loads.
// The options this run does not read (`why_unread` says why, or "" where it reads them): refused where the command line
// gives them, and left unused with a note where a --config file does (one file shared by a sweep's runs). `run` names
// the run in the note: "--method ar", "--device cpu".
void check_options_read(const po::variables_map& vm, const std::set<std::string>& typed, const std::string& run,
                        const std::function<std::string(const std::string& option)>& why_unread) {
  std::string unused;
  for (const auto& [option, value] : vm) {
    if (value.defaulted()) continue;
    const std::string why = why_unread(option);
    if (why.empty()) continue;
    if (typed.count(option)) fail(why);
    unused += (unused.empty() ? "" : ", ") + option;
  }
  if (!unused.empty()) std::cerr << "note: " << run << " leaves the --config file's " << unused << " unused\n";
}

// What only a speculative method reads (the draft model, its shape and its sampler: the --draft-* options), what only
// a method that verifies trees reads, and what only beam search reads (--beam-width, ..., --nbest-output).
std::string unread_by_method(const std::string& option, const DecodingMethod& method) {
  const bool drafts = option == "draft" || option == "num-draft-tokens" || option == "num-draft-tokens-schedule" ||
                      option == "confidence-threshold" || option == "tree" || option == "tree-sampling" ||
                      option.rfind("draft-", 0) == 0;
  const bool beams = option == "beam-width" || option == "num-beam-groups" || option == "diversity-penalty" ||
                     option == "length-penalty" || option == "early-stopping" || option == "num-return" ||
                     option == "nbest-output";
  const bool trees = option == "tree" || option == "tree-sampling";
  if (trees && method.speculative() && !method.verifies_trees()) return "--" + option + " is only used by method tree";
  if ((option == "num-draft-tokens-schedule" || option == "confidence-threshold") && method.verifies_trees())
    return "--" + option + ": method " + method.name +
           " verifies a tree of a fixed shape (only the methods that verify chains read it)";
  if (drafts && !method.speculative())
    return option == "draft"
               ? "--method " + method.name + " does not use a --draft model"
               : "--" + option + ": --method " + method.name + " drafts nothing (only a speculative method reads it)";
  if (beams && !method.beam)
    return "--" + option + ": --method " + method.name + " is not beam search (only --method beam reads it)";
  return "";
}

RunDescription read_run(const po::variables_map& vm, const std::set<std::string>& typed, Device device) {
  RunDescription run;
  run.target_spec = vm["target"].as<std::string>();
  read_sampler_options(vm, run.target_params);
  run.draft_params = run.target_params;
  read_sampler_options(vm, run.draft_params, "draft-");
  check_sampler_options(run.target_params, INT32_MAX);  // the values' ranges; token ids once the target loads
  check_sampler_options(run.draft_params, INT32_MAX, "draft-");
  run.temperature_given = vm.count("temperature") > 0;
  run.draft_temperature_given = vm.count("draft-temperature") + vm.count("temperature") > 0;
  run.method = with_source("--method", [&] { return parse_decoding_method(vm["method"].as<std::string>()); });
  check_options_read(vm, typed, "--method " + run.method.name,
                     [&](const std::string& option) { return unread_by_method(option, run.method); });
  {  // the samplers as the run applies them: a greedy method's temperature 0 unless one is given
    SamplingParams target = run.target_params, draft = run.draft_params;
    apply_method_temperature(run.method, run.temperature_given, target);
    apply_method_temperature(run.method, run.draft_temperature_given, draft);
    check_method_temperature(run.method.verify, target);
    note_unread_sampler_options(vm, target, run.method.speculative() ? &draft : nullptr);
  }
  run.shape.num_draft_tokens = vm["num-draft-tokens"].as<int32_t>();
  run.shape.num_draft_tokens_given = !vm["num-draft-tokens"].defaulted();
  // A --config file's tree is left unused with a method that verifies none (unread_by_method).
  if (vm.count("tree") && run.method.verifies_trees())
    run.shape.tree_shape = parse_tree_shape(vm["tree"].as<std::string>());
  run.shape.tree_sampling = parse_sibling_scheme(vm["tree-sampling"].as<std::string>());
  // A --config file's schedule is left unused with a method that verifies trees (unread_by_method).
  if (run.method.speculative() && !run.method.verifies_trees()) {
    run.shape.num_draft_tokens_schedule = with_source("--num-draft-tokens-schedule", [&] {
      return parse_draft_schedule(vm["num-draft-tokens-schedule"].as<std::string>());
    });
    run.shape.confidence_threshold = vm["confidence-threshold"].as<double>();
  }
  run.max_new_tokens = vm["max-new-tokens"].as<int32_t>();
  run.seed = vm["seed"].as<uint64_t>();
  generation_config(run.method, run.shape, run.max_new_tokens, run.seed);  // its bounds, before any model loads
  run.device = device;
  // The emulation's options, which --device cuda-host alone reads.
  check_options_read(vm, typed, std::string("--device ") + device_name(device), [&](const std::string& option) {
    return option.rfind("cuda-host-", 0) == 0 && device != Device::cuda_host
               ? "--" + option + ": only --device cuda-host reads it (the device is " + device_name(device) + ")"
               : std::string();
  });
  run.emulation.threads = vm["cuda-host-threads"].as<int>();
  run.emulation.schedule = with_source(
      "--cuda-host-schedule", [&] { return parse_fiber_schedule(vm["cuda-host-schedule"].as<std::string>()); });
  run.emulation.ctas = vm["cuda-host-blocks"].as<int>();
  run.emulation.exchange = with_source("--cuda-host-exchange",
                                       [&] { return parse_row_exchange(vm["cuda-host-exchange"].as<std::string>()); });
  with_source("--cuda-host-threads", [&] { check_emulation_options(EmulationOptions{run.emulation.threads}); });
  with_source("--cuda-host-blocks", [&] { check_emulation_options(run.emulation); });
  if (run.method.beam && device != Device::cpu)
    fail("--device ", device_name(device), ": beam search runs on the CPU (use --device cpu)");
  if (vm.count("logprobs")) {
    run.logprobs = vm["logprobs"].as<int32_t>();
    if (run.logprobs < 0) fail("--logprobs must be >= 0, got ", run.logprobs);
    if (run.method.beam) fail("--logprobs: beam search writes its hypotheses' log-probabilities with --nbest-output");
  }
  if (vm.count("draft") && run.method.speculative()) {
    run.drafter_spec = vm["draft"].as<std::string>();
    // Before either model loads: the drafter's spec, then its vocabulary against the target's.
    check_drafter_spec(run.drafter_spec);
    check_drafter_vocabulary(run.drafter_spec, language_model_vocab_size(run.target_spec, "target"), run.target_spec);
    check_drafter_depth(run.drafter_spec, draft_depth(generation_config(run.method, run.shape, run.max_new_tokens, 0)),
                        run.shape.tree_shape.empty() ? "num_draft_tokens" : "tree");
    check_drafter_confidence(run.drafter_spec, run.shape.confidence_threshold);
  }
  run.ignore_eos = vm.count("ignore-eos") > 0;
  if (vm.count("regex")) {
    run.constraint.regex = vm["regex"].as<std::string>();
    if (run.constraint.regex.empty()) fail("--regex: the pattern is empty (leave --regex out for no constraint)");
  }
  if (vm.count("json-schema")) run.constraint.json_schema_file = vm["json-schema"].as<std::string>();
  if (vm.count("token-strings")) run.constraint.token_strings_file = vm["token-strings"].as<std::string>();
  check_constraint_before_loading(run, device);
  return run;
}

// --num-samples samples on --threads threads, or with --stream the one sample printed as it is accepted.
std::vector<SequenceOutput> generate_samples(const po::variables_map& vm, const Generator& generator,
                                             const LanguageModel& target, const std::vector<Token>& prompt,
                                             GenerationMetrics& metrics) {
  // --num-samples, --threads and --stream's one sample were checked before the model loaded.
  const int64_t n = vm["num-samples"].as<int64_t>();
  omp_set_num_threads(vm["threads"].as<int32_t>());
  if (!vm.count("stream")) return generator.generate_many(prompt, 0, n, metrics);
  TextStream stream(require_tokenizer(vm, target, "--stream"));
  const auto start = std::chrono::steady_clock::now();
  std::vector<SequenceOutput> outputs;
  outputs.push_back(generator.generate(prompt, 0, metrics, [&](const std::vector<Token>& t) { stream.add(t); }));
  metrics.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stream.finish();
  return outputs;
}

// The samples' text, ids, logprobs and the run's metrics, each where its option says.
void write_samples(const po::variables_map& vm, const LanguageModel& target, const DecodingMethod& method,
                   const AssembledRun& run, const std::vector<SequenceOutput>& outputs,
                   const GenerationMetrics& metrics) {
  std::vector<std::vector<Token>> continuations;
  for (const SequenceOutput& s : outputs) continuations.push_back(s.tokens);
  print_text(vm, target, continuations);
  if (vm.count("output")) {
    std::string text;
    for (const std::vector<Token>& tokens : continuations) text += id_line(tokens) + '\n';
    write_output_file(vm["output"].as<std::string>(), text, "--output");
  }
  if (vm.count("logprobs-output")) write_logprobs(vm["logprobs-output"].as<std::string>(), outputs);
  if (vm.count("metrics-json")) {
    const bool lossy = run.config.method && is_lossy(*run.config.method);
    nlohmann::json json = nlohmann::json::parse(metrics.to_json(method.name, lossy));
    json["device"] = device_name(run.config.device);  // where the target rows were sampled and verified
    write_output_file(vm["metrics-json"].as<std::string>(), json.dump(2) + "\n", "--metrics-json");
  }
  if (metrics.q_zero_errors > 0)
    std::cerr << "specula generate: warning: " << metrics.q_zero_errors
              << " drafted token(s) had recorded q = 0 (rejected; the draft's recorded law is inconsistent)\n";
  int64_t cut = 0;
  for (const SequenceOutput& s : outputs)
    cut += is_cut_match(run.target_params, s.stop_reason == StopReason::stop, s.tokens);
  if (cut > 0) warn_cut(std::to_string(cut) + " of " + std::to_string(outputs.size()) + " samples");
}

}  // namespace

int generate_command(const Args& args) {
  const po::options_description desc = generate_options();
  const po::variables_map vm = parse_options(args, desc, "generate");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  const Device device = parse_device(vm["device"].as<std::string>());
  require_device(device);  // "no CUDA device: ..." where there is none
  check_options_before_loading(vm);
  const RunDescription description = read_run(vm, command_line_options(args, desc), device);
  std::optional<BeamSearchConfig> beam;
  if (description.method.beam) beam = read_beam_config(vm);  // its options, before the model loads too
  auto target = load_language_model(description.target_spec, "target", vm["weights-dtype"].as<std::string>(),
                                    model_device_for(device));
  check_sampler_options(description.target_params, target->vocab_size());
  check_sampler_options(description.draft_params, target->vocab_size(), "draft-");
  if (vm.count("print-text")) require_tokenizer(vm, *target, "--print-text");  // before the samples, not after
  RunAssemblyCache cache;
  const AssembledRun run = assemble_run(description, target, cache);  // the same assembly as `run`'s settings
  for (const auto& [flag, params] :
       {std::pair{"min-tokens", &run.target_params}, {"draft-min-tokens", &run.draft_params}})
    if (vm.count(flag) && (params == &run.target_params || description.method.speculative()))
      if (const std::string why = min_tokens_unread_because(description, *params); !why.empty())
        std::cerr << "note: --" << flag << " is left unread: " << why << "\n";
  if (beam) return beam_search_command(vm, target, run.target_params, *beam);
  const std::vector<Token> prompt = read_prompt(vm, *target);
  const Generator generator(target, run.target_params, run.drafter, run.config);
  GenerationMetrics metrics;
  const std::vector<SequenceOutput> outputs = generate_samples(vm, generator, *target, prompt, metrics);
  write_samples(vm, *target, description.method, run, outputs, metrics);
  return 0;
}

}  // namespace specula::cli
