// The tokenizer of a Hugging Face-style model folder. Torch-free.
#pragma once

#include <memory>
#include <string>

#include "harness/models/tokenizer.h"

namespace specula {

// DIR/tokenizer.model (SentencePiece; BOS / EOS from DIR/tokenizer_config.json's add_bos_token and
// add_eos_token) when present — Llama 2 and Mistral folders carry a tokenizer.json too, converted from it —
// else DIR/tokenizer.json (byte-level BPE: Llama 3, Qwen2, GPT-2); nullptr when the folder has neither.
// Throws Error naming the file for anything it cannot read.
std::shared_ptr<const Tokenizer> load_hf_tokenizer(const std::string& dir);

}  // namespace specula
