// A DFA over bytes, determinised lazily from a Thompson NFA (subset construction on demand, as RE2 and
// Rust's regex-automata "hybrid" DFA do): a DFA state is the set of NFA states reachable after the bytes
// read so far, created the first time some transition reaches it, and its transitions are filled in as
// they are asked for. Only states that can still reach acceptance are kept in a set, so every DFA state
// is live (some continuation completes a match) and "no match possible" is the single dead state kDead.
//
// Bytes the pattern never tells apart share a column of the transition table: the byte classes, as in RE2. Two bytes
// are in one class when every NFA state reading a byte reads both or neither, so they lead from every DFA state to the
// same state. A JSON Schema's pattern tells apart a few dozen bytes, so a state's row is that many entries, not 256:
// the table of a long output's thousands of states stays small, and a constraint's trie walks (a step a node) stay in
// cache.
//
// Not thread-safe: TokenConstraint serialises access.
#pragma once

#include <array>
#include <bitset>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "verify/constraints/regex.h"

namespace specula {

class LazyByteDfa {
 public:
  static constexpr int32_t kDead = -1;

  explicit LazyByteDfa(Nfa nfa);

  int32_t start() const { return start_; }  // 0, or kDead when the language is empty
  // Inline where the transition is known: a constraint steps the DFA once per node of its token trie for each state
  // it builds, hundreds of thousands of times.
  int32_t step(int32_t state, unsigned char byte) {
    if (state < 0) return kDead;
    const int32_t to = next_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
    return to != kUnknown ? to : first_step(state, byte);
  }
  bool accepting(int32_t state) const { return state >= 0 && accepting_[state]; }
  // Can some string of bytes from `alphabet` (of at least one byte, with `nonempty`) lead from `state` to acceptance?
  // Decided on the NFA (the state's NFA states, and which of them reach acceptance through bytes of the alphabet), so
  // it explores no DFA state. What the NFA's states reach is kept for each alphabet asked about.
  bool completes_within(int32_t state, const std::bitset<256>& alphabet, bool nonempty = false);
  int32_t num_states() const { return static_cast<int32_t>(sets_.size()); }
  // The byte classes: bytes of one class step alike from every state.
  int32_t num_classes() const { return num_classes_; }
  int32_t class_of(unsigned char byte) const { return class_of_[byte]; }

 private:
  // The epsilon closure of `seeds`, reduced to the live NFA states that read a byte or accept, then the
  // id of that set (a new DFA state the first time).
  int32_t intern(const std::vector<int32_t>& seeds);
  int32_t first_step(int32_t state, unsigned char byte);  // a transition not yet asked for

  static constexpr int32_t kUnknown = -2;
  Nfa nfa_;
  std::vector<char> live_;  // per NFA state: can reach the accepting state
  std::vector<std::vector<int32_t>> sets_;
  std::array<uint8_t, 256> class_of_{};
  int32_t num_classes_ = 1;
  std::vector<int32_t> next_;  // [states * num_classes_], by state then class
  std::vector<char> accepting_;
  std::map<std::vector<int32_t>, int32_t> ids_;
  int32_t start_ = kDead;
  // intern's visited marks, kept between calls: an NFA state is visited in this call when its mark is the call's
  // number. A fresh vector a call would cost O(NFA states) each time, and a long pattern's NFA has hundreds of
  // thousands of them (a JSON string of maxLength 100 is a hundred copies of a string character's states).
  std::vector<uint32_t> visited_;
  uint32_t visit_ = 0;
  // For completes_within, by alphabet asked about (a caller asks about one or two): per NFA state, does it reach
  // acceptance through bytes of the alphabet?
  std::vector<std::pair<std::bitset<256>, std::vector<char>>> completes_;
};

}  // namespace specula
