// Hugging Face-style model folders as Specula models (`hf:DIR`), and Specula's transformer checkpoints
// written in the same format (`specula export`). Torch-free header; hf_model.cpp holds the LibTorch side.
//
// A folder holds config.json (hf_config.h), the weights as model.safetensors or as shards listed by
// model.safetensors.index.json ({"weight_map": {tensor: file}}), and a tokenizer (hf_tokenizer.h). The
// weights (F32, F16 or BF16) are read from the memory-mapped files straight into a TransformerLanguageModel
// — Specula's bundled transformer with GQA and q/k/v biases — so an hf: model has the same KV cache,
// chunk and tree forward and session reuse as transformer:DIR, and every drafter and verifier works on it.
// Tensor names (per layer i), and where they go:
//   model.embed_tokens.weight                    embedding.weight
//   model.layers.i.input_layernorm.weight        blocks.i.attn_norm.weight
//   model.layers.i.self_attn.{q,k,v}_proj.weight blocks.i.attn.qkv.weight rows [q | k | v] (.bias for Qwen2)
//   model.layers.i.self_attn.o_proj.weight       blocks.i.attn.out.weight
//   model.layers.i.post_attention_layernorm.weight blocks.i.mlp_norm.weight
//   model.layers.i.mlp.{gate,up}_proj.weight     blocks.i.mlp.gate_up.weight rows [gate | up]
//   model.layers.i.mlp.down_proj.weight          blocks.i.mlp.down.weight
//   model.norm.weight                            final_norm.weight
//   lm_head.weight                               head.weight (untied; ignored when tie_word_embeddings)
// (old checkpoints' self_attn.rotary_emb.inv_freq buffers are ignored: RoPE is rebuilt from the config).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "harness/models/language_model.h"
#include "harness/models/transformer/memory_budget.h"

namespace specula {

struct HfLoadOptions {
  std::string device = "cpu";     // "cpu", "cuda" or "cuda:N" (the latter need a CUDA build of LibTorch)
  int32_t max_seq_len = 4096;     // cap on the positions served (each session preallocates its KV cache)
  int64_t memory_available = -1;  // bytes the model may take; -1: MemAvailable of /proc/meminfo
  bool report = true;             // parameter count and resident size on stderr
  // The matrices' dtype in memory: float32 | float16 | bfloat16 | auto (as stored: the dtype of the folder's
  // 2-D tensors when they share one, whatever the norms' dtype; float32 when the matrices mix dtypes). 16-bit matrices
  // are read by the decoding step as they are (skinny_linear.h); norms and biases stay float32.
  std::string weights_dtype = "auto";
};

// What loading a folder will take, computed from config.json and the weights' headers (the kept dtype) before
// anything is allocated; the weight files are mapped, not read (source_bytes 0).
using HfMemoryPlan = ModelMemoryPlan;
HfMemoryPlan plan_hf_memory(const std::string& dir, const HfLoadOptions& options = {});

// Loads DIR (see the file comment). Throws Error naming the file and the problem: a missing or malformed
// config, an unsupported architecture, a missing, malformed or inconsistent safetensors file or index,
// a missing, unexpected or misshapen tensor, a dtype other than F32/F16/BF16, NaN or inf in a weight, a
// device this LibTorch lacks, or a model larger than the memory available (with the numbers).
std::shared_ptr<const LanguageModel> load_hf_language_model(const std::string& dir, const HfLoadOptions& options = {});

struct HfExportOptions {
  std::string dtype = "float32";  // weights as stored: "float32" | "float16" | "bfloat16"
};

// Writes the transformer checkpoint `checkpoint_dir` to `output_dir` (created) as config.json
// (LlamaForCausalLM, or Qwen2ForCausalLM for a model with q/k/v biases), model.safetensors, and for the byte
// tokenizer an equivalent tokenizer.json + tokenizer_config.json. Loading it back as hf:OUTPUT gives the
// same logits (bit for bit in float32). Throws Error naming the file and problem.
void export_hf_checkpoint(const std::string& checkpoint_dir, const std::string& output_dir,
                          const HfExportOptions& options = {});

}  // namespace specula
