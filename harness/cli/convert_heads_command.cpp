// `specula convert-heads`: rewrite a Medusa or EAGLE heads folder with its matrices stored in another dtype
// (draft/heads/draft_heads.h, matrices_dtype). Heads run with their matrices in the target's dtype by default,
// so heads trained in float32 and stored as float16 take half the bytes and decode exactly as before; norm
// gains stay float32.
#include <filesystem>
#include <iostream>

#include "draft/heads/draft_heads.h"
#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/io/output_file.h"
#include "harness/models/transformer/transformer_config.h"
#include "kernels/shared/error.h"

namespace specula::cli {
namespace {

namespace fs = std::filesystem;

// Reads the heads of `dir` and writes them to `output` with `config`'s matrices dtype.
template <typename Heads>
void rewrite(const std::string& dir, Heads heads, const DraftHeadsConfig& read, const DraftHeadsConfig& config,
             const std::string& output) {
  load_draft_heads_weights(dir, read, *heads);
  save_draft_heads(output, *heads, config);
}

}  // namespace

int convert_heads_command(const Args& args) {
  po::options_description desc(
      "specula convert-heads --heads DIR [--output DIR] --matrices-dtype float16|bfloat16|float32\n\n"
      "Rewrites a Medusa or EAGLE heads folder (specula train-medusa / train-eagle) with its matrices stored\n"
      "in another dtype; norm gains stay float32. Heads run with their matrices in the target's dtype unless\n"
      "told otherwise, so float16 storage halves the file and leaves decoding with a float16 target as it was.\n"
      "Without --output the folder is rewritten in place (weights first, then config.json).\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("heads", po::value<std::string>(), "the heads folder to read")
    ("output", po::value<std::string>(), "the heads folder to write (default: --heads, in place)")
    ("overwrite", "replace the model already in --output (another folder than --heads)")
    ("matrices-dtype", po::value<std::string>(), "float32 | float16 | bfloat16");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "convert-heads");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  for (const char* required : {"heads", "matrices-dtype"})
    if (!vm.count(required)) fail_parameter(required, " is required");
  const std::string dir = vm["heads"].as<std::string>();
  const std::string output = vm.count("output") ? vm["output"].as<std::string>() : dir;
  const std::string dtype = vm["matrices-dtype"].as<std::string>();
  if (!is_weights_dtype_name(dtype))
    fail_parameter("matrices-dtype", ": '", dtype, "' is not float32, float16 or bfloat16");
  // In place is what the command is for; another folder that holds a model is written over only when asked.
  std::error_code ec;
  if (!(fs::exists(output, ec) && fs::equivalent(output, dir, ec)))
    check_model_output_folder(output, vm.count("overwrite") > 0, "", "--output");

  const DraftHeadsConfig read = read_draft_heads_config(dir);
  DraftHeadsConfig config = read;
  config.matrices_dtype = dtype;
  // The target is named relative to the heads folder: re-based when the folder moves.
  if (!fs::path(read.target).is_absolute()) {  // fs::relative needs neither folder to exist yet
    config.target = fs::relative(fs::absolute(resolve_heads_target(dir, read)), fs::absolute(output)).string();
    if (config.target.empty()) fail(output, ": cannot name the heads' target ", read.target, " from there");
  }
  if (read.kind == "medusa")
    rewrite(dir, MedusaHeads(read.medusa_heads, read.target_model.d_model, read.target_model.vocab_size), read, config,
            output);
  else
    rewrite(dir, EagleHead(read.target_model), read, config, output);
  std::cout << "wrote " << read.kind << " heads to " << output << " (matrices " << dtype << ", from "
            << read.matrices_dtype << ")\n";
  return 0;
}

}  // namespace specula::cli
