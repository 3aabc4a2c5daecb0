// Text <-> token ids for models that come with a tokenizer (transformer checkpoints). Torch-free, so the
// commands can encode a --prompt and decode the output without pulling in LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // the `tokenizer` value of a checkpoint's config.json, e.g. "byte"
  virtual int32_t vocab_size() const = 0;
  virtual std::vector<Token> encode(const std::string& text) const = 0;
  // Throws Error on a token id outside the vocabulary.
  virtual std::string decode(const std::vector<Token>& tokens) const = 0;
};

// The text of `tokens` for output: runs of ids the tokenizer covers decode together as usual; an id at or
// beyond its vocabulary — a padded logits row, as in Qwen2 checkpoints whose vocab_size exceeds the
// tokenizer — renders as "<|id:N|>" instead of failing, so no sample is lost.
std::string decode_for_output(const Tokenizer& tokenizer, const std::vector<Token>& tokens);
// "<|id:N|>"
std::string token_id_escape(Token token);

// Each id's text for constrained decoding, for ids [0, vocab_size): ids beyond the tokenizer (padding) get an
// empty string, which no constraint allows.
std::vector<std::string> token_strings_for_constraints(const Tokenizer& tokenizer, int32_t vocab_size);

}  // namespace specula
