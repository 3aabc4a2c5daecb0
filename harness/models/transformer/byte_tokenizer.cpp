#include "harness/models/transformer/byte_tokenizer.h"

#include "kernels/shared/error.h"

namespace specula {

std::vector<Token> ByteTokenizer::encode(const std::string& text) const {
  std::vector<Token> out(text.size());
  for (size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string ByteTokenizer::decode(const std::vector<Token>& tokens) const {
  std::string out(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > 255) fail("byte tokenizer: token id ", tokens[i], " is not a byte (0..255)");
    out[i] = static_cast<char>(static_cast<unsigned char>(tokens[i]));
  }
  return out;
}

std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name) {
  if (name == "byte") return std::make_shared<ByteTokenizer>();
  fail_parameter("tokenizer", ": unknown tokenizer '", name, "' (known: byte)");
}

}  // namespace specula
