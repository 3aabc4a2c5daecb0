// `specula train`: train a decoder-only transformer on a text corpus and write a checkpoint folder loadable as
// `transformer:PATH` (harness/train/trainer.h). Options come from the command line and/or an INI file
// (--config experiments/train-target.ini); the command line wins.
#include <iostream>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/train/trainer.h"
#include "verify/error.h"

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
    ("output", po::value<std::string>(), "checkpoint folder to write")
    ("tokenizer", po::value<std::string>()->default_value(defaults.tokenizer), "tokenizer: byte")
    ("validation-fraction", po::value<double>()->default_value(defaults.validation_fraction), "last fraction of the corpus held out")
    ("weights-dtype", po::value<std::string>()->default_value(defaults.weights_dtype), "checkpoint storage: float32 | float16")
    ("vocab-size", po::value<int32_t>()->default_value(defaults.model.vocab_size), "vocabulary (256 for byte)")
    ("d-model", po::value<int32_t>()->default_value(defaults.model.d_model), "residual width")
    ("n-layers", po::value<int32_t>()->default_value(defaults.model.n_layers), "transformer blocks")
    ("n-heads", po::value<int32_t>()->default_value(defaults.model.n_heads), "attention heads")
    ("d-ff", po::value<int32_t>()->default_value(defaults.model.d_ff), "SwiGLU hidden width")
    ("max-seq-len", po::value<int32_t>()->default_value(defaults.model.max_seq_len), "positions served (KV cache capacity)")
    ("rope-theta", po::value<double>()->default_value(defaults.model.rope_theta), "RoPE base")
    ("norm-eps", po::value<double>()->default_value(defaults.model.norm_eps), "RMSNorm epsilon")
    ("tie-embeddings", po::value<bool>()->default_value(defaults.model.tie_embeddings), "LM head = embedding matrix")
    ("steps", po::value<int64_t>()->default_value(defaults.lr.total_steps), "optimizer steps")
    ("batch-size", po::value<int64_t>()->default_value(defaults.batch_size), "windows per step")
    ("seq-len", po::value<int64_t>()->default_value(defaults.seq_len), "tokens per window")
    ("lr", po::value<double>()->default_value(defaults.lr.peak), "peak learning rate")
    ("min-lr", po::value<double>()->default_value(defaults.lr.min), "learning rate at the end of the cosine")
    ("warmup-steps", po::value<int64_t>()->default_value(defaults.lr.warmup_steps), "linear warm-up steps")
    ("weight-decay", po::value<double>()->default_value(defaults.weight_decay), "AdamW decoupled weight decay (matrices)")
    ("beta1", po::value<double>()->default_value(defaults.beta1), "AdamW beta1")
    ("beta2", po::value<double>()->default_value(defaults.beta2), "AdamW beta2")
    ("grad-clip", po::value<double>()->default_value(defaults.grad_clip), "max gradient norm (<= 0: off)")
    ("eval-interval", po::value<int64_t>()->default_value(defaults.eval_interval), "steps between validation losses")
    ("eval-windows", po::value<int64_t>()->default_value(defaults.eval_windows), "validation windows per periodic evaluation")
    ("log-interval", po::value<int64_t>()->default_value(defaults.log_interval), "steps between progress lines when stderr is not a terminal")
    ("seed", po::value<uint64_t>()->default_value(defaults.seed), "initialisation and batch sampling seed")
    ("threads", po::value<int>()->default_value(defaults.threads), "LibTorch/OpenMP threads");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "train");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  TrainOptions o;
  if (vm.count("corpus")) o.corpus = vm["corpus"].as<std::string>();
  if (vm.count("output")) o.output = vm["output"].as<std::string>();
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
  o.lr.total_steps = vm["steps"].as<int64_t>();
  o.batch_size = vm["batch-size"].as<int64_t>();
  o.seq_len = vm["seq-len"].as<int64_t>();
  o.lr.peak = vm["lr"].as<double>();
  o.lr.min = vm["min-lr"].as<double>();
  o.lr.warmup_steps = vm["warmup-steps"].as<int64_t>();
  o.weight_decay = vm["weight-decay"].as<double>();
  o.beta1 = vm["beta1"].as<double>();
  o.beta2 = vm["beta2"].as<double>();
  o.grad_clip = vm["grad-clip"].as<double>();
  o.eval_interval = vm["eval-interval"].as<int64_t>();
  o.eval_windows = vm["eval-windows"].as<int64_t>();
  o.log_interval = vm["log-interval"].as<int64_t>();
  o.seed = vm["seed"].as<uint64_t>();
  o.threads = vm["threads"].as<int>();
  o.command = "specula train";
  for (const std::string& a : args) o.command += " " + a;

  const TrainResult r = train_transformer(o);
  std::cout << "checkpoint " << o.output << ": step " << r.best_step << " of " << r.steps << ", validation loss "
            << r.val_loss << " nats/token (" << r.val_tokens << " tokens), " << r.tokens_per_second
            << " training tokens/s, " << r.seconds << " s\n";
  return 0;
}

}  // namespace specula::cli
