// The end-of-sequence ids a checkpoint declares, which generation adds to its stop tokens (unless
// --ignore-eos). Torch-free.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

// For hf:DIR, `eos_token_id` of DIR/generation_config.json when that file sets it, else of DIR/config.json
// (an id, a list of ids, or null); for transformer:DIR, `eos_token_id` of DIR/config.json if present; none for
// other models. Throws Error naming the file, the key and the value when it is not an id or a list of ids
// in [0, vocab_size).
std::vector<Token> checkpoint_eos_tokens(const std::string& model_spec, int32_t vocab_size);

// The ids of an `eos_token_id` value (an id, a list of ids, or null). Throws Error naming `where` (the file) and the
// value when it is not an id or a list of ids in [0, vocab_size).
std::vector<Token> eos_token_ids(const nlohmann::json& value, int32_t vocab_size, const std::string& where);

// Adds the ids of `eos` that `params.stop_tokens` lacks, after the ones it has.
void add_stop_tokens(SamplingParams& params, const std::vector<Token>& eos);

}  // namespace specula
