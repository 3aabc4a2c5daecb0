#include "harness/models/transformer/byte_tokenizer.h"

#include "harness/models/hf/hf_tokenizer.h"
#include "harness/models/transformer/transformer_config.h"
#include "verify/error.h"

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

std::shared_ptr<const Tokenizer> make_tokenizer(const std::string& name, const std::string& where) {
  if (name == "byte") return std::make_shared<ByteTokenizer>();
  fail(where, ": unknown tokenizer '", name, "' (known: byte)");
}

std::shared_ptr<const Tokenizer> load_tokenizer_for(const std::string& model_spec) {
  const size_t colon = model_spec.find(':');
  if (colon != std::string::npos && model_spec.substr(0, colon) == "hf")
    return load_hf_tokenizer(model_spec.substr(colon + 1));
  if (colon == std::string::npos || model_spec.substr(0, colon) != "transformer") return nullptr;
  const std::string dir = model_spec.substr(colon + 1);
  return make_tokenizer(read_checkpoint_config(dir).tokenizer, dir + "/" + kCheckpointConfigFile);
}

}  // namespace specula
