// `specula export`: write a transformer checkpoint (`specula train`'s output) as a Hugging Face-style folder —
// config.json, model.safetensors, tokenizer.json — loadable as `hf:DIR` here and by other tools that read
// Llama checkpoints (harness/models/hf/hf_model.h).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "harness/cli/commands.h"
#include "harness/config/command_options.h"
#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "harness/models/hf/hf_model.h"
#include "harness/models/registry/model_registry.h"
#include "kernels/shared/bounded_json.h"
#include "kernels/shared/error.h"

namespace specula::cli {

int export_command(const Args& args) {
  po::options_description desc(
      "specula export --model transformer:DIR --output HF_DIR [--dtype float32|float16|bfloat16]\n\n"
      "Writes a transformer checkpoint as a Hugging Face-style folder (LlamaForCausalLM config.json,\n"
      "model.safetensors, an equivalent tokenizer.json), loadable as --target hf:HF_DIR. With --verify (the\n"
      "default) the folder is loaded back and its logits compared with the checkpoint's.\n\nOptions");
  // clang-format off
  desc.add_options()
    ("help,h", "show this help")
    ("model", po::value<std::string>(), "the checkpoint to export: transformer:DIR")
    ("output", po::value<std::string>(), "folder to write (created; a new one, or --overwrite)")
    ("overwrite", "replace the Hugging Face checkpoint already in --output")
    ("dtype", po::value<std::string>()->default_value("float32"), "weights as stored: float32 | float16 | bfloat16")
    ("verify", po::value<bool>()->default_value(true), "load the export back and compare logits on a probe")
    ("config", po::value<std::string>(), "INI file with any of these options (the command line wins)");
  // clang-format on
  const po::variables_map vm = parse_options(args, desc, "export");
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  for (const char* required : {"model", "output"})
    if (!vm.count(required)) fail("--", required, " is required");
  const std::string model = vm["model"].as<std::string>(), output = vm["output"].as<std::string>();
  const std::string kind = "transformer:";
  if (model.rfind(kind, 0) != 0 || model.size() == kind.size())
    fail("--model '", model, "': only transformer:DIR checkpoints are exported");
  const std::string checkpoint = model.substr(kind.size());
  // Never over the checkpoint being read, and never over another export unasked: the files are replaced one by one,
  // so a folder written over is lost before the export could fail.
  std::error_code ec;
  if (std::filesystem::exists(output, ec) && std::filesystem::equivalent(checkpoint, output, ec))
    fail("--output: '", output, "' is the checkpoint being exported (", model, "): write the export elsewhere");
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
    if (!vm.count("overwrite") && std::filesystem::exists(std::filesystem::path(output) / file, ec))
      fail("--output: '", output, "' already holds ", file, "; pass --overwrite to replace it");
  // --overwrite replaces an export (a Hugging Face config names its `architectures`), never another kind of model.
  const std::filesystem::path config = std::filesystem::path(output) / "config.json";
  if (std::filesystem::exists(config, ec)) {
    nlohmann::json j;
    try {
      j = parse_bounded_json(read_input_file(config.string(), "--output"));
    } catch (const nlohmann::json::exception&) {  // not JSON, or not JSON a tool wrote: not an export
    }
    if (!j.is_object() || !j.contains("architectures"))
      fail("--output: '", output, "' holds a model that is not a Hugging Face export (", config.string(),
           " names no architectures); --overwrite replaces only an export: write elsewhere");
  }
  check_output_folder_writable(output, "--output");
  HfExportOptions options;
  options.dtype = vm["dtype"].as<std::string>();
  export_hf_checkpoint(checkpoint, output, options);
  std::cout << "exported " << model << " to " << output << " (" << options.dtype << ")\n";

  if (vm["verify"].as<bool>()) {
    const auto original = load_language_model(model, "model");
    const auto exported = load_language_model("hf:" + output, "output");
    const int32_t V = original->vocab_size();
    if (exported->vocab_size() != V) fail(output, ": vocabulary ", exported->vocab_size(), " != ", V);
    std::vector<Token> probe;
    for (int i = 0; i < 16; ++i) probe.push_back((i * 37 + 11) % V);
    std::vector<float> a(V), b(V);
    double max_diff = 0.0;
    auto sa = original->new_session(), sb = exported->new_session();
    for (size_t n = 1; n <= probe.size(); ++n) {
      const std::vector<Token> context(probe.begin(), probe.begin() + n);
      sa->next_logits(context, a.data());
      sb->next_logits(context, b.data());
      for (int32_t v = 0; v < V; ++v) max_diff = std::max(max_diff, std::abs(double(a[v]) - double(b[v])));
    }
    std::cout << "verified: max |logit difference| over a " << probe.size() << "-token probe = " << max_diff
              << (options.dtype == "float32" ? " (float32: expected 0)" : " (rounded weights)") << "\n";
    if (options.dtype == "float32" && max_diff != 0.0)
      fail(output, ": the exported logits differ from the checkpoint's");
  }
  return 0;
}

}  // namespace specula::cli
