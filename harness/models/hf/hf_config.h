// The config.json of a Hugging Face-style model folder, for the Llama family: LlamaForCausalLM,
// MistralForCausalLM and Qwen2ForCausalLM are all pre-norm decoders with RMSNorm, RoPE ("rotate half"),
// grouped-query attention and a SwiGLU MLP, i.e. Specula's bundled transformer generalised to GQA and
// q/k/v biases (Qwen2). Torch-free: the tokenizer loader and the commands read it without LibTorch.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/models/transformer/transformer_config.h"

namespace specula {

inline constexpr const char* kHfConfigFile = "config.json";

// rope_scaling of config.json. Both supported kinds rescale the RoPE frequencies (nothing else changes):
//   linear: theta_i / factor (position interpolation, Chen et al. 2023);
//   llama3: Llama 3.1's piecewise rule — long wavelengths divided by factor, short ones kept, a smooth
//           interpolation between (transformers' _compute_llama3_parameters).
struct RopeScaling {
  std::string type = "none";  // "none" | "linear" | "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0;                    // llama3 only
  double high_freq_factor = 4.0;                   // llama3 only
  double original_max_position_embeddings = 8192;  // llama3 only
};

struct HfConfig {
  std::string architecture;         // one of kHfArchitectures
  TransformerConfig model;          // in Specula's terms; model.max_seq_len = positions served (see below)
  int64_t max_position_embeddings;  // what the checkpoint was trained for
  RopeScaling rope_scaling;
  int64_t sliding_window = 0;  // Mistral v0.1 / Qwen2 with use_sliding_window; 0 = none
  std::string torch_dtype;     // informational ("bfloat16"); the weights' own dtypes rule
};

// "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM"
std::string supported_hf_architectures();

// Reads DIR/config.json. Served positions = min(max_position_embeddings, sliding_window if any,
// max_seq_len_cap): the KV cache of a session is preallocated for them, and a sliding window is only
// exact below its width. Throws Error naming the file and the field for a missing folder or file,
// malformed JSON, an unsupported architecture, activation or rope_scaling type, or inconsistent sizes.
HfConfig read_hf_config(const std::string& dir, int32_t max_seq_len_cap);
HfConfig hf_config_from_json(const nlohmann::json& j, const std::string& where, int32_t max_seq_len_cap);

// The config.json that describes Specula's model `c` (LlamaForCausalLM, or Qwen2ForCausalLM with q/k/v
// biases) with weights stored as `torch_dtype` ("float32" | "float16" | "bfloat16").
nlohmann::json hf_config_json(const TransformerConfig& c, const std::string& torch_dtype);

// RoPE inverse frequencies theta^(-2i/D), i < D/2, after `scaling`; in double.
std::vector<double> rope_inverse_frequencies(int32_t head_dim, double theta, const RopeScaling& scaling);

}  // namespace specula
