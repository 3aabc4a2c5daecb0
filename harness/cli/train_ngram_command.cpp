// `specula train-ngram`: fit an interpolated modified Kneser-Ney n-gram model (draft/ngram_model.h) to a
// corpus and write it for `--draft ngram:PATH`. Tokenisation is byte-level for now (token = byte value,
// V = 256), the tokenizer of the byte-level transformer checkpoints. With --distill-from MODEL every n-gram
// ends in the target's own choice after its context instead of the text's next byte (draft/target_labels.h):
// a drafter fitted to what it is verified against.
#include <cmath>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <sstream>

#include "draft/ngram_model.h"
#include "draft/target_labels.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "harness/models/registry/model_registry.h"
#include "harness/models/registry/torch_module.h"
#include "kernels/shared/error.h"

namespace specula::cli {

int train_ngram_command(const Args& args) {
  po::options_description desc(
      "specula train-ngram --corpus FILE --order N --output PATH [--validation-fraction F] [--tokenizer bytes]\n"
      "                    [--distill-from MODEL [--distill-temperature T] [--seed S] [--threads N]]\n\n"
      "Fits an interpolated modified Kneser-Ney n-gram model for --draft ngram:PATH.\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("corpus", po::value<std::string>(), "training text")
    ("order", po::value<int32_t>(), "n-gram order N (1..16): the model reads the last N - 1 tokens")
    ("output", po::value<std::string>(), "file for the model")
    ("validation-fraction", double_value(0.0),
     "hold out the last F of the corpus (the split `specula train` makes), e.g. 0.1; 0 = train on it all")
    ("tokenizer", po::value<std::string>()->default_value("bytes"), "bytes: token = byte value (V = 256)")
    ("distill-from", po::value<std::string>(), "target model (e.g. transformer:DIR): each n-gram ends in its choice after the context, not in the text's next token")
    ("distill-temperature", double_value(0.0), "with --distill-from: 0 = the target's argmax (for greedy decoding), T > 0 = a draw from softmax(logits / T)")
    ("seed", po::value<uint64_t>()->default_value(0), "with --distill-temperature > 0: Philox seed of the draws")
    ("threads", po::value<int32_t>()->default_value(1), "with --distill-from: target windows run in parallel (labels so far are kept in OUTPUT.labels-checkpoint: an interrupted run resumes)")
    ("config", po::value<std::string>(), "INI file with any of these options (the command line wins)");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "train-ngram");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  for (const char* required : {"corpus", "order", "output"})
    if (!vm.count(required)) fail("--", required, " is required");
  const std::string tokenizer = vm["tokenizer"].as<std::string>();
  if (tokenizer != "bytes" && tokenizer != "byte")
    fail("--tokenizer: unknown tokenizer '", tokenizer, "' (known: bytes)");
  const int32_t order = vm["order"].as<int32_t>();
  if (order < 1 || order > 16) fail("--order must be in 1..16, got ", order);

  const std::string corpus_path = vm["corpus"].as<std::string>();
  const std::string text = read_input_file(corpus_path, "--corpus");
  if (text.empty()) fail("--corpus: '", corpus_path, "' is empty");
  const double held_out = vm["validation-fraction"].as<double>();
  if (!(held_out >= 0.0 && held_out < 1.0)) fail("--validation-fraction must be in [0, 1), got ", held_out);
  // The same contiguous split as harness/train/text_corpus.cpp: the first 1 - F of the tokens.
  const size_t n_train = text.size() - static_cast<size_t>(static_cast<double>(text.size()) * held_out);
  if (n_train == 0) fail("--validation-fraction ", held_out, " leaves no training text in '", corpus_path, "'");
  std::vector<Token> tokens(n_train);
  for (size_t i = 0; i < n_train; ++i) tokens[i] = static_cast<unsigned char>(text[i]);

  const std::string output = vm["output"].as<std::string>();
  check_output_file_writable(output, "--output");  // before counting
  std::vector<Token> labels = tokens;
  std::string checkpoint;  // the labels checkpoint of --distill-from
  for (const char* option : {"distill-temperature", "seed", "threads"})
    if (!vm[option].defaulted() && !vm.count("distill-from"))
      fail("--", option, " is only used with --distill-from MODEL");
  if (vm.count("distill-from")) {
    const int32_t threads = vm["threads"].as<int32_t>();
    if (threads < 1 || threads > 256) fail("--threads must be in 1..256, got ", threads);
    const double temperature = vm["distill-temperature"].as<double>();
    if (!(temperature >= 0.0 && std::isfinite(temperature)))
      fail("--distill-temperature must be >= 0, got ", temperature);
    const auto target = load_language_model(vm["distill-from"].as<std::string>(), "distill-from");
    if (target->vocab_size() != 256)
      fail("--distill-from: ", target->description(), " has ", target->vocab_size(),
           " tokens; the byte tokenizer needs 256");
    set_compute_threads(1);  // one thread per window
    TargetLabelOptions options;
    options.temperature = temperature;
    options.seed = vm["seed"].as<uint64_t>();
    options.threads = threads;
    int last_tenth = -1;
    // An interrupted labelling resumes from here; removed once the model is written.
    checkpoint = output + ".labels-checkpoint";
    options.checkpoint = checkpoint;
    options.resumed = [&](int64_t done, int64_t all) {
      std::cerr << "  resuming from " << checkpoint << ": " << done << " of " << all << " windows already labelled\n";
    };
    options.progress = [&](int64_t done, int64_t all) {
      const int tenth = static_cast<int>(10 * done / std::max<int64_t>(all, 1));
      if (tenth == last_tenth) return;
      last_tenth = tenth;
      std::cerr << "  labelled " << done << " of " << all << " positions\n";
    };
    labels = target_labels(*target, tokens, options);
    int64_t differ = 0;
    for (size_t i = 1; i < tokens.size(); ++i) differ += labels[i] != tokens[i];
    std::ostringstream rule;
    if (options.temperature == 0.0)
      rule << "argmax";
    else
      rule << "T = " << options.temperature << ", seed " << options.seed;
    std::cout << "labelled " << tokens.size() - 1 << " positions with " << target->description() << "'s choices ("
              << rule.str() << "); they differ from the text's next token at " << differ << "\n";
  }

  const NgramModel model = NgramModel::train(tokens, labels, order, 256);
  model.save(output);
  if (std::error_code ignored; !checkpoint.empty()) std::filesystem::remove(checkpoint, ignored);
  std::cout << "trained order-" << order << " Kneser-Ney model on " << tokens.size() << " tokens (V = 256"
            << (held_out > 0 ? ", the last " + std::to_string(text.size() - n_train) + " held out" : std::string())
            << ") -> " << output << "\n";
  for (int32_t n = 1; n <= order; ++n) {
    const NgramModel::Discounts& d = model.discounts(n);
    std::cout << "  " << n << "-grams: " << model.num_ngrams(n) << "  discounts " << d.d1 << " " << d.d2 << " " << d.d3
              << (d.fallback ? " (fallback)" : "") << "\n";
  }
  return 0;
}

}  // namespace specula::cli
