// A statistical n-gram language model over token ids with interpolated modified Kneser-Ney smoothing
// (Chen & Goodman 1998, "An empirical study of smoothing techniques for language modeling", §3-4):
//
//   P_n(w | h) = max(c_n(hw) - D_n(c_n(hw)), 0) / c_n(h.) + gamma_n(h) P_{n-1}(w | h')
//   gamma_n(h) = (D_n1 N1(h.) + D_n2 N2(h.) + D_n3+ N3+(h.)) / c_n(h.)
//   P_0(w)     = 1 / V                       (so every token of the vocabulary has q > 0)
//
// h' is h without its oldest token. c_N is the raw count at the highest order; for n < N, c_n(g) is the
// continuation count N1+(. g), the number of distinct tokens seen just before g, where the start of the
// corpus counts as one more left context (the role of <s> in SRILM/KenLM). When c_n(h.) = 0 the level is
// skipped: P_n(w | h) = P_{n-1}(w | h'). Discounts per order come from the count-of-counts n1..n4 of that
// order's counts: Y = n1 / (n1 + 2 n2), D1 = 1 - 2Y n2/n1, D2 = 2 - 3Y n3/n2, D3+ = 3 - 4Y n4/n3. A discount
// that is undefined or outside (0, k) for count k (tiny corpora) falls back to 0.5, 1.0, 1.5 (KenLM's
// --discount_fallback). With D_k < k every level is a proper distribution, so q sums to 1 over all V.
//
// File format (text, one record per line; `specula train-ngram` writes it):
//   specula-ngram 1           magic and format version
//   order N                   1..16
//   vocab V                   token ids are 0..V-1
//   ngrams n C                for n = 1..N: the number of n-gram records of order n
//   <n>-grams                 then, per order, C lines "count t_1 ... t_n" (count >= 1, no duplicates)
//   end
// The counts stored are the ones the model uses (raw at order N, continuation counts below); discounts
// are recomputed on load. Any deviation is an Error naming the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

class NgramModel {
 public:
  struct Discounts {
    double d1 = 0.5, d2 = 1.0, d3 = 1.5;  // for counts 1, 2, >= 3
    bool fallback = false;                // true when the count-of-counts could not define them
    double operator()(int64_t count) const { return count >= 3 ? d3 : count == 2 ? d2 : count == 1 ? d1 : 0.0; }
  };

  // Trains on one token sequence (every id must be in [0, vocab_size)). order in 1..16.
  static NgramModel train(const std::vector<Token>& tokens, int32_t order, int32_t vocab_size);
  // Trains on a token sequence whose every n-gram ends in a label instead of the next token: the n-gram
  // ending at position i is tokens[i - n + 1 .. i - 1] followed by labels[i] (draft/target_labels.h: the
  // target's choice after that context). With labels == tokens this is train(tokens, ...).
  static NgramModel train(const std::vector<Token>& tokens, const std::vector<Token>& labels, int32_t order,
                          int32_t vocab_size);
  static NgramModel load(const std::string& path);
  // The vocabulary of the model at `path`, from its header alone (the file is not read further).
  static int32_t read_vocab_size(const std::string& path);
  void save(const std::string& path) const;

  int32_t order() const { return order_; }
  int32_t vocab_size() const { return vocab_size_; }
  const Discounts& discounts(int32_t n) const { return levels_.at(n - 1).discounts; }
  int64_t num_ngrams(int32_t n) const { return static_cast<int64_t>(levels_.at(n - 1).counts.size()); }
  // The count the model uses for `ngram` at order ngram.size(): raw at the highest order, continuation below.
  int64_t count(const std::vector<Token>& ngram) const;

  // q(. | history) over all V tokens, from the last order - 1 tokens of the history (fewer if it is
  // shorter). out [V] sums to 1.
  void distribution(const Token* history, size_t length, double* out) const;
  std::vector<double> distribution(const std::vector<Token>& history) const;
  double probability(Token w, const std::vector<Token>& history) const;

 private:
  // What one history h of one order knows about its continuations.
  struct Context {
    int64_t total = 0;                            // c_n(h.)
    int64_t n1 = 0, n2 = 0, n3plus = 0;           // N1(h.), N2(h.), N3+(h.)
    std::vector<std::pair<Token, int64_t>> next;  // (w, c_n(hw)) with c_n(hw) > 0
  };
  struct Level {
    std::unordered_map<std::string, int64_t> counts;    // n-gram (packed token ids) -> c_n
    std::unordered_map<std::string, Context> contexts;  // history (n - 1 packed ids) -> continuations
    Discounts discounts;
  };

  NgramModel(int32_t order, int32_t vocab_size);
  void finalize();  // contexts and discounts from counts

  int32_t order_;
  int32_t vocab_size_;
  std::vector<Level> levels_;  // [order]: levels_[n - 1] is order n
};

}  // namespace specula
