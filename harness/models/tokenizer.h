// Text <-> token ids for models that come with a tokenizer (transformer checkpoints). Torch-free, so the
// commands can encode a --prompt and decode the output without pulling in LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "verify/sampling_params.h"

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

// The tokenizer of a model named by a "kind:PATH" spec (as for --target): for transformer:DIR, the one named
// in DIR/config.json. nullptr for models without one (bigram tables speak token ids only). Throws Error on a
// missing or malformed checkpoint config.
std::shared_ptr<const Tokenizer> load_tokenizer_for(const std::string& model_spec);

}  // namespace specula
