// Byte-level BPE from a Hugging Face tokenizer.json (GPT-2, Llama 3, Qwen2 style). Torch-free.
//
// encode(text):
//   1. split the text around added tokens (leftmost, longest content match; each becomes its id);
//   2. per remaining segment: the normalizer (none or NFC), then the pre-tokenizer — regex Split steps
//      (behavior "Isolated": matches and the text between them become pieces), Digits, and ByteLevel
//      (its GPT-2 regex when use_regex) — whose patterns are compiled with ICU; `\s`/`\S` are read as
//      Unicode White_Space, as the Oniguruma engine of the tokenizers library does;
//   3. each piece's bytes, mapped to GPT-2's printable byte alphabet (bytes_to_unicode), are merged by
//      rank (Sennrich et al. 2016; the loop of GPT-2's encoder.py: merge the lowest-ranked adjacent pair
//      everywhere, repeat); with ignore_merges a piece already in the vocabulary is one token;
//   4. a symbol missing from the vocabulary falls back to its bytes' <0xXX> tokens (byte_fallback), else to
//      unk_token, else is an error;
//   5. the post-processor's template adds its special tokens (Llama 3's <|begin_of_text|>) around the ids.
// decode(ids) maps every token back to its bytes (added tokens to their content, <0xXX> to the byte) and
// drops the template's tokens where encode puts them (a leading prefix, a trailing suffix), so
// decode(encode(x)) == x for any x the normalizer leaves unchanged — any bytes, even invalid UTF-8.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/models/tokenizer.h"

namespace specula {

class ByteLevelBpeTokenizer : public Tokenizer {
 public:
  // Reads a tokenizer.json; throws Error naming the file and the malformed or unsupported part (a model
  // other than BPE, a pre-tokenizer without ByteLevel — SentencePiece-style BPE needs tokenizer.model —,
  // an unsupported normalizer, pre-tokenizer step or post-processor).
  explicit ByteLevelBpeTokenizer(const std::string& path);
  ByteLevelBpeTokenizer(const nlohmann::json& tokenizer_json, const std::string& where);
  ~ByteLevelBpeTokenizer() override;

  std::string name() const override { return "bpe"; }
  int32_t vocab_size() const override;  // 1 + the largest id of the vocabulary and the added tokens
  std::vector<Token> encode(const std::string& text) const override;
  std::string decode(const std::vector<Token>& tokens) const override;

  const std::vector<Token>& template_prefix() const;  // ids encode puts before the text (e.g. BOS)
  const std::vector<Token>& template_suffix() const;  // ids encode puts after it

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// GPT-2's reversible map from bytes to printable characters (bytes_to_unicode), as UTF-8: byte b -> [b].
const std::vector<std::string>& byte_level_alphabet();

// A tokenizer.json equivalent to Specula's byte tokenizer (token b = byte b, no merges, no special tokens):
// what `specula export` writes next to a byte-level model.
nlohmann::json byte_tokenizer_json();

}  // namespace specula
