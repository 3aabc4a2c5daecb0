// A training corpus: a text file encoded by a tokenizer and split into a training part (the first
// 1 - validation_fraction of the tokens) and a validation part (the rest). A contiguous split, not a random
// one: windows that straddle both parts would leak validation text into training. Torch-free.
#pragma once

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

}  // namespace specula
