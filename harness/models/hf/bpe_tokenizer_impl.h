// ByteLevelBpeTokenizer's state (bpe_tokenizer.h), internal to this folder: bpe_tokenizer_json.cpp fills it
// from a tokenizer.json, bpe_tokenizer.cpp encodes and decodes with it.
#pragma once

#include <unicode/normalizer2.h>
#include <unicode/regex.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "harness/models/hf/bpe_tokenizer.h"

namespace specula {

// A compiled ICU pattern; matchers are made per call (a RegexPattern is immutable and thread-safe, a
// RegexMatcher is neither).
struct SplitStep {
  std::string source;
  std::shared_ptr<icu::RegexPattern> pattern;
};

struct ByteLevelBpeTokenizer::Impl {
  std::string where;
  std::unordered_map<std::string, Token> vocab;
  std::vector<std::string> pieces;  // id -> vocabulary string ("" for ids that only added tokens use)
  std::unordered_map<std::string, int32_t> merge_rank;  // "a b" -> rank
  struct Added {
    std::string content;
    Token id;
  };
  std::vector<Added> added;                      // longest content first
  std::vector<size_t> added_by_first_byte[256];  // indices into `added`, longest first
  std::unordered_map<Token, std::string> added_content;
  const icu::Normalizer2* normalizer = nullptr;  // null: none
  std::vector<SplitStep> splits;
  bool ignore_merges = false;
  bool byte_fallback = false;
  Token unk = -1;
  std::vector<Token> prefix, suffix;
  std::unordered_map<std::string, uint8_t> byte_of;  // alphabet character -> byte
  int32_t vocab_size = 0;

  void parse(const nlohmann::json& j);
  void parse_model(const nlohmann::json& model);
  void parse_added_tokens(const nlohmann::json& added_tokens);
  void parse_normalizer(const nlohmann::json& n);
  void parse_pre_tokenizer(const nlohmann::json& p, bool& byte_level);
  void parse_post_processor(const nlohmann::json& p);
  Token lookup_byte(uint8_t b) const;
  void encode_piece(const std::string& piece, std::vector<Token>& out) const;
  void encode_segment(std::string segment, std::vector<Token>& out) const;
};

}  // namespace specula
