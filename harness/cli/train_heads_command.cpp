// `specula train-medusa` and `specula train-eagle`: train draft heads on a frozen target checkpoint and write a
// heads folder loadable as `--draft medusa:DIR` / `--draft eagle:DIR` (harness/train/head_trainer.h). Options
// come from the command line and/or an INI file (--config experiments/train-medusa.ini); the command line wins.
#include <iostream>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/io/output_file.h"
#include "harness/io/stop_signals.h"
#include "harness/train/head_trainer.h"
#include "kernels/shared/error.h"

namespace specula::cli {
namespace {

int train_heads_command(const Args& args, const std::string& kind) {
  const bool medusa = kind == "medusa";
  const std::string name = "train-" + kind;
  po::options_description desc(
      "specula " + name + " --config experiments/" + name + ".ini --corpus ../shared/data/tinyshakespeare.txt\n" +
      "  [--target DIR] [--output DIR] [options]\n\n" +
      (medusa ? "Trains Medusa heads (Cai et al. 2024) on a frozen target: head k on the target's feature f_t\n"
                "predicts x_{t+k+1}; loss sum_k decay^k CE_k.\n"
              : "Trains an EAGLE head (Li et al. 2024) on a frozen target: (Embed(x_{t+1}), f_t + noise) -> f_{t+1};\n"
                "loss SmoothL1 on features + token-weight x CE through the target's LM head.\n") +
      "The target's features of --feature-windows training windows are computed once and kept in memory.\n"
      "With 2 threads, run with OMP_WAIT_POLICY=passive.\n\nOptions");
  const HeadTrainOptions d;
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("config", po::value<std::string>(), ("INI file with any of these options (section [" + name + "] or none)").c_str())
    ("target", po::value<std::string>(), "the frozen target checkpoint folder")
    ("corpus", po::value<std::string>(), "training text file")
    ("output", po::value<std::string>(), "heads folder to write")
    ("overwrite", "replace the model already in --output (never the --target)")
    ("matrices-dtype", po::value<std::string>()->default_value(d.matrices_dtype),
     "how the folder stores its matrices: float32 | float16 | bfloat16 (training runs in float32; norm gains stay float32)")
    ("validation-fraction", double_value(d.validation_fraction), "last fraction of the corpus held out")
    ("feature-windows", po::value<int64_t>()->default_value(d.feature_windows), "training windows run through the target");
  add_optimizer_options(desc, d);
  if (medusa)
    desc.add_options()
      ("heads", po::value<int32_t>()->default_value(d.medusa_heads), "Medusa heads K")
      ("decay", double_value(d.medusa_decay), "loss weight of head k: decay^k");
  else
    desc.add_options()
      ("noise", double_value(d.eagle_noise), "uniform feature noise: (U - 0.5) * noise * 512 / seq-len")
      ("feature-weight", double_value(d.eagle_feature_weight), "weight of SmoothL1 on features")
      ("token-weight", double_value(d.eagle_token_weight), "weight of the token cross-entropy");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, name);
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  HeadTrainOptions o;
  o.kind = kind;
  if (vm.count("target")) o.target = vm["target"].as<std::string>();
  if (vm.count("corpus")) o.corpus = vm["corpus"].as<std::string>();
  if (vm.count("output")) o.output = vm["output"].as<std::string>();
  // Heads are saved at the first improvement: a model in --output would be gone before anyone noticed.
  if (!o.output.empty()) check_model_output_folder(o.output, vm.count("overwrite") > 0, o.target, "--output");
  o.matrices_dtype = vm["matrices-dtype"].as<std::string>();
  o.validation_fraction = vm["validation-fraction"].as<double>();
  o.feature_windows = vm["feature-windows"].as<int64_t>();
  read_optimizer_options(vm, o);
  if (medusa) {
    o.medusa_heads = vm["heads"].as<int32_t>();
    o.medusa_decay = vm["decay"].as<double>();
  } else {
    o.eagle_noise = vm["noise"].as<double>();
    o.eagle_feature_weight = vm["feature-weight"].as<double>();
    o.eagle_token_weight = vm["token-weight"].as<double>();
  }
  o.command = "specula " + name;
  for (const std::string& a : args) o.command += " " + a;

  const HeadTrainResult r = train_draft_heads(o);
  if (r.stop.signal) return end_by_signal(r.stop.signal);  // as `run`: said on stderr, a shell reports 128 + signal
  std::cout << kind << " heads " << o.output << ": step " << r.best_step << " of " << r.steps << ", validation loss "
            << r.val_loss << ", top-1";
  for (double v : r.val_top1) std::cout << " " << v;
  std::cout << ", " << r.seconds << " s\n";
  return 0;
}

}  // namespace

int train_medusa_command(const Args& args) { return train_heads_command(args, "medusa"); }
int train_eagle_command(const Args& args) { return train_heads_command(args, "eagle"); }

}  // namespace specula::cli
