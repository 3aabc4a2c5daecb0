// The config of a heads checkpoint (Medusa heads, the EAGLE head), read and written without LibTorch: a run checks
// heads against its target from the configs before either loads (head_drafter_spec.h).
//
// A heads checkpoint is a folder:
//   config.json  {"format": "specula-draft-heads-1", "kind": "medusa" | "eagle",
//                 "target": "../target"        (the target checkpoint, relative to this folder),
//                 "target_model": {...TransformerConfig of that target...},
//                 "medusa_heads": K             (medusa only),
//                 "weights": {"file": "weights.pt"}, "training": {...free-form record...}}
//   weights.pt   a torch::serialize archive of the heads' parameters (fp32). The EAGLE head stores only its
//                own layer: the token embedding and the LM head are the target's, frozen.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "harness/models/transformer/transformer_config.h"

namespace specula {

struct DraftHeadsConfig {
  std::string kind;                  // "medusa" | "eagle"
  std::string target = "../target";  // target checkpoint folder, relative to the heads folder (or absolute)
  TransformerConfig target_model;    // the sizes of that target (checked when loading)
  int32_t medusa_heads = 0;          // K (medusa)
  std::string weights_file = "weights.pt";
  // How the matrices are stored (float32 | float16 | bfloat16; norm gains stay float32): heads run with their
  // matrices in the target's dtype by default, so 16-bit storage halves the file and changes nothing at run
  // time. "float32" when the config does not say (heads written before the field existed).
  std::string matrices_dtype = "float32";
  std::optional<FileChecksum> weights_checksum;  // of weights_file, as written ("bytes", "crc32"; checked at load)
  // The target's weights the heads were trained on ("target_weights": "bytes", "crc32", as the target's config records
  // them): a target retrained in place keeps its sizes but not these, and heads trained on the old weights would draft
  // for it quietly worse. Absent for heads written before the field existed, or for a target whose config records none.
  std::optional<FileChecksum> target_weights_checksum;
  nlohmann::json training = nlohmann::json::object();
};

inline constexpr const char* kDraftHeadsFormat = "specula-draft-heads-1";

// Reads DIR/config.json; errors name the file and the bad field (unknown fields are errors too).
DraftHeadsConfig read_draft_heads_config(const std::string& dir);
void write_draft_heads_config(const std::string& dir, const DraftHeadsConfig& config);
// The target folder of `config` resolved against the heads folder `dir`.
std::string resolve_heads_target(const std::string& dir, const DraftHeadsConfig& config);
// As resolve_heads_target, for loading the target: an Error naming the heads' config and its `target` where that
// names no folder (the target was moved or removed).
std::string heads_target_folder(const std::string& dir, const DraftHeadsConfig& config);

// The heads trained on the target at `target_dir`, whose config is `target`: its sizes must be the ones the heads were
// trained on, and its weights too where both configs record them. Throws a ParameterError for "draft" naming `where`.
void check_heads_target_config(const DraftHeadsConfig& heads, const std::string& target_dir,
                               const CheckpointConfig& target, const std::string& where);

}  // namespace specula
