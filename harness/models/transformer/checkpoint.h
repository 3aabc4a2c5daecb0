// Checkpoint folders (format in transformer_config.h): save a Transformer with its config and tokenizer name,
// load one back with every problem reported as an Error that names the file. Includes LibTorch.
#pragma once

#include <optional>
#include <string>

#include "harness/models/transformer/transformer_config.h"
#include "harness/models/transformer/transformer_model.h"

namespace specula {

struct LoadedCheckpoint {
  Transformer model{nullptr};  // eval mode; matrices in the dtype asked for at load, built so (TransformerImpl)
  CheckpointConfig config;
};

// Reads DIR/config.json and the weights; errors name the file and the problem: missing folder or file,
// malformed JSON, a corrupt weights archive, a missing tensor, a shape mismatch, an unexpected tensor.
// Matrices are kept in `weights_dtype` (float32 | float16 | bfloat16 | auto = as the checkpoint stores them);
// norm gains stay float32. Training and export read float32, the default.
LoadedCheckpoint load_checkpoint(const std::string& dir, const std::string& weights_dtype = "float32");

class TransformerLanguageModel;
// The module a loaded `transformer:DIR` model runs, e.g. for draft heads that read the same target: sharing
// it keeps one copy of the weights in the caches instead of two.
Transformer transformer_module(const TransformerLanguageModel& model);

// Writes DIR/config.json and DIR/<config.weights_file> (parameters stored as config.weights_dtype), creating
// DIR. Each file is written whole and renamed into place, the weights first, so a reader never sees half a file; a
// process killed between the two renames leaves weights that the old config's checksum refuses (training defers stop
// signals past a save: harness/train/training_stop.h). config.model is replaced by the model's own config.
void save_checkpoint(const std::string& dir, Transformer& model, CheckpointConfig config);

// The torch dtype of a checkpoint dtype name (float32 | float16 | bfloat16; checked where the name is read).
torch::Dtype storage_dtype(const std::string& name);

// Which tensors a stored dtype applies to: all of them (transformer checkpoints), or the matrices (2-D and
// more) only, the other tensors (norm gains, biases) staying float32 (draft heads).
enum class DtypeScope { all, matrices };

// Reads every parameter of `module` from the LibTorch archive `path` (named by `config_file`): each must be
// present, of the module's shape, finite, and stored as `stored_dtype` (a checkpoint dtype name; "" = any) over
// `scope` (DtypeScope::matrices: the other tensors as float32); a tensor the module lacks is an error naming
// `owner` ("this model", "these heads"). When `checksum` is given, the file's size and CRC-32 are checked
// against it first.
void load_parameters(const std::string& path, torch::nn::Module& module, const std::string& config_file,
                     const std::string& stored_dtype, const std::string& owner,
                     const std::optional<FileChecksum>& checksum = std::nullopt, DtypeScope scope = DtypeScope::all);

// Writes `module`'s parameters to dir/file as a LibTorch archive, the tensors `scope` names converted to `dtype`
// (undefined: as they are), through a temporary file renamed into place, so that a reader never sees
// half-written weights. Creates dir; `folder` names it in errors ("checkpoint folder", "heads folder"). Returns
// the written file's checksum.
FileChecksum save_parameters_atomically(const std::string& dir, const std::string& file, torch::nn::Module& module,
                                        c10::optional<torch::Dtype> dtype, const std::string& folder,
                                        DtypeScope scope = DtypeScope::all);

}  // namespace specula
