#include "harness/train/text_corpus.h"

#include <algorithm>

#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {

TextCorpus load_text_corpus(const std::string& path, const Tokenizer& tokenizer, double validation_fraction,
                            size_t min_tokens) {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0))
    fail_parameter("validation_fraction", " must be in (0, 1), got ", validation_fraction);
  const std::vector<Token> tokens = tokenizer.encode(read_parameter_file(path, "corpus"));
  const size_t n_val = static_cast<size_t>(static_cast<double>(tokens.size()) * validation_fraction);
  TextCorpus corpus;
  corpus.path = path;
  corpus.train.assign(tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(n_val));
  corpus.validation.assign(tokens.end() - static_cast<std::ptrdiff_t>(n_val), tokens.end());
  if (corpus.train.size() < min_tokens || corpus.validation.size() < min_tokens)
    fail_parameter("corpus", " '", path, "': ", tokens.size(), " tokens split into ", corpus.train.size(),
                   " training and ", corpus.validation.size(), " validation tokens; each part needs at least ",
                   min_tokens, " (seq_len + 1)");
  return corpus;
}

std::vector<int64_t> window_offsets(int64_t tokens, int64_t T) {
  std::vector<int64_t> offsets;
  for (int64_t off = 0; off + T + 1 <= tokens; off += T) offsets.push_back(off);
  return offsets;
}

std::vector<int64_t> evenly_spaced(const std::vector<int64_t>& offsets, int64_t count) {
  const int64_t all = static_cast<int64_t>(offsets.size());
  const int64_t n = std::min<int64_t>(count, all);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(offsets[static_cast<size_t>(i * all / n)]);
  return out;
}

}  // namespace specula
