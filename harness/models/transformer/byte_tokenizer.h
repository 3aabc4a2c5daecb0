// Byte-level tokenization: token t is the byte t (vocabulary 256). Lossless for any text, no merges, no
// special tokens; the default tokenizer of Specula's transformer checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/models/tokenizer.h"

namespace specula {

class ByteTokenizer : public Tokenizer {
 public:
  std::string name() const override { return "byte"; }
  int32_t vocab_size() const override { return 256; }
  std::vector<Token> encode(const std::string& text) const override;
  std::string decode(const std::vector<Token>& tokens) const override;
};

// The tokenizer named `name` (known: "byte"); an unknown name is a ParameterError for tokenizer, which a caller
// that read the name from a file prefixes with the file (with_source).
std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name);

}  // namespace specula
