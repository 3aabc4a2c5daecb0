// A SentencePiece model (tokenizer.model: Llama 1/2, Mistral), through the library itself (Debian's
// libsentencepiece), reached via the specula_sentencepiece module loaded at run time (sentencepiece_shim.h
// says why). Torch-free.
//
// encode(text) is the library's Encode — its normalizer, add_dummy_prefix, byte fallback (<0xXX> pieces for
// characters outside the vocabulary, when the model was trained with it) and user-defined symbols — with
// the BOS / EOS ids added as the checkpoint's tokenizer_config.json asks (add_bos_token, default true as
// in transformers' LlamaTokenizer; add_eos_token, default false). decode(ids) is the library's Decode:
// control pieces (<s>, </s>) decode to nothing, so decode(encode(x)) == x whenever the normalizer keeps x.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "harness/models/tokenizer.h"

namespace specula {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // Throws Error naming the file when the library cannot load it, or when a BOS / EOS is asked for but the
  // model has none.
  SentencePieceTokenizer(const std::string& model_path, bool add_bos, bool add_eos);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return "sentencepiece"; }
  int32_t vocab_size() const override;
  std::vector<Token> encode(const std::string& text) const override;
  std::string decode(const std::vector<Token>& tokens) const override;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace specula
