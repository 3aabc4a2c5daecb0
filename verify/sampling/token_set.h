// A set of token ids in [0, V), one bit each. A constraint keeps one for every automaton state it builds (the tokens
// allowed there), and a long constrained output meets a new state at almost every token: at V = 128256 a byte a
// token would be 128 KB a state, a bit a token is 16 KB. The words are also what the sampler's mask pass reads.
#pragma once

#include <cassert>
#include <cstdint>
#include <vector>

#include "kernels/shared/error.h"
#include "verify/sampling/sampling_params.h"

namespace specula {

class TokenSet {
 public:
  TokenSet() = default;
  explicit TokenSet(int32_t size) { clear(size); }

  // Empties the set and makes it one of `size` tokens, keeping its memory where it is large enough.
  void clear(int32_t size) {
    if (size < 0) fail("TokenSet: a negative size, ", size);
    size_ = size;
    words_.assign((static_cast<size_t>(size) + 63) / 64, 0);
  }
  int32_t size() const { return size_; }
  // t must be in [0, size()): callers check token ids where they come in (SamplingParams::validate, the constraint's
  // constructor); a bit past size() would break count() and ==, and a mask pass would read past the row.
  bool test(Token t) const {
    assert(t >= 0 && t < size_);
    return (words_[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1u;
  }
  void set(Token t) {
    assert(t >= 0 && t < size_);
    words_[static_cast<size_t>(t) >> 6] |= uint64_t{1} << (t & 63);
  }
  void reset(Token t) {
    assert(t >= 0 && t < size_);
    words_[static_cast<size_t>(t) >> 6] &= ~(uint64_t{1} << (t & 63));
  }
  int32_t count() const {
    int32_t n = 0;
    for (const uint64_t w : words_) n += __builtin_popcountll(w);
    return n;
  }
  // Bit t % 64 of word t / 64 is token t; the bits past size() are 0.
  const std::vector<uint64_t>& words() const { return words_; }
  bool operator==(const TokenSet& other) const { return size_ == other.size_ && words_ == other.words_; }

 private:
  int32_t size_ = 0;
  std::vector<uint64_t> words_;
};

}  // namespace specula
