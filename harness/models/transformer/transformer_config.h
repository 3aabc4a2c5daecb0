// The sizes of a decoder-only transformer, and the config.json of a checkpoint folder that holds one.
// Torch-free: the tokenizer loader and the commands read checkpoints' configs without LibTorch.
//
// A checkpoint is a folder:
//   config.json   {"format": "specula-transformer-1", "model": {...TransformerConfig...}, "tokenizer": "byte",
//                  "weights": {"file": "weights.pt", "dtype": "float16", "bytes": N, "crc32": "1a2b3c4d"},
//                  "training": {...free-form record...}}
//   weights.pt    a torch::serialize archive of named tensors (the module's parameters), in `dtype`.
// "bytes" and "crc32" (harness/io/file_checksum.h) are written with the weights and checked before they are
// read; a config without them (written before they existed) loads unchecked.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "harness/io/file_checksum.h"

namespace specula {

// The most positions a transformer serves (the RoPE tables and KV caches are sized by it before any use).
inline constexpr int32_t kMaxSeqLen = 1 << 20;
// Bounds on a config's sizes, each far above any released model's (d_model 16384-25600, d_ff ~100K, vocabularies
// ~256K, a few hundred layers), so that the parameter and memory counts, products of them, stay inside int64 and a
// config's numbers cannot wrap the memory check that guards the allocation.
inline constexpr int32_t kMaxModelWidth = 1 << 20;   // d_model
inline constexpr int32_t kMaxFeedForward = 1 << 22;  // d_ff
inline constexpr int32_t kMaxVocabulary = 1 << 24;
inline constexpr int32_t kMaxLayers = 1 << 12;

struct TransformerConfig {
  int32_t vocab_size = 256;  // byte-level tokenizer by default
  int32_t d_model = 256;     // residual width
  int32_t n_layers = 4;
  int32_t n_heads = 4;        // head_dim = d_model / n_heads (even, for RoPE's pairs)
  int32_t d_ff = 768;         // SwiGLU hidden width (gate and up projections are d_model -> d_ff each)
  int32_t max_seq_len = 512;  // positions the model serves; the KV cache capacity of a session
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  bool tie_embeddings = true;  // LM head = token embedding matrix (transposed)
  // Grouped-query attention (Ainslie et al. 2023): key/value heads, each shared by n_heads / n_kv_heads query
  // heads; 0 = n_heads (multi-head attention). Optional in config.json, written only when set.
  int32_t n_kv_heads = 0;
  bool qkv_bias = false;  // biases on the q, k, v projections (Qwen2); optional in config.json likewise

  int32_t head_dim() const { return d_model / n_heads; }
  int32_t kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int64_t parameter_count() const;
  // Throws Error naming `where` (a file or option) and the first bad field.
  void validate(const std::string& where) const;
  std::string describe() const;  // "4 layers, d=256, 4 heads, ff=768, tied, 3.2M params"
};

nlohmann::json to_json(const TransformerConfig& c);
// Every field is required; unknown fields are errors (a typo must not silently fall back to a default).
TransformerConfig transformer_config_from_json(const nlohmann::json& j, const std::string& where);

struct CheckpointConfig {
  TransformerConfig model;
  std::string tokenizer = "byte";
  std::string weights_file = "weights.pt";             // relative to the checkpoint folder
  std::string weights_dtype = "float32";               // "float32" | "float16" | "bfloat16" (as stored)
  std::optional<FileChecksum> weights_checksum;        // of weights_file, as written
  nlohmann::json training = nlohmann::json::object();  // how it was trained: command, steps, losses, time
  // The end-of-sequence id(s) a run stops at (harness/models/eos_tokens.h), as an hf: config.json says them: an id,
  // a list of ids, or null; absent when the file does not say. Kept by export.
  std::optional<nlohmann::json> eos_token_id;
};

inline constexpr const char* kCheckpointFormat = "specula-transformer-1";
inline constexpr const char* kCheckpointConfigFile = "config.json";

// Reads DIR/config.json; throws Error naming the folder or file and the problem (missing folder, missing
// file, malformed JSON, missing or bad field, unknown tokenizer).
CheckpointConfig read_checkpoint_config(const std::string& dir);
// Whether `name` is a dtype weights can be stored in: float32, float16 or bfloat16.
bool is_weights_dtype_name(const std::string& name);
// The optional "bytes" and "crc32" of a config's "weights" object (both or neither); errors name `where`.
std::optional<FileChecksum> read_weights_checksum(const nlohmann::json& weights, const std::string& where);
void write_weights_checksum(nlohmann::json& weights, const std::optional<FileChecksum>& checksum);
void write_checkpoint_config(const std::string& dir, const CheckpointConfig& config);

}  // namespace specula
