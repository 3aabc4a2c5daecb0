// A training corpus: a text file encoded by a tokenizer and split into a training part (the first
// 1 - validation_fraction of the tokens) and a validation part (the rest). A contiguous split, not a random
// one: windows that straddle both parts would leak validation text into training. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/models/tokenizer.h"

namespace specula {

struct TextCorpus {
  std::string path;
  std::vector<Token> train;
  std::vector<Token> validation;
};

// Throws Error naming the file when it cannot be read, or when either part is shorter than `min_tokens`
// (a training window needs seq_len + 1 tokens).
TextCorpus load_text_corpus(const std::string& path, const Tokenizer& tokenizer, double validation_fraction,
                            size_t min_tokens);

// Offsets of every non-overlapping window of T + 1 tokens (stride T) in a part of `tokens` tokens.
std::vector<int64_t> window_offsets(int64_t tokens, int64_t T);
// At most `count` of `offsets`, evenly spaced (the same each time, so periodic losses are comparable).
std::vector<int64_t> evenly_spaced(const std::vector<int64_t>& offsets, int64_t count);

}  // namespace specula
