// `specula train`: train a decoder-only transformer on a text corpus and write a checkpoint folder loadable as
// `transformer:PATH` (harness/train/trainer.h). Options come from the command line and/or an INI file
// (--config experiments/train-target.ini); the command line wins.
#include <filesystem>
#include <iostream>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/io/output_file.h"
#include "harness/io/stop_signals.h"
#include "harness/train/trainer.h"
#include "kernels/shared/error.h"

namespace specula::cli {

int train_command(const Args& args) {
  po::options_description desc(
      "specula train --config experiments/train-target.ini --corpus ../shared/data/tinyshakespeare.txt\n"
      "  [--output DIR] [options]\n\n"
      "Trains a decoder-only transformer (RMSNorm, RoPE, SwiGLU) on a text corpus with AdamW, warm-up + cosine\n"
      "learning rate and gradient clipping; writes a checkpoint folder whenever the validation loss improves.\n"
      "With 2 threads, run with OMP_WAIT_POLICY=passive.\n\nOptions");
  const TrainOptions defaults;
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), "INI file with any of these options (section [train] or none)")
    ("corpus", po::value<std::string>(), "training text file (never copied into the checkpoint)")
    ("output", po::value<std::string>(), "checkpoint folder to write (a new one, or --overwrite)")
    ("overwrite", "replace the checkpoint already in --output")
    ("tokenizer", po::value<std::string>()->default_value(defaults.tokenizer), "tokenizer: byte")
    ("validation-fraction", double_value(defaults.validation_fraction), "last fraction of the corpus held out")
    ("weights-dtype", po::value<std::string>()->default_value(defaults.weights_dtype), "checkpoint storage: float32 | float16 | bfloat16")
    ("vocab-size", po::value<int32_t>()->default_value(defaults.model.vocab_size), "vocabulary (256 for byte)")
    ("d-model", po::value<int32_t>()->default_value(defaults.model.d_model), "residual width")
    ("n-layers", po::value<int32_t>()->default_value(defaults.model.n_layers), "transformer blocks")
    ("n-heads", po::value<int32_t>()->default_value(defaults.model.n_heads), "attention heads")
    ("d-ff", po::value<int32_t>()->default_value(defaults.model.d_ff), "SwiGLU hidden width")
    ("max-seq-len", po::value<int32_t>()->default_value(defaults.model.max_seq_len), "positions served (KV cache capacity)")
    ("rope-theta", double_value(defaults.model.rope_theta), "RoPE base")
    ("norm-eps", double_value(defaults.model.norm_eps), "RMSNorm epsilon")
    ("tie-embeddings", po::value<bool>()->default_value(defaults.model.tie_embeddings), "LM head = embedding matrix");
  // clang-format on
  add_optimizer_options(desc, defaults);
  const po::variables_map vm = parse_options(args, desc, "train");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  TrainOptions o;
  if (vm.count("corpus")) o.corpus = vm["corpus"].as<std::string>();
  if (vm.count("output")) o.output = vm["output"].as<std::string>();
  // A checkpoint is saved at the first improvement: an existing one would be gone before anyone noticed.
  if (!o.output.empty()) check_model_output_folder(o.output, vm.count("overwrite") > 0, "", "--output");
  o.tokenizer = vm["tokenizer"].as<std::string>();
  o.validation_fraction = vm["validation-fraction"].as<double>();
  o.weights_dtype = vm["weights-dtype"].as<std::string>();
  o.model.vocab_size = vm["vocab-size"].as<int32_t>();
  o.model.d_model = vm["d-model"].as<int32_t>();
  o.model.n_layers = vm["n-layers"].as<int32_t>();
  o.model.n_heads = vm["n-heads"].as<int32_t>();
  o.model.d_ff = vm["d-ff"].as<int32_t>();
  o.model.max_seq_len = vm["max-seq-len"].as<int32_t>();
  o.model.rope_theta = vm["rope-theta"].as<double>();
  o.model.norm_eps = vm["norm-eps"].as<double>();
  o.model.tie_embeddings = vm["tie-embeddings"].as<bool>();
  read_optimizer_options(vm, o);
  o.command = "specula train";
  for (const std::string& a : args) o.command += " " + a;

  const TrainResult r = train_transformer(o);
  if (r.stop.signal) return end_by_signal(r.stop.signal);  // as `run`: said on stderr, a shell reports 128 + signal
  std::cout << "checkpoint " << o.output << ": step " << r.best_step << " of " << r.steps << ", validation loss "
            << r.val_loss << " nats/token (" << r.val_tokens << " tokens), " << r.tokens_per_second
            << " training tokens/s, " << r.seconds << " s\n";
  return 0;
}

}  // namespace specula::cli
