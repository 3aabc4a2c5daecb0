// Regular expressions over bytes, compiled to a Thompson NFA (Thompson 1968; Cox, "Regular Expression
// Matching Can Be Simple And Fast", 2007). The pattern always describes the WHOLE output (full match, as
// in Outlines and llguidance): a leading '^' and a trailing '$' are accepted and mean nothing more.
//
// Syntax (a regular subset of ECMAScript/PCRE):
//   literals, '.', [classes], [^negated], ( ) (?: ), |, * + ? {n} {n,} {n,m} (lazy forms *? +? ?? {..}?
//   describe the same language and are accepted), escapes \d \D \w \W \s \S \n \t \r \f \v \0 \xHH
//   \uHHHH (outside classes) and \ followed by any punctuation.
//   '.' matches one UTF-8 character other than '\n'; a negated class matches one ASCII byte outside the
//   class or one non-ASCII UTF-8 character. Either takes only well-formed UTF-8 (no overlong form, surrogate or
//   code point above U+10FFFF), so a constrained output is valid UTF-8. A non-ASCII literal is one atom (its UTF-8
//   bytes), so `é+` repeats the character. Classes hold ASCII characters and \xHH bytes.
// Not regular, or not supported, and refused with an Error naming the pattern and position:
//   backreferences, lookaround, anchors inside the pattern, \b \B, possessive quantifiers, a quantifier on a
//   quantifier (`a**`, `a{2}{3}`; a lazy `?` is part of the one before it), non-ASCII
//   characters inside classes, counted repetition that expands beyond kMaxNfaStates.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace specula {

struct NfaState {
  std::bitset<256> bytes;  // bytes that move to `on_byte` (none for pure epsilon states)
  int32_t on_byte = -1;
  std::vector<int32_t> epsilon;  // epsilon moves
};

struct Nfa {
  std::vector<NfaState> states;
  int32_t start = 0;
  int32_t accept = 0;  // the one accepting state (no outgoing moves)
};

constexpr int32_t kMaxNfaStates = 200000;

// Throws Error "regex 'PATTERN': position N: ..." on a syntax error or an unsupported feature.
Nfa compile_regex(const std::string& pattern);

// `text` with every regex metacharacter escaped, so the result matches exactly `text`.
std::string regex_escape(const std::string& text);

}  // namespace specula
