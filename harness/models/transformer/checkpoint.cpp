#include "harness/models/transformer/checkpoint.h"

#include <filesystem>
#include <set>

#include "harness/io/output_file.h"
#include "harness/models/transformer/memory_budget.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

namespace fs = std::filesystem;

}  // namespace

torch::Dtype storage_dtype(const std::string& name) {
  return name == "float16" ? torch::kFloat16 : name == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

LoadedCheckpoint load_checkpoint(const std::string& dir, const std::string& weights_dtype) {
  LoadedCheckpoint out;
  out.config = read_checkpoint_config(dir);
  const torch::ScalarType keep = weights_dtype_for(weights_dtype, storage_dtype(out.config.weights_dtype));
  // Checked before the model is allocated: a config claiming larger sizes than its weights hold, or a model
  // larger than the memory there is, is an error, not an allocator failure.
  const std::string weights = (fs::path(dir) / out.config.weights_file).string();
  const std::string config_file = (fs::path(dir) / kCheckpointConfigFile).string();
  if (out.config.weights_checksum && fs::is_regular_file(weights))
    check_file_checksum(weights, *out.config.weights_checksum, config_file);
  std::error_code ec;
  const uintmax_t stored = fs::file_size(weights, ec);
  const int64_t parameters = out.config.model.parameter_count();
  const int64_t needed = parameters * static_cast<int64_t>(c10::elementSize(storage_dtype(out.config.weights_dtype)));
  if (!ec && stored < static_cast<uintmax_t>(needed))
    fail(weights, ": ", stored, " bytes, but ", config_file, " describes ", parameters, " parameters (",
         out.config.model.describe(), "), ", needed, " bytes in ", out.config.weights_dtype,
         ": the config does not match the weights");
  ModelMemoryPlan plan = plan_model_memory(out.config.model, static_cast<int>(c10::elementSize(keep)));
  plan.source_bytes = ec ? needed : static_cast<int64_t>(stored);  // the archive is read whole
  check_model_fits(plan, "transformer:" + dir);
  out.model = Transformer(out.config.model, keep);  // matrices built as kept
  load_parameters(weights, *out.model, config_file, out.config.weights_dtype, "this model");
  out.model->eval();
  return out;
}

void save_checkpoint(const std::string& dir, Transformer& model, CheckpointConfig config) {
  if (has_packed_matrices(*model))
    fail("save_checkpoint ", dir, ": the model's matrices are packed for decoding (a loaded inference model)");
  config.model = model->config();
  if (!is_weights_dtype_name(config.weights_dtype))
    fail("checkpoint weights dtype '", config.weights_dtype, "' is not float32, float16 or bfloat16");
  config.weights_checksum = save_parameters_atomically(dir, config.weights_file, *model,
                                                       storage_dtype(config.weights_dtype), "checkpoint folder");
  write_checkpoint_config(dir, config);
}

FileChecksum save_parameters_atomically(const std::string& dir, const std::string& file, torch::nn::Module& module,
                                        c10::optional<torch::Dtype> dtype, const std::string& folder,
                                        DtypeScope scope) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create the ", folder, ": ", ec.message());
  const std::string path = (fs::path(dir) / file).string();
  torch::NoGradGuard no_grad;
  torch::serialize::OutputArchive archive;
  for (const auto& p : module.named_parameters()) {
    torch::Tensor t = p.value().detach();
    const bool convert = dtype && (scope == DtypeScope::all || t.dim() >= 2);
    archive.write(p.key(), (convert ? t.to(*dtype) : t).contiguous());
  }
  FileChecksum written;
  replace_file_atomically(path, path, [&](const std::string& tmp) {
    try {
      archive.save_to(tmp);
    } catch (const c10::Error& e) {
      fail(path, ": cannot write weights: ", e.what_without_backtrace());
    }
    written = file_checksum(tmp);
  });
  return written;
}

void load_parameters(const std::string& path, torch::nn::Module& module, const std::string& config_file,
                     const std::string& stored_dtype, const std::string& owner,
                     const std::optional<FileChecksum>& checksum, DtypeScope scope) {
  if (fs::is_directory(path)) fail(path, ": is a folder, not the weights file ", config_file, " names");
  if (!fs::is_regular_file(path)) fail(path, ": missing weights file (named by ", config_file, ")");
  if (checksum) check_file_checksum(path, *checksum, config_file);
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    fail(path, ": corrupt or unreadable weights archive: ", e.what_without_backtrace());
  }
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;
  for (auto& p : module.named_parameters()) {
    expected.insert(p.key());
    torch::Tensor stored;
    try {
      if (!archive.try_read(p.key(), stored)) fail(path, ": missing tensor '", p.key(), "'");
    } catch (const c10::Error& e) {
      fail(path, ": cannot read tensor '", p.key(), "': ", e.what_without_backtrace());
    }
    if (stored.sizes() != p.value().sizes())
      fail(path, ": tensor '", p.key(), "' has shape ", stored.sizes(), " but ", config_file, " implies ",
           p.value().sizes());
    if (!stored_dtype.empty()) {
      const bool scoped = scope == DtypeScope::all || stored.dim() >= 2;
      const std::string want = scoped ? stored_dtype : "float32";
      if (stored.scalar_type() != storage_dtype(want))
        fail(path, ": tensor '", p.key(), "' is ", stored.scalar_type(), " but the config says ", want,
             scoped ? "" : " (only matrices take the config's dtype)");
    }
    copy_finite(p.value(), stored, path, p.key());
  }
  for (const std::string& key : archive.keys())
    if (!expected.count(key)) fail(path, ": unexpected tensor '", key, "' (not a parameter of ", owner, ")");
}

}  // namespace specula
