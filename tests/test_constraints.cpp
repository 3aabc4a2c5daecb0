// Constrained decoding (verify/constraints/): the byte automaton against std::regex on every short string,
// the JSON Schema subset, clear errors, and the exact law under speculation: for `ar` and every
// speculative method (chain, block, tree with each sibling scheme, prompt lookup), the joint law of whole
// continuations is G-tested against the target law restricted to the pattern and renormalised at each
// step, computed independently (unconstrained pipeline + std::regex). The mutant that does not advance the
// automaton along draft paths must fail the same test.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "draft/candidate_sampling.h"
#include "draft/constrained_drafter.h"
#include "draft/model_drafter.h"
#include "draft/prompt_lookup_drafter.h"
#include "harness/experiment/experiment_config.h"
#include "harness/generation/beam_search.h"
#include "kernels/shared/error.h"
#include "speculative_fixtures.h"
#include "tests/support/mutant_switch.h"
#include "verify/constraints/byte_dfa.h"
#include "verify/constraints/json_schema.h"
#include "verify/constraints/regex.h"
#include "verify/sampling/bad_word_automaton.h"
#include "verify/sampling/token_constraint.h"
#include "verify/sampling/token_trie.h"
#include "verify/verifiers/target_rows.h"

using namespace specula;
using namespace specula::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;

namespace {

// A token set as a flag a token (1 = in the set), to compare with a literal or print.
std::vector<char> flags(const TokenSet& set) {
  std::vector<char> out(set.size());
  for (Token t = 0; t < set.size(); ++t) out[t] = set.test(t) ? 1 : 0;
  return out;
}

// All strings over `alphabet` of length <= n.
std::vector<std::string> all_strings(const std::string& alphabet, int n) {
  std::vector<std::string> out = {""}, level = {""};
  for (int k = 0; k < n; ++k) {
    std::vector<std::string> next;
    for (const std::string& s : level)
      for (char c : alphabet) next.push_back(s + c);
    out.insert(out.end(), next.begin(), next.end());
    level = std::move(next);
  }
  return out;
}

// Byte tokens: token t is the byte t (as the byte tokenizer of transformer checkpoints).
std::vector<std::string> byte_strings(int32_t V) {
  std::vector<std::string> out;
  for (int32_t t = 0; t < V; ++t) out.push_back(std::string(1, static_cast<char>(t)));
  return out;
}

std::vector<Token> tokens_of(const std::string& text) {
  std::vector<Token> out;
  for (char c : text) out.push_back(static_cast<unsigned char>(c));
  return out;
}

// Reference automaton from std::regex alone: every string over `alphabet` up to `max_length` is matched
// once; a prefix is live when some matched string extends it. (The test patterns complete within a few
// letters, so a prefix up to max_length - 3 long is live exactly when some match within the table extends it.)
class StdRegexOracle {
 public:
  // `min_match`: only matches of at least that many letters make a prefix live.
  StdRegexOracle(const std::string& pattern, const std::string& alphabet, int max_length, size_t min_match = 0)
      : re_(pattern, std::regex::ECMAScript) {
    for (const std::string& s : all_strings(alphabet, max_length)) {
      if (s.size() < min_match || !std::regex_match(s, re_)) continue;
      for (size_t k = 0; k <= s.size(); ++k) live_.insert(s.substr(0, k));
    }
  }
  bool live(const std::string& s) const { return live_.count(s) > 0; }
  bool match(const std::string& s) const { return std::regex_match(s, re_); }

 private:
  std::regex re_;
  std::set<std::string> live_;
};

std::string letters(const std::vector<Token>& tokens) {
  std::string s;
  for (Token t : tokens) s += static_cast<char>('a' + t);
  return s;
}

}  // namespace

TEST_CASE("regex automaton: full match and live prefixes agree with std::regex on every short string",
          "[constraints]") {
  const std::string alphabet = "abcd";
  const std::vector<std::string> patterns = {
      "a*",        "(ab|c[de]|a)*", "a+b?c{2}",      "(a|b){1,3}d",       "[^a]*a",    "a.c",    "^(ab)*$", "(a|)b",
      "[a-c]{2,}", "((a|b)c)+",     "d?(a(b|c)*d)?", "[abc]{0,2}(?:d|a)", "a{2}|b{3}", "\\w\\d?"};
  const int32_t V = 4;
  for (const std::string& pattern : patterns) {
    INFO("pattern " << pattern);
    const auto constraint = TokenConstraint::from_regex(pattern, letter_token_strings(V), {});
    const StdRegexOracle oracle(pattern, alphabet, 8);
    int mismatches = 0;
    for (const std::string& s : all_strings(alphabet, 4)) {
      std::vector<Token> tokens;
      for (char c : s) tokens.push_back(c - 'a');
      const int32_t state = constraint->walk(tokens);
      bool ok = (state != TokenConstraint::kDead) == oracle.live(s);
      if (state != TokenConstraint::kDead) {
        ok = ok && constraint->complete(state) == oracle.match(s);
        bool extends = false;
        for (Token t = 0; t < V; ++t) extends = extends || oracle.live(s + char('a' + t));
        // Ended (no stop token here): a whole match that no letter keeps live; its row has no mask.
        ok = ok && constraint->ended(state) == (oracle.match(s) && !extends);
        // Otherwise the mask allows exactly the letters that keep the string live.
        if (const TokenSet* allowed = constraint->allowed(state))
          for (Token t = 0; t < V; ++t) ok = ok && allowed->test(t) == oracle.live(s + char('a' + t));
        else
          ok = ok && constraint->ended(state);
      }
      if (!ok && ++mismatches <= 3) FAIL_CHECK("string '" << s << "' disagrees with std::regex");
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("regex automaton: multi-byte tokens, UTF-8 characters and stop tokens", "[constraints]") {
  // Tokens of several bytes are walked byte by byte; a token may end in the middle of a pattern atom.
  const std::vector<std::string> strings = {"ab", "a", "b", "ba", "c", "", "é", "x"};
  const auto c = TokenConstraint::from_regex("(ab)+c?é*", strings, {7});
  CHECK(c->walk({0}) != TokenConstraint::kDead);        // "ab"
  CHECK(c->walk({1}) != TokenConstraint::kDead);        // "a": live prefix
  CHECK(c->walk({2}) == TokenConstraint::kDead);        // "b"
  CHECK(c->walk({1, 3}) != TokenConstraint::kDead);     // "a" + "ba": "aba", a live prefix
  CHECK(c->walk({0, 3}) == TokenConstraint::kDead);     // "abba"
  CHECK(c->walk({0, 1, 2}) != TokenConstraint::kDead);  // "abab"
  CHECK(c->complete(c->walk({0, 4, 6, 6})));            // "abcéé"
  CHECK(c->walk({5}) == TokenConstraint::kDead);        // empty token strings are never allowed
  // The stop token is allowed only after a complete match, and then only stop tokens follow.
  CHECK_FALSE(c->allowed(c->walk({1}))->test(7));
  const int32_t after_stop = c->walk({0, 7});
  CHECK(after_stop == TokenConstraint::kStopped);
  const std::vector<char> only_stops = flags(*c->allowed(after_stop));
  CHECK(std::count(only_stops.begin(), only_stops.end(), 1) == 1);
  CHECK(only_stops[7]);
  CHECK(c->text({0, 4, 7, 1}) == "abc");
  // '.' is one UTF-8 character; a negated class admits non-ASCII characters whole.
  const auto bytes = TokenConstraint::from_regex("a.b[^x]", byte_strings(256), {});
  CHECK(bytes->complete(bytes->walk(tokens_of("aébé"))));
  CHECK(
      bytes->complete(bytes->walk(tokens_of("a\xe2\x82\xac"
                                            "b!"))));
  CHECK(bytes->walk(tokens_of("a\nb")) == TokenConstraint::kDead);
  CHECK(bytes->walk(tokens_of("aéé")) == TokenConstraint::kDead);
}

namespace {

// Reference for token-level liveness under masks, from std::regex alone: every string of at most `max_letters`
// letters of `alphabet` that matches is cut into permitted non-stop tokens in every way, leaving out the cuts in which
// a bad word occurs (as a run of tokens, or as the end of the cut and the stop token that ends it, with `ending_stop`);
// a token sequence is live when some such cut extends it, and longest() is the most tokens of such a cut. (Below, every
// pattern but one matches only strings of at most 8 letters, so the table is exact for them; the other's live prefixes
// of up to three tokens have at most 7 letters and complete within 8.)
class TokenSequenceOracle {
 public:
  TokenSequenceOracle(const std::string& pattern, const std::vector<std::string>& strings,
                      const std::vector<char>& permitted, const std::vector<Token>& stops,
                      const std::vector<std::string>& matched, const std::vector<std::vector<Token>>& bad_words = {},
                      std::optional<Token> ending_stop = std::nullopt)
      : re_(pattern, std::regex::ECMAScript), strings_(strings), bad_words_(bad_words) {
    for (const std::string& s : matched) {
      std::vector<Token> cut;
      std::function<void(size_t)> extend = [&](size_t at) {
        if (at == s.size() && !(ending_stop && bans(cut, *ending_stop)))
          for (size_t k = 0; k <= cut.size(); ++k) {
            int& longest = longest_[{cut.begin(), cut.begin() + k}];
            longest = std::max(longest, static_cast<int>(cut.size()));
          }
        for (Token t = 0; t < static_cast<Token>(strings.size()); ++t) {
          if (!permitted[t] || std::count(stops.begin(), stops.end(), t) || strings[t].empty() ||
              s.compare(at, strings[t].size(), strings[t]) != 0 || bans(cut, t))
            continue;
          cut.push_back(t);
          extend(at + strings[t].size());
          cut.pop_back();
        }
      };
      extend(0);
    }
  }
  // The strings over `alphabet` of at most `max_letters` letters that match `pattern`.
  static std::vector<std::string> matches(const std::string& pattern, const std::string& alphabet, int max_letters) {
    const std::regex re(pattern, std::regex::ECMAScript);
    std::vector<std::string> out;
    for (const std::string& s : all_strings(alphabet, max_letters))
      if (std::regex_match(s, re)) out.push_back(s);
    return out;
  }
  bool live(const std::vector<Token>& tokens) const { return longest_.count(tokens) > 0; }
  int longest(const std::vector<Token>& tokens) const {
    const auto it = longest_.find(tokens);
    return it == longest_.end() ? -1 : it->second;
  }
  bool match(const std::vector<Token>& tokens) const { return std::regex_match(spell(tokens), re_); }
  // Does a bad word ban `t` after `tokens`: do they end with all of it but its last token, which is `t`?
  bool bans(const std::vector<Token>& tokens, Token t) const {
    for (const std::vector<Token>& w : bad_words_)
      if (w.back() == t && tokens.size() + 1 >= w.size() &&
          std::equal(w.begin(), w.end() - 1, tokens.end() - static_cast<std::ptrdiff_t>(w.size() - 1)))
        return true;
    return false;
  }

 private:
  std::string spell(const std::vector<Token>& tokens) const {
    std::string s;
    for (Token t : tokens) s += strings_[t];
    return s;
  }
  std::regex re_;
  std::vector<std::string> strings_;
  std::vector<std::vector<Token>> bad_words_;
  std::map<std::vector<Token>, int> longest_;
};

// Disagreements of the automaton with the oracle over every token sequence of up to two tokens, for each pattern,
// mask, stop rule and min_tokens below (with a stop token, a token is allowed only where a cut of at least min_tokens
// tokens goes on); the tokens spell several letters, so a prefix the bytes allow may be one no tokens finish. Some
// masks come with bad words of several tokens, which make some ways of spelling a match, or of ending it, unusable.
// `report`: fail the calling test at the first few disagreements (not under a mutant, whose test counts them).
// `refused`: how many automata were refused where they were built, as the oracle says they must be.
int token_liveness_mismatches(bool report, int* refused = nullptr) {
  const std::vector<std::string> strings = {"a", "b", "c", "ab", "bc", "ca", "abc", "d", "z"};
  const int32_t V = static_cast<int32_t>(strings.size());
  const Token stop = 8;
  // The last has a cycle that banning 'd' makes dead: the search must mark a cycle, not only a path, dead.
  const std::vector<std::string> patterns = {"a(bc|cb)",     "(ab){1,3}c",    "a(b|c)a", "(abc|cab){1,2}d?",
                                             "a{0,3}b(ca)?", "(a|bc)(a|bc)c", "ab?c",    "c(ab){0,3}",
                                             "a(bc)*d|ab"};
  std::vector<SamplerMasks> masks;
  for (const std::vector<Token>& banned :
       std::vector<std::vector<Token>>{{}, {1}, {1, 3}, {2, 6}, {0, 4}, {7}, {2, 7}, {8}, {0, 3, 6}}) {
    std::vector<char> permitted(V, 1);
    for (Token t : banned) permitted[t] = 0;
    masks.push_back({permitted, 0, {}});
  }
  std::vector<char> only_some(V, 0);  // as allowed_tokens = a, bc, c
  for (Token t : {0, 2, 4, 8}) only_some[t] = 1;
  masks.push_back({only_some, 0, {}});
  // Bad words: "a" then "b" (spell "ab" as one token); "ab" then "c" and "a" then "bc" (spell "abc" as one, or as
  // a|b|c); three "a" in a row; "c" or "bc" then the stop (a match ending so cannot stop); words that overlap, which
  // only the automaton's failure links see ("c b" inside "c c b", "b c" inside "b b c").
  for (const std::vector<std::vector<Token>>& words : std::vector<std::vector<std::vector<Token>>>{
           {{0, 1}}, {{3, 2}, {0, 4}}, {{0, 0, 0}}, {{2, 8}, {4, 8}}, {{2, 2, 1, 0}, {2, 1}, {1, 1, 2}, {6, 8}}})
    for (size_t m : {0, 1, 9}) masks.push_back({masks[m].permitted, 0, words});
  int mismatches = 0;
  for (const std::string& pattern : patterns) {
    const std::vector<std::string> matched = TokenSequenceOracle::matches(pattern, "abcd", 8);
    for (const SamplerMasks& mask : masks)
      for (const std::vector<Token>& stops : std::vector<std::vector<Token>>{{}, {stop}})
        for (const int32_t min_tokens : {0, 2, 3}) {
          const std::vector<char>& permitted = mask.permitted;
          // A banned stop token ends nothing: the rule is then that of no stop token, which min_tokens does not touch.
          const bool stopping = !stops.empty() && permitted[stop];
          const int least = stopping ? min_tokens : 0;
          const TokenSequenceOracle oracle(pattern, strings, permitted, stops, matched, mask.bad_words,
                                           stopping ? std::optional<Token>(stop) : std::nullopt);
          std::shared_ptr<const TokenConstraint> c;
          try {
            c = TokenConstraint::from_regex(pattern, strings, stops,
                                            SamplerMasks{permitted, min_tokens, mask.bad_words});
          } catch (const Error& e) {
            const bool begins = oracle.live({});
            if ((!begins && Contains("no token can begin a match").match(e.what())) ||
                (begins && oracle.longest({}) < least && Contains("no match of at least").match(e.what()))) {
              if (refused) ++*refused;
              continue;
            }
            if (report) FAIL_CHECK(pattern << ": " << e.what());
            ++mismatches;
            continue;
          }
          if (oracle.longest({}) < least) {
            if (report) FAIL_CHECK(pattern << ": built, yet no permitted tokens spell a long enough match");
            ++mismatches;
            continue;
          }
          std::vector<std::vector<Token>> sequences = {{}}, level = {{}};
          for (int n = 0; n < 2; ++n) {
            std::vector<std::vector<Token>> next;
            for (const auto& w : level)
              for (Token t = 0; t < V; ++t) {
                if (t == stop) continue;
                next.push_back(w);
                next.back().push_back(t);
              }
            sequences.insert(sequences.end(), next.begin(), next.end());
            level = std::move(next);
          }
          for (const std::vector<Token>& w : sequences) {
            const int32_t state = c->walk(w);
            bool ok = (state != TokenConstraint::kDead) == oracle.live(w);
            if (ok && state != TokenConstraint::kDead) {
              bool extends = false;
              for (Token t = 0; t < V; ++t) {
                std::vector<Token> wt = w;
                wt.push_back(t);
                extends = extends || (t != stop && oracle.live(wt));
              }
              ok = c->complete(state) == oracle.match(w) &&
                   c->ended(state) == (!stopping && oracle.match(w) && !extends);
              TokenSet scratch;
              const TokenSet* allowed = c->allowed(state, static_cast<int32_t>(w.size()), scratch);
              // One token of the mask, asked alone (as the constrained drafter does), is the mask's.
              for (Token t = 0; t < V; ++t)
                ok = ok && c->allows(state, static_cast<int32_t>(w.size()), t) == (!allowed || allowed->test(t));
              if (oracle.longest(w) < least) {
                // No match long enough goes on: a token above was one the target cannot emit, so the row is left
                // open (it is never used).
                ok = ok && allowed == nullptr;
              } else if (allowed) {
                for (Token t = 0; t < V; ++t) {
                  std::vector<Token> wt = w;
                  wt.push_back(t);
                  const bool expected =
                      t == stop ? stopping && oracle.match(w) && !oracle.bans(w, stop) : oracle.longest(wt) >= least;
                  ok = ok && allowed->test(t) == expected;
                }
              } else {
                ok = ok && c->ended(state);
              }
            }
            if (!ok && ++mismatches <= 3 && report) {
              std::ostringstream os;
              for (Token t : w) os << strings[t] << "|";
              // What the automaton says beside what the oracle says, token by token.
              std::ostringstream seen;
              seen << " (state " << state;
              if (state != TokenConstraint::kDead) {
                seen << ", complete " << c->complete(state) << ", ended " << c->ended(state) << ", allowed ";
                TokenSet scratch;
                if (const TokenSet* allowed = c->allowed(state, static_cast<int32_t>(w.size()), scratch))
                  for (char a : flags(*allowed)) seen << static_cast<int>(a);
              }
              seen << "; oracle: live " << oracle.live(w) << ", match " << oracle.match(w) << ", live after ";
              for (Token t = 0; t < V; ++t) {
                std::vector<Token> wt = w;
                wt.push_back(t);
                seen << (oracle.longest(wt) >= least);
              }
              seen << ")";
              FAIL_CHECK(pattern << ", stops " << stops.size() << ", min_tokens " << min_tokens << ", bad words "
                                 << mask.bad_words.size() << ": tokens " << os.str() << " disagree" << seen.str());
            }
          }
        }
  }
  return mismatches;
}

}  // namespace

TEST_CASE("the token trie lists every prefix once, in preorder, with each included token at its string",
          "[constraints]") {
  std::mt19937 rng(76);
  const std::string bytes = {'a', 'b', '\x80', '\xff'};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::string> strings(1 + rng() % 12);
    std::vector<char> included(strings.size());
    for (size_t t = 0; t < strings.size(); ++t) {
      for (size_t k = rng() % 5; k > 0; --k) strings[t] += bytes[rng() % bytes.size()];
      included[t] = rng() % 4 != 0;
    }
    const TokenTrie trie(strings, included);
    std::set<std::string> prefixes = {""};
    std::multiset<Token> expected_tokens;
    int32_t longest = 0;
    for (size_t t = 0; t < strings.size(); ++t) {
      if (!included[t] || strings[t].empty()) continue;
      expected_tokens.insert(static_cast<Token>(t));
      longest = std::max(longest, static_cast<int32_t>(strings[t].size()));
      for (size_t k = 1; k <= strings[t].size(); ++k) prefixes.insert(strings[t].substr(0, k));
    }
    // Each node's string, rebuilt from its depth and byte: preorder is the sorted order of the prefixes.
    std::vector<std::string> node(trie.size());
    std::multiset<Token> tokens;
    for (int32_t i = 1; i < trie.size(); ++i) {
      REQUIRE(trie.depth[i] >= 1);
      REQUIRE(trie.depth[i] <= trie.depth[i - 1] + 1);
      std::string parent = node[i - 1].substr(0, trie.depth[i] - 1);
      node[i] = parent + static_cast<char>(trie.byte[i]);
    }
    CHECK(std::set<std::string>(node.begin(), node.end()) == prefixes);
    CHECK(std::is_sorted(node.begin(), node.end()));
    CHECK(static_cast<size_t>(trie.size()) == prefixes.size());
    CHECK(trie.max_depth == longest);
    for (int32_t i = 0; i < trie.size(); ++i) {
      int32_t end = i + 1;
      while (end < trie.size() && trie.depth[end] > trie.depth[i]) ++end;
      CHECK(trie.end[i] == end);
      for (const Token* t = trie.tokens_begin(i); t != trie.tokens_end(i); ++t) {
        CHECK(strings[*t] == node[i]);
        tokens.insert(*t);
      }
    }
    CHECK(tokens == expected_tokens);
  }
}

TEST_CASE("token-level liveness under masks agrees with every sequence of permitted tokens", "[constraints]") {
  int refused = 0;
  CHECK(token_liveness_mismatches(true, &refused) == 0);
  CHECK(refused > 0);
  // The permitted tokens of a sampler: outside allowed_tokens, banned, one-token bad words, a -inf bias.
  SamplingParams s;
  s.allowed_tokens = {0, 1, 2, 3, 4};
  s.banned_tokens = {1};
  s.bad_words = {{2}, {0, 3}};
  s.logit_bias = {{3, -std::numeric_limits<float>::infinity()}, {4, -50.0f}};
  s.min_tokens = 4;
  CHECK(sampler_masks(s, 6).permitted == std::vector<char>{1, 0, 0, 0, 1, 0});
  CHECK(sampler_masks(s, 6).min_tokens == 4);
  // Where no permitted tokens spell a match, the automaton is refused where it is built.
  CHECK_THROWS_WITH(TokenConstraint::from_regex("ab", letter_token_strings(3), {}, SamplerMasks{{1, 0, 1}}),
                    Contains("regex 'ab': no token can begin a match") && Contains("banned_tokens"));
  // ... and where a stop token may end a match only after more tokens than any match has.
  CHECK_THROWS_WITH(TokenConstraint::from_regex("ab?", letter_token_strings(3), {2}, SamplerMasks{{}, 3}),
                    Contains("regex 'ab?': no match of at least 3 tokens can be spelled (min_tokens 3"));
  CHECK_NOTHROW(TokenConstraint::from_regex("ab?", letter_token_strings(3), {}, SamplerMasks{{}, 3}));
}

TEST_CASE("the single-byte walk gives up where bytes found only inside longer tokens would blow it up",
          "[constraints]") {
  // "yy" finishes a match from every state, but no single byte does; the byte DFA of [ab]*a[ab]{17} has 2^18 states,
  // which a byte walk from the start would determinise in full. The token walk needs a handful. Without bad words the
  // NFA shows at once that single bytes cannot finish a match.
  const std::vector<std::string> strings = {"a", "b", "zz", "yy", "$"};
  for (const int32_t min_tokens : {0, 5}) {
    const auto c = TokenConstraint::from_regex("[ab]*a[ab]{17}zz|[ab]*yy", strings, {4}, SamplerMasks{{}, min_tokens});
    CHECK(c->states_built() < 1024);
    CHECK(c->complete(c->walk({0, 1, 3})));
  }
  // With a bad word "z" "a", single bytes could finish a match ("a", 17 of [ab], "z"), but only through the "z" that
  // begins the word: the NFA's answers settle neither way, and the breadth-first walk over single bytes runs into the
  // 2^18 states until it gives up.
  const std::vector<std::string> with_z = {"a", "b", "z", "yy", "$"};
  for (const int32_t min_tokens : {0, 5}) {
    const auto c =
        TokenConstraint::from_regex("[ab]*a[ab]{17}z|[ab]*yy", with_z, {4}, SamplerMasks{{}, min_tokens, {{2, 0}}});
    CHECK(c->states_built() > (1 << 16));
    CHECK(c->states_built() < (1 << 16) + 1024);
    CHECK(c->complete(c->walk({0, 1, 3})));
    CHECK(c->next_state(c->walk({0}), 3) != TokenConstraint::kDead);
  }
}

TEST_CASE("mutant: byte-level liveness, or min_tokens or bad words unforeseen, fails the token-level liveness test",
          "[constraints][mutant]") {
  for (const Mutant m : {Mutant::constraint_liveness_per_byte, Mutant::constraint_byte_walk_any_byte,
                         Mutant::constraint_ignores_min_tokens, Mutant::constraint_ignores_bad_words}) {
    const ScopedMutant on(m);
    CHECK(token_liveness_mismatches(false) > 0);
  }
}

TEST_CASE("'.' and negated classes accept exactly the well-formed UTF-8 characters", "[constraints]") {
  // The reference: the UTF-8 encodings of every Unicode scalar value from U+0080 (surrogates excluded), written
  // here from the definition of the encoding, packed as (length, bytes) and sorted, with every proper prefix.
  const auto pack = [](const std::vector<unsigned char>& bytes) {
    uint64_t key = bytes.size();
    for (unsigned char b : bytes) key = key << 8 | b;
    return key << 8 * (4 - bytes.size());
  };
  std::vector<uint64_t> whole, prefixes;
  for (uint32_t cp = 0x80; cp <= 0x10ffff; ++cp) {
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    const int n = cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    std::vector<unsigned char> bytes(n);
    uint32_t rest = cp;
    for (int i = n - 1; i > 0; --i, rest >>= 6) bytes[i] = static_cast<unsigned char>(0x80 | (rest & 0x3f));
    bytes[0] = static_cast<unsigned char>((n == 2 ? 0xc0 : n == 3 ? 0xe0 : 0xf0) | rest);
    whole.push_back(pack(bytes));
    for (int k = 1; k < n; ++k) prefixes.push_back(pack({bytes.begin(), bytes.begin() + k}));
  }
  REQUIRE(whole.size() == 0x10ffff - 0x7f - 0x800);
  std::sort(whole.begin(), whole.end());
  std::sort(prefixes.begin(), prefixes.end());
  const auto holds = [](const std::vector<uint64_t>& v, uint64_t key) {
    return std::binary_search(v.begin(), v.end(), key);
  };
  for (const std::string pattern : {".", "[^a]", "[^\\n\"]"}) {
    INFO(pattern);
    LazyByteDfa dfa(compile_regex(pattern));
    int64_t mismatches = 0, accepted = 0;
    std::vector<unsigned char> bytes;
    std::function<void(int32_t)> walk = [&](int32_t state) {
      for (int b = bytes.empty() ? 0x80 : 0; b < 256; ++b) {
        bytes.push_back(static_cast<unsigned char>(b));
        const int32_t next = dfa.step(state, static_cast<unsigned char>(b));
        const bool complete = holds(whole, pack(bytes)), partial = holds(prefixes, pack(bytes));
        mismatches += (next != LazyByteDfa::kDead) != (complete || partial) || dfa.accepting(next) != complete;
        accepted += dfa.accepting(next);
        if (next != LazyByteDfa::kDead && !complete && bytes.size() < 4) walk(next);
        bytes.pop_back();
      }
    };
    walk(dfa.start());
    CHECK(mismatches == 0);
    CHECK(accepted == static_cast<int64_t>(whole.size()));
  }
}

namespace {

// The NFA run by hand (Thompson's simulation, every state of the set stepped per byte): the reference for the byte
// DFA. A set is dead when none of its states can still reach acceptance.
struct NfaSimulation {
  explicit NfaSimulation(const Nfa& nfa) : nfa(nfa), reaches(nfa.states.size(), 0) {
    reaches[nfa.accept] = 1;
    for (bool grew = true; grew;) {
      grew = false;
      for (size_t s = 0; s < nfa.states.size(); ++s) {
        const NfaState& st = nfa.states[s];
        bool r = st.on_byte >= 0 && st.bytes.any() && reaches[st.on_byte];
        for (int32_t t : st.epsilon) r = r || reaches[t];
        if (r && !reaches[s]) reaches[s] = grew = 1;
      }
    }
  }
  std::set<int32_t> closure(std::vector<int32_t> stack) const {
    std::set<int32_t> set(stack.begin(), stack.end());
    while (!stack.empty()) {
      const int32_t s = stack.back();
      stack.pop_back();
      for (int32_t t : nfa.states[s].epsilon)
        if (set.insert(t).second) stack.push_back(t);
    }
    return set;
  }
  std::set<int32_t> step(const std::set<int32_t>& from, unsigned char byte) const {
    std::vector<int32_t> seeds;
    for (int32_t s : from)
      if (nfa.states[s].on_byte >= 0 && nfa.states[s].bytes.test(byte)) seeds.push_back(nfa.states[s].on_byte);
    return closure(seeds);
  }
  bool dead(const std::set<int32_t>& set) const {
    return std::none_of(set.begin(), set.end(), [&](int32_t s) { return reaches[s] != 0; });
  }
  const Nfa& nfa;
  std::vector<char> reaches;
};

}  // namespace

TEST_CASE("byte classes: the byte DFA steps as the NFA does on every byte, with fewer columns than bytes",
          "[constraints]") {
  const std::string schema = R"({"type":"object","properties":{"id":{"type":"integer"},)"
                             R"("name":{"type":"string","maxLength":3}},"required":["id","name"]})";
  const std::vector<std::pair<std::string, Nfa>> patterns = {
      {"a", compile_regex("a")},
      {"[a-c]x|[b-d]y", compile_regex("[a-c]x|[b-d]y")},
      {".", compile_regex(".")},
      {"[^\\n\"]*\"", compile_regex("[^\\n\"]*\"")},
      {"-?\\d+(\\.\\d+)?", compile_regex("-?\\d+(\\.\\d+)?")},
      {"\\xc3[\\x80-\\xbf]|\\w\\s", compile_regex("\\xc3[\\x80-\\xbf]|\\w\\s")},
      {"json schema", compile_json_schema(schema, "inline")},
  };
  // Every string of up to two bytes, and of three over bytes at the edges of the patterns' classes.
  std::vector<std::string> strings = {""};
  for (int a = 0; a < 256; ++a) {
    strings.push_back(std::string(1, static_cast<char>(a)));
    for (int b = 0; b < 256; ++b) strings.push_back({static_cast<char>(a), static_cast<char>(b)});
  }
  const std::string edges = std::string("\0\t\n\"\\-.09:aAbcdxyz{}", 20) + "\x7f\x80\xbf\xc2\xc3\xe0\xff";
  for (char a : edges)
    for (char b : edges)
      for (char c : edges) strings.push_back({a, b, c});
  // The strings after which the DFA and the NFA disagree on whether a match can go on, or is complete.
  const auto mismatches = [&](const Nfa& nfa) {
    LazyByteDfa dfa(nfa);
    const NfaSimulation reference(nfa);
    int64_t count = 0;
    for (const std::string& s : strings) {
      int32_t state = dfa.start();
      std::set<int32_t> set = reference.closure({nfa.start});
      for (char c : s) {
        state = dfa.step(state, static_cast<unsigned char>(c));
        set = reference.step(set, static_cast<unsigned char>(c));
      }
      const bool dead = reference.dead(set);
      count += (state == LazyByteDfa::kDead) != dead || (!dead && dfa.accepting(state) != (set.count(nfa.accept) > 0));
    }
    return count;
  };
  for (const auto& [name, nfa] : patterns) {
    INFO(name);
    CHECK(LazyByteDfa(nfa).num_classes() < 256);
    CHECK(mismatches(nfa) == 0);
  }
  SECTION("mutant: classes that ignore one of the NFA's byte sets step bytes it tells apart alike") {
    // In these two patterns every byte set splits a class the others leave whole.
    const ScopedMutant on(Mutant::dfa_byte_classes_merged);
    for (size_t i = 0; i < 2; ++i) {
      INFO(patterns[i].first);
      CHECK(mismatches(patterns[i].second) > 0);
    }
  }
}

TEST_CASE("regex errors name the pattern, the position and the problem", "[constraints]") {
  struct Case {
    std::string pattern;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"(ab", {"regex '(ab'", "position 0", "missing ')'"}},
      {"ab)", {"position 2", "unmatched ')'"}},
      {"*a", {"position 0", "nothing to repeat"}},
      {"a|+", {"position 2", "nothing to repeat"}},
      {"a{3,1}", {"position 1", "min > max"}},
      {"a{2", {"position 1", "unterminated repetition"}},
      {"[z-a]", {"position 1", "out of order"}},
      {"[abc", {"position 0", "missing ']'"}},
      {"(a)\\1", {"position 3", "backreferences"}},
      {"(?=a)b", {"position 0", "lookaround"}},
      {"a^b", {"position 1", "anchor"}},
      {"[é]", {"position 1", "non-ASCII"}},
      {"a\\", {"position 1", "lone backslash"}},
      {"\\q", {"position 0", "unknown escape"}},
      {"\\bword", {"position 0", "word boundaries"}},
      {"a++", {"position 2", "possessive"}},
      // A quantifier on a quantifier, as ECMAScript and PCRE refuse it; a lazy `?` after one is no quantifier.
      {"a**", {"position 2", "nothing to repeat before '*': a quantifier cannot follow a quantifier"}},
      {"(ab)?+c", {"position 5", "possessive"}},
      {"a*?*", {"position 3", "nothing to repeat before '*'"}},
      {"a{2}{3}", {"position 4", "nothing to repeat before '{'"}},
      {"b?{2}", {"position 2", "nothing to repeat before '{'"}},
      {"(a{1000}){1000}", {"regex '(a{1000}){1000}'", "too large"}},
  };
  for (const Case& c : cases) {
    INFO(c.pattern);
    try {
      compile_regex(c.pattern);
      FAIL("no error for " << c.pattern);
    } catch (const Error& e) {
      for (const std::string& part : c.expected) CHECK_THAT(e.what(), Contains(part));
    }
  }
  for (const char* lazy : {"x+?", "x??", "x{2,}?c", "(x*)*"}) CHECK_NOTHROW(compile_regex(lazy));
  // A constraint whose vocabulary differs from the model's is refused by name.
  SamplingParams s;
  s.constraint = TokenConstraint::from_regex("a*", letter_token_strings(4), {});
  CHECK_THROWS_WITH(s.validate(6), Contains("regex 'a*'") && Contains("4 token strings") && Contains("6 tokens"));
  CHECK_THROWS_WITH(letter_token_strings(200), Contains("token-strings file"));
}

TEST_CASE("JSON schema subset: compact JSON texts that follow the schema, and only those", "[constraints]") {
  const std::string schema = R"({
    "title": "person", "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 4},
      "age": {"type": "integer"},
      "score": {"type": "number"},
      "ok": {"type": "boolean"},
      "kind": {"enum": ["a", "b", 3, null]},
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
      "note": {"type": ["string", "null"]}
    },
    "required": ["name", "ok"]
  })";
  const auto c = TokenConstraint::from_json_schema(schema, "person.json", byte_strings(128), {});
  auto accepts = [&](const std::string& text) { return c->complete(c->walk(tokens_of(text))); };
  CHECK(accepts(R"({"name":"ab","ok":true})"));
  CHECK(accepts(R"({"name":"","age":-12,"ok":false})"));
  CHECK(accepts(R"({"name":"a\"\u00e9","age":0,"score":-1.5e+3,"ok":true,"kind":3,"tags":["x","y"],"note":null})"));
  CHECK(accepts(R"({"name":"abcd","ok":true,"kind":null,"note":"n"})"));
  CHECK_FALSE(accepts(R"({"ok":true})"));                       // name is required
  CHECK_FALSE(accepts(R"({"ok":true,"name":"a"})"));            // schema order
  CHECK_FALSE(accepts(R"({"name":"abcde","ok":true})"));        // maxLength
  CHECK_FALSE(accepts(R"({"name":"a","age":01,"ok":true})"));   // no leading zeros
  CHECK_FALSE(accepts(R"({"name":"a","ok":true,"tags":[]})"));  // minItems
  CHECK_FALSE(accepts(R"({"name":"a","ok":true,"tags":["a","b","c"]})"));
  CHECK_FALSE(accepts(R"({"name":"a","ok":true,"kind":"c"})"));          // enum
  CHECK_FALSE(accepts(R"({"name":"a", "ok":true})"));                    // compact: no whitespace
  CHECK(c->walk(tokens_of(R"({"name":"a)")) != TokenConstraint::kDead);  // a live prefix
  CHECK(c->walk(tokens_of(R"({"nom")")) == TokenConstraint::kDead);

  // Optional properties when `required` is absent, nested objects, const.
  const auto d = TokenConstraint::from_json_schema(
      R"({"type":"object","properties":{"a":{"const":1},"b":{"type":"object","properties":{"c":{"type":"null"}},"required":["c"]}}})",
      "nested", byte_strings(128), {});
  for (const char* ok : {"{}", R"({"a":1})", R"({"b":{"c":null}})", R"({"a":1,"b":{"c":null}})"})
    CHECK(d->complete(d->walk(tokens_of(ok))));
  for (const char* bad : {R"({,"a":1})", R"({"a":2})", R"({"b":{}})"})
    CHECK_FALSE(d->complete(d->walk(tokens_of(bad))));

  // A type's keywords apply to that type's values alone, as JSON Schema reads them: maxLength bounds the strings of a
  // string-or-null, and leaves null alone.
  const auto e = TokenConstraint::from_json_schema(R"({"type":["string","null"],"maxLength":3})", "nullable",
                                                   byte_strings(128), {});
  for (const char* ok : {"null", R"("")", R"("abc")"}) CHECK(e->complete(e->walk(tokens_of(ok))));
  CHECK_FALSE(e->complete(e->walk(tokens_of(R"("abcd")"))));
}

TEST_CASE("JSON schema errors name the schema, the feature and its position", "[constraints]") {
  struct Case {
    std::string schema;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {R"({"type":"object","properties":{"x":{"anyOf":[{"type":"string"}]}}})",
       {"json schema 's.json'", "at /properties/x", "unsupported feature 'anyOf'"}},
      {R"({"type":"integer","minimum":3})", {"at /", "'minimum'"}},
      {R"({"type":"string","pattern":"a+"})", {"'pattern'"}},
      {R"({"$ref":"#/defs/a"})", {"'$ref'"}},
      {R"({"type":"array"})", {"array without 'items'"}},
      {R"({"type":"array","items":{"type":"date"}})", {"at /items/type", "unknown type 'date'"}},
      {R"({"properties":{"a":{"type":"string"}}})", {"without 'type'"}},
      {R"({"type":"object","properties":{"a":{"type":"string"}},"required":["b"]})", {"at /required", "\"b\""}},
      {R"({"type":"string","maxItems":2})", {"at /maxItems", "applies to type array"}},
      {R"({"type":["integer","null"],"maxLength":2})", {"at /maxLength", "applies to type string, not integer"}},
      {R"({"type": "object", )", {"json schema 's.json'", "byte", "not valid JSON"}},
  };
  for (const Case& c : cases) {
    INFO(c.schema);
    try {
      json_schema_to_regex(c.schema, "s.json");
      FAIL("no error");
    } catch (const Error& e) {
      for (const std::string& part : c.expected) CHECK_THAT(e.what(), Contains(part));
    }
  }
}

TEST_CASE("a deeply nested schema is refused where its expression outgrows the automaton, in bounded time",
          "[constraints]") {
  // Each array level writes its items twice: 20 levels would ask for gigabytes of pattern before the regex compiler
  // could refuse its states.
  const auto nested = [](int depth, const std::string& leaf) {
    std::string schema = leaf;
    for (int i = 0; i < depth; ++i) schema = R"({"type":"array","items":)" + schema + "}";
    return schema;
  };
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(json_schema_to_regex(nested(20, R"({"type":"string"})"), "deep.json"),
                    Contains("json schema 'deep.json': at /items/items/") &&
                        Contains("the schema's regular expression passes 3200000 bytes here") &&
                        Contains("nest less deeply"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(2));
  // Wide as well as deep: an object's branches (one for each optional member that may come first) are quadratic in
  // its members, and are bounded as they grow.
  std::string wide = R"({"type":"object","properties":{)";
  for (int i = 0; i < 6000; ++i)
    wide += (i ? "," : "") + std::string("\"p") + std::to_string(i) + R"(":{"type":"null"})";
  const auto wide_start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(json_schema_to_regex(wide + "}}", "wide.json"),
                    Contains("json schema 'wide.json': at /: the schema's regular expression passes 3200000 bytes"));
  CHECK(std::chrono::steady_clock::now() - wide_start < std::chrono::seconds(2));
  // Every array of `schema` given `bounds` (arrays of at most one item: written once, never again under {0,0}).
  const auto at_most_one = [](std::string schema, const std::string& bounds) {
    const std::string array = R"("type":"array")";
    for (size_t at = schema.find(array); at != std::string::npos; at = schema.find(array, at + array.size()))
      schema.insert(at + array.size(), "," + bounds);
    return schema;
  };
  // The bound refuses nothing the regex compiler would take: schema expressions spend at most 16 bytes per NFA
  // state, on shapes that stress each construct (the string class, optional members' branches, counted items, enums).
  const std::vector<std::string> shapes = {
      nested(6, R"({"type":"string"})"),
      nested(4, R"({"type":"string","maxLength":3})"),
      R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},"c":{"type":"boolean"},)"
      R"("d":{"type":["null","number"]}}})",
      R"({"type":"array","items":{"enum":["x","yy",{"k":[1,2]}]},"minItems":2,"maxItems":5})",
      R"({"type":"array","items":{"type":"object","properties":{"s":{"type":"string","minLength":1}}},"maxItems":3})",
      at_most_one(nested(8, R"({"type":"string"})"), R"("maxItems":1)"),
      at_most_one(nested(8, R"({"type":"null"})"), R"("minItems":1,"maxItems":1)"),
  };
  for (const std::string& schema : shapes) {
    INFO(schema);
    const std::string pattern = json_schema_to_regex(schema, "s.json");
    const Nfa nfa = compile_json_schema(schema, "s.json");
    CHECK(pattern.size() <= 16 * nfa.states.size());
  }
}

TEST_CASE("token strings: defaults for table models and the token-strings file", "[constraints]") {
  CHECK(letter_token_strings(3) == std::vector<std::string>{"a", "b", "c"});
  const std::string path = "strings.txt";
  const std::string text = "ab\n\\s\n\\n\\t\\\\\n\\x41\n";
  CHECK(parse_token_strings(text, path, 4) == std::vector<std::string>{"ab", " ", "\n\t\\", "A"});
  CHECK_THROWS_WITH(parse_token_strings(text, path, 5), Contains("4 token strings for a vocabulary of 5"));
  CHECK_THROWS_WITH(parse_token_strings("a\n\\q\n", path, 2), Contains(path + ":2") && Contains("unknown escape"));
  // A CRLF file is named as one (its strings would silently end in '\r'); a token's own CR is written \r.
  CHECK_THROWS_WITH(parse_token_strings("a\r\nb\r\n", path, 2),
                    Contains(path + ":1: the line ends with a carriage return (CRLF line ends?"));
  CHECK(parse_token_strings("a\\r\nb\n", path, 2) == std::vector<std::string>{"a\r", "b"});
}

// ---- Exactness under speculation --------------------------------------------------------------------

namespace {

constexpr int32_t kV = 6;
constexpr int32_t kL = 3;
const std::vector<Token> kPrompt = {2, 5};
// Letters a..f. Completions within two letters, so std::regex liveness with depth 2 is exact.
const char* kPattern = "(ab|c[de]|f)*|e(a|f)*";
const StdRegexOracle& oracle() {
  static const StdRegexOracle o(kPattern, "abcdef", 5);  // outputs have 3 letters; completions need <= 1
  return o;
}

SamplingParams with_penalties() {
  SamplingParams s;
  s.repetition_penalty = 1.3f;
  s.presence_penalty = 0.3f;
  s.temperature = 0.9f;
  return s;
}

// The law of outputs of at most L tokens when, at each step, the unconstrained pipeline's distribution is restricted to
// the tokens `keep(out, x)` accepts and renormalised, computed WITHOUT the constraint code. (Masking logits then
// softmax = restricting and renormalising when the pipeline has no truncation filters.) An output where `ends(out)`
// holds ends there, its cell padded with its last token as sequence_index pads.
std::vector<double> kept_law(const TableModel& model, const SamplingParams& params, const std::vector<Token>& prompt,
                             int32_t L, const std::function<bool(const std::vector<Token>&, Token)>& keep,
                             const std::function<bool(const std::vector<Token>&)>& ends) {
  const SamplerPipeline pipeline(params, model.vocab_size());
  std::vector<double> law(static_cast<size_t>(std::pow(kV, L)), 0.0);
  std::vector<float> probs(kV);
  std::function<void(std::vector<Token>, TokenHistory, double)> walk = [&](std::vector<Token> out, TokenHistory h,
                                                                           double mass) {
    if (static_cast<int32_t>(out.size()) == L || ends(out)) {
      law[sequence_index(out, kV, L)] += mass;
      return;
    }
    std::vector<Token> context = prompt;
    context.insert(context.end(), out.begin(), out.end());
    pipeline.process(model.row_after(context), h, probs.data());
    double z = 0.0;
    std::vector<double> w(kV, 0.0);
    for (Token x = 0; x < kV; ++x)
      if (keep(out, x)) z += w[x] = probs[x];
    for (Token x = 0; x < kV; ++x) {
      if (w[x] == 0.0) continue;
      std::vector<Token> next = out;
      next.push_back(x);
      walk(next, pipeline.advance(h, x, probs.data()), mass * w[x] / z);
    }
  };
  walk({}, TokenHistory{prompt, {}, std::nan("")}, 1.0);
  return law;
}

// The target law restricted to the pattern: zeroed where std::regex (`o`) says the prefix cannot be completed. With
// `ends`, an output that std::regex matches and that no letter keeps live ends there (no stop token: the match's end).
std::vector<double> restricted_law(const TableModel& model, const SamplingParams& params,
                                   const std::vector<Token>& prompt, int32_t L, const StdRegexOracle& o = oracle(),
                                   bool ends = false) {
  const auto keep = [&](const std::vector<Token>& out, Token x) { return o.live(letters(out) + char('a' + x)); };
  return kept_law(model, params, prompt, L, keep, [&](const std::vector<Token>& out) {
    bool extends = false;
    for (Token x = 0; x < kV; ++x) extends = extends || keep(out, x);
    return ends && o.match(letters(out)) && !extends;
  });
}

SamplingParams constrained(SamplingParams s, std::shared_ptr<const TokenConstraint> c) {
  s.constraint = std::move(c);
  return s;
}

GenerationConfig config_of(std::optional<VerifyMethod> m, int32_t k, std::vector<int32_t> tree = {},
                           SiblingScheme scheme = SiblingScheme::iid) {
  GenerationConfig c;
  c.method = m;
  c.num_draft_tokens = k;
  c.tree_shape = std::move(tree);
  c.tree_sampling = scheme;
  c.max_new_tokens = kL;
  c.seed = 424242;
  return c;
}

std::string describe(const GenerationConfig& c, const std::string& drafter) {
  std::ostringstream os;
  os << drafter << " / " << (c.method ? verify_method_name(*c.method) : "ar") << " K=" << c.num_draft_tokens
     << " tree=";
  for (int32_t b : c.tree_shape) os << b << ",";
  os << " scheme=" << sibling_scheme_name(c.tree_sampling);
  return os.str();
}

struct Setup {
  std::string name;
  std::shared_ptr<const DrafterFactory> drafter;  // null = ar
  GenerationConfig config;
};

std::vector<Setup> every_method(const TablePair& pair, const SamplingParams& draft_params) {
  auto model = std::make_shared<ModelDrafterFactory>(pair.draft, draft_params);
  auto lookup = std::make_shared<PromptLookupDrafterFactory>(PromptLookupOptions{2, 1}, kV);
  return {
      {"ar", nullptr, config_of(std::nullopt, 0)},
      {"model", model, config_of(VerifyMethod::chain, 1)},
      {"model", model, config_of(VerifyMethod::chain, 2)},
      {"model", model, config_of(VerifyMethod::chain, 4)},
      {"model", model, config_of(VerifyMethod::block, 2)},
      {"model", model, config_of(VerifyMethod::block, 4)},
      {"model", model, config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::iid)},
      {"model", model, config_of(VerifyMethod::tree, 0, {3, 1}, SiblingScheme::iid)},
      {"model", model, config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::without_replacement)},
      {"model", model, config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::deterministic)},
      {"prompt-lookup", lookup, config_of(VerifyMethod::chain, 3)},
      {"prompt-lookup", lookup, config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::deterministic)},
  };
}

// A prompt with repeats, so prompt lookup finds matches (some of whose continuations leave the pattern).
const std::vector<Token> kLookupPrompt = {0, 1, 2, 3, 0, 1, 5, 0, 2, 5, 4, 2, 5};

}  // namespace

TEST_CASE("the constrained pipeline is the target law restricted to the pattern, step by step", "[constraints]") {
  const TablePair pair = random_pair(2, kV, 61, 1.3, 0.8);
  const auto c = TokenConstraint::from_regex(kPattern, letter_token_strings(kV), {});
  const SamplingParams params = constrained(with_penalties(), c);
  const std::vector<double> reference = restricted_law(*pair.target, with_penalties(), kPrompt, kL);
  const std::vector<double> enumerated = exact_sequence_law(*pair.target, SamplerPipeline(params, kV), kPrompt, kL);
  REQUIRE(reference.size() == enumerated.size());
  for (size_t i = 0; i < reference.size(); ++i) CHECK(enumerated[i] == Approx(reference[i]).margin(2e-6));
  CHECK(SamplerPipeline(params, kV).describe().find("-> constraint") != std::string::npos);
}

TEST_CASE("constrained decoding is exact for ar and every speculative method", "[constraints][exact]") {
  const TablePair pair = random_pair(2, kV, 62, 1.3, 0.9);
  const auto c = TokenConstraint::from_regex(kPattern, letter_token_strings(kV), {});
  const SamplingParams params = constrained(with_penalties(), c);
  for (const std::vector<Token>& prompt : {kPrompt, kLookupPrompt}) {
    const std::vector<double> law = restricted_law(*pair.target, with_penalties(), prompt, kL);
    for (const Setup& s : every_method(pair, params)) {
      if ((prompt == kLookupPrompt) != (s.name == "prompt-lookup") && s.name != "ar") continue;
      INFO(describe(s.config, s.name) << " prompt size " << prompt.size());
      const Generator generator(pair.target, params, s.drafter, s.config);
      const RunResult r = run_generator(generator, prompt, 40000, kV);
      const stats::GofResult gof = stats::g_test(r.counts, law);
      INFO(gof.detail);
      CHECK(gof.passed(stats::kAlpha));
      CHECK(r.metrics.q_zero_errors == 0);
      // Every output is a live prefix of the pattern (fixed length, no stop token: not necessarily complete).
      bool all_live = true;
      for (const SequenceOutput& o : r.outputs) all_live = all_live && oracle().live(letters(o.tokens));
      CHECK(all_live);
    }
  }
}

TEST_CASE("exactness holds when the draft ignores the constraint (illegal drafts are rejected)",
          "[constraints][exact]") {
  const TablePair pair = random_pair(1, kV, 63, 1.3, 0.7);
  const auto c = TokenConstraint::from_regex(kPattern, letter_token_strings(kV), {});
  const SamplingParams target = constrained(with_penalties(), c);
  const std::vector<double> law = restricted_law(*pair.target, with_penalties(), kPrompt, kL);
  auto free_draft = std::make_shared<ModelDrafterFactory>(pair.draft, with_penalties());  // no constraint
  for (const GenerationConfig& config :
       {config_of(VerifyMethod::chain, 3), config_of(VerifyMethod::block, 3),
        config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::without_replacement)}) {
    INFO(describe(config, "unconstrained model draft"));
    const RunResult r = run_generator(Generator(pair.target, target, free_draft, config), kPrompt, 40000, kV);
    const stats::GofResult gof = stats::g_test(r.counts, law);
    INFO(gof.detail);
    CHECK(gof.passed(stats::kAlpha));
  }
}

TEST_CASE("mutant: the constraint state not advanced along draft paths fails the exact-law test",
          "[constraints][mutant]") {
  const TablePair pair = random_pair(2, kV, 64, 1.3, 0.8);
  const auto c = TokenConstraint::from_regex(kPattern, letter_token_strings(kV), {});
  const SamplingParams params = constrained(with_penalties(), c);
  const std::vector<double> law = restricted_law(*pair.target, with_penalties(), kPrompt, kL);
  auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, params);
  for (const GenerationConfig& config :
       {config_of(VerifyMethod::chain, 2),
        config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::without_replacement)}) {
    INFO(describe(config, "model"));
    const Generator generator(pair.target, params, drafter, config);
    {
      const stats::GofResult correct = stats::g_test(run_generator(generator, kPrompt, 40000, kV).counts, law);
      INFO("correct: " << correct.detail);
      REQUIRE(correct.passed(stats::kAlpha));
    }
    const ScopedMutant on(Mutant::constraint_state_not_advanced);
    const stats::GofResult broken = stats::g_test(run_generator(generator, kPrompt, 40000, kV).counts, law);
    INFO("mutant: " << broken.detail);
    CHECK_FALSE(broken.passed(stats::kAlpha));
  }
}

TEST_CASE("row histories carry the automaton state along draft paths and tree branches", "[constraints]") {
  const auto c = TokenConstraint::from_regex(kPattern, letter_token_strings(kV), {});
  const SamplerPipeline pipeline(constrained(SamplingParams{}, c), kV);
  // Tree: a -> b, c(-> d); e. Rows: 0 root, 1 after a, 2 after ab, 3 after c... per node order below.
  TokenTree tree;
  tree.add(0, -1);  // a
  tree.add(1, 0);   // a b
  tree.add(2, -1);  // c
  tree.add(3, 2);   // c d
  tree.add(4, -1);  // e
  std::vector<float> logits(static_cast<size_t>(tree.size() + 1) * kV, 0.0f), probs(logits.size());
  TokenHistory committed;
  process_tree_rows(pipeline, logits.data(), committed, tree, probs.data());
  for (int32_t row = 0; row <= tree.size(); ++row) {
    const TokenHistory h = row_history(pipeline, committed, tree, probs.data(), row);
    const std::vector<Token> path = row == 0 ? std::vector<Token>{} : tree.path(row - 1);
    INFO("row " << row << " path " << letters(path));
    CHECK(h.constraint_state == c->walk(path));
    for (Token x = 0; x < kV; ++x)
      CHECK((probs[static_cast<size_t>(row) * kV + x] > 0.0f) ==
            static_cast<bool>(c->allowed(h.constraint_state)->test(x)));
  }
  // The path history of the drafters' shared helper agrees.
  for (int32_t row = 0; row <= tree.size(); ++row)
    CHECK(path_history(pipeline, committed, tree, row, [&](int32_t r) {
            return probs.data() + static_cast<size_t>(r) * kV;
          }).constraint_state == row_history(pipeline, committed, tree, probs.data(), row).constraint_state);
}

TEST_CASE("constrained drafter: point-mass candidates are cut at the first illegal token, sampled ones never",
          "[constraints]") {
  const auto c = TokenConstraint::from_regex("(ab|c[de]|f)*", letter_token_strings(kV), {});
  // Chain a b c a: "abca" is illegal at the last token.
  TokenTree chain = TokenTree::chain({0, 1, 2, 0});
  chain.scheme = SiblingScheme::deterministic;
  int32_t removed = 0;
  TokenTree cut = cut_illegal_point_masses(chain, *c, TokenConstraint::kInitial, 0, &removed);
  CHECK(cut.tokens == std::vector<Token>{0, 1, 2});
  CHECK(removed == 1);
  // From the state after "a", the chain "b" is legal but "a" is not: nothing proposed.
  cut = cut_illegal_point_masses(TokenTree::chain({0}), *c, c->walk({0}), 1, &removed);
  CHECK(cut.size() == 0);
  // A trie: a(-> b, -> a), b(-> f). Illegal subtrees go; order and parents are kept.
  TokenTree trie;
  trie.scheme = SiblingScheme::deterministic;
  trie.add(0, -1);
  trie.add(1, 0);
  trie.add(0, 0);
  trie.add(1, -1);
  trie.add(5, 3);
  cut = cut_illegal_point_masses(trie, *c, TokenConstraint::kInitial, 0, &removed);
  CHECK(cut.tokens == std::vector<Token>{0, 1});
  CHECK(cut.parent == std::vector<int32_t>{-1, 0});
  CHECK(removed == 3);
  // A sampled chain with a recorded q is left alone even where it is illegal.
  TokenTree sampled = TokenTree::chain({0, 0, 1});
  sampled.draft_q.assign(4, std::vector<float>(kV, 1.0f / kV));
  cut = cut_illegal_point_masses(sampled, *c, TokenConstraint::kInitial, 0, &removed);
  CHECK(cut.tokens == sampled.tokens);
  CHECK(cut.draft_q.size() == 4);
  CHECK(removed == 0);
  // With the stop token 'f' and min_tokens 3 under [ab]{0,2}(c|de): 'c' first would end the match too soon, and so
  // would "ac" or the stop after two tokens; "abc" then the stop is what the target can emit.
  SamplingParams min3;
  min3.stop_tokens = {5};
  min3.min_tokens = 3;
  const auto m = TokenConstraint::from_regex("[ab]{0,2}(c|de)", letter_token_strings(kV), {5}, sampler_masks(min3, kV));
  CHECK(m->min_tokens() == 3);
  const auto point_chain = [](std::vector<Token> tokens) {
    TokenTree t = TokenTree::chain(std::move(tokens));
    t.scheme = SiblingScheme::deterministic;
    return t;
  };
  CHECK(cut_illegal_point_masses(point_chain({2, 5}), *m, TokenConstraint::kInitial, 0, &removed).size() == 0);
  CHECK(cut_illegal_point_masses(point_chain({0, 2}), *m, TokenConstraint::kInitial, 0).tokens ==
        std::vector<Token>{0});
  CHECK(cut_illegal_point_masses(point_chain({0, 1, 2, 5}), *m, TokenConstraint::kInitial, 0).size() == 4);
  // Two tokens into the output ("ab"), 'c' and the stop are what the target can emit; one token in ("a"), 'c' would end
  // the match too soon, but "bc" and the stop would not.
  CHECK(cut_illegal_point_masses(point_chain({2, 5}), *m, m->walk({0, 1}), 2).size() == 2);
  CHECK(cut_illegal_point_masses(point_chain({2, 5}), *m, m->walk({0}), 1).size() == 0);
  CHECK(cut_illegal_point_masses(point_chain({1, 2, 5}), *m, m->walk({0}), 1).size() == 3);
}

TEST_CASE("stop tokens end a complete match; outputs before the stop match the whole pattern", "[constraints]") {
  const TablePair pair = random_pair(1, kV, 65, 1.0, 0.8);
  const std::string pattern = "(a|bc)d?";  // finite: every output must end with the stop token 'f' (5)
  const auto c = TokenConstraint::from_regex(pattern, letter_token_strings(kV), {5});
  SamplingParams params = with_penalties();
  params.stop_tokens = {5};
  params = constrained(params, c);
  const std::regex re(pattern, std::regex::ECMAScript);
  auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, params);
  for (const GenerationConfig& config : {config_of(std::nullopt, 0), config_of(VerifyMethod::chain, 3),
                                         config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::iid)}) {
    GenerationConfig long_config = config;
    long_config.max_new_tokens = 6;
    INFO(describe(long_config, "model"));
    GenerationMetrics m;
    const Generator generator(pair.target, params, config.method ? drafter : nullptr, long_config);
    for (const SequenceOutput& o : generator.generate_many(kPrompt, 0, 2000, m)) {
      const auto stop = std::find(o.tokens.begin(), o.tokens.end(), 5);
      REQUIRE(stop != o.tokens.end());
      CHECK(std::regex_match(letters(std::vector<Token>(o.tokens.begin(), stop)), re));
      CHECK(std::all_of(stop, o.tokens.end(), [](Token t) { return t == 5; }));
    }
  }
}

namespace {

// Without stop tokens: outputs end where the match is complete and cannot continue, after 2 to 4 letters. "c" and
// "ade" are complete but can go on ('f'), so a stop at complete() instead of ended() moves the law.
const char* kEndPattern = "[ab]{0,2}(c|de)f?";
constexpr int32_t kEndL = 4;
const StdRegexOracle& end_oracle() {
  static const StdRegexOracle o(kEndPattern, "abcdef", kEndL + 3);  // a live prefix completes within 2 letters
  return o;
}

// The law of outputs under kEndPattern with no stop token, computed WITHOUT the constraint code (restricted_law).
std::vector<double> ended_law(const TableModel& model, const SamplingParams& params, const std::vector<Token>& prompt) {
  return restricted_law(model, params, prompt, kEndL, end_oracle(), true);
}

GenerationConfig until_end(GenerationConfig c) {
  c.max_new_tokens = kEndL;
  return c;
}

}  // namespace

TEST_CASE("without a stop token, a match that cannot continue ends the sequence: exact for ar and every method",
          "[constraints][exact]") {
  const TablePair pair = random_pair(2, kV, 66, 1.3, 0.9);
  const auto c = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {});
  const SamplingParams params = constrained(with_penalties(), c);
  // The automaton's own view: "acf" has ended; "a", "ad" and the complete "ac" have not; an ended state has no mask.
  CHECK(c->ended(c->walk({0, 2, 5})));
  CHECK_FALSE(c->ended(c->walk({0})));
  CHECK_FALSE(c->ended(c->walk({0, 3})));
  CHECK(c->complete(c->walk({0, 2})));
  CHECK_FALSE(c->ended(c->walk({0, 2})));
  CHECK(c->allowed(c->walk({0, 3, 4, 5})) == nullptr);
  const auto with_stop = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {5});
  CHECK_FALSE(with_stop->ended(with_stop->walk({0, 2, 5})));  // with a stop token, the match ends by emitting it
  // The fixture's enumeration (the Generator's stop rule) and the regex-only law agree.
  const std::vector<double> law = ended_law(*pair.target, with_penalties(), kPrompt);
  const std::vector<double> enumerated = exact_sequence_law(*pair.target, SamplerPipeline(params, kV), kPrompt, kEndL);
  REQUIRE(law.size() == enumerated.size());
  for (size_t i = 0; i < law.size(); ++i) CHECK(enumerated[i] == Approx(law[i]).margin(2e-6));
  for (const std::vector<Token>& prompt : {kPrompt, kLookupPrompt}) {
    const std::vector<double> prompt_law = ended_law(*pair.target, with_penalties(), prompt);
    for (const Setup& s : every_method(pair, params)) {
      if ((prompt == kLookupPrompt) != (s.name == "prompt-lookup") && s.name != "ar") continue;
      INFO(describe(s.config, s.name) << " prompt size " << prompt.size());
      const Generator generator(pair.target, params, s.drafter, until_end(s.config));
      const RunResult r = run_generator(generator, prompt, 30000, kV);
      const stats::GofResult gof = stats::g_test(r.counts, prompt_law);
      INFO(gof.detail);
      CHECK(gof.passed(stats::kAlpha));
      // An output shorter than the limit is a whole match, ended ("stop"); none is cut short of one.
      int64_t ended = 0;
      bool consistent = true;
      for (const SequenceOutput& o : r.outputs) {
        const bool whole = end_oracle().match(letters(o.tokens));
        ended += o.stop_reason == StopReason::stop;
        consistent = consistent && (o.stop_reason == StopReason::stop) == c->ended(c->walk(o.tokens)) &&
                     (o.tokens.size() == static_cast<size_t>(kEndL) || (whole && o.stop_reason == StopReason::stop));
      }
      CHECK(consistent);
      CHECK(ended > 0);
    }
  }
}

TEST_CASE("mutant: a constraint's end checked only after its step fails the ended-match law test",
          "[constraints][mutant]") {
  const TablePair pair = random_pair(2, kV, 67, 1.3, 0.8);
  const auto c = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {});
  const SamplingParams params = constrained(with_penalties(), c);
  const std::vector<double> law = ended_law(*pair.target, with_penalties(), kPrompt);
  auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, params);
  for (const GenerationConfig& config :
       {config_of(VerifyMethod::chain, 3), config_of(VerifyMethod::tree, 0, {2, 2, 1}, SiblingScheme::iid)}) {
    INFO(describe(config, "model"));
    const Generator generator(pair.target, params, drafter, until_end(config));
    {
      const stats::GofResult correct = stats::g_test(run_generator(generator, kPrompt, 30000, kV).counts, law);
      INFO("correct: " << correct.detail);
      REQUIRE(correct.passed(stats::kAlpha));
    }
    const ScopedMutant on(Mutant::stop_checked_per_step);
    const stats::GofResult broken = stats::g_test(run_generator(generator, kPrompt, 30000, kV).counts, law);
    INFO("mutant: " << broken.detail);
    CHECK_FALSE(broken.passed(stats::kAlpha));
  }
}

TEST_CASE("a draft whose own masks ban every token the automaton allows drafts on, and the law stays exact",
          "[constraints][exact]") {
  const TablePair pair = random_pair(2, kV, 70, 1.3, 0.8);
  const auto c = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {});
  const SamplingParams target = constrained(with_penalties(), c);
  SamplingParams draft = target;
  draft.banned_tokens = {2, 3};  // after "aa" or "ab" the pattern allows only 'c' and 'd'
  // Each setting drafts rows two letters deep (a 2,2 tree without replacement would not: its siblings use up 'a' and
  // 'b', so no step starts there).
  const std::vector<double> law = ended_law(*pair.target, with_penalties(), kPrompt);
  for (const GenerationConfig& config :
       {config_of(VerifyMethod::chain, 3), config_of(VerifyMethod::block, 3),
        config_of(VerifyMethod::tree, 0, {2, 2, 1}, SiblingScheme::without_replacement)}) {
    INFO(describe(config, "model, draft masks"));
    draft.constraint_yields_to_masks = false;  // as a target would: the row cannot be drawn
    const Generator failing(pair.target, target, std::make_shared<ModelDrafterFactory>(pair.draft, draft),
                            until_end(config));
    GenerationMetrics m;
    CHECK_THROWS_WITH(failing.generate_many(kPrompt, 0, 200, m), Contains("no token can continue"));
    draft.constraint_yields_to_masks = true;  // as a run's draft: the constraint's mask yields there
    const Generator generator(pair.target, target, std::make_shared<ModelDrafterFactory>(pair.draft, draft),
                              until_end(config));
    const stats::GofResult gof = stats::g_test(run_generator(generator, kPrompt, 30000, kV).counts, law);
    INFO(gof.detail);
    CHECK(gof.passed(stats::kAlpha));
  }
}

TEST_CASE("mutant: a draft's recorded q other than the law it drew fails the draft-masks law test",
          "[constraints][mutant]") {
  const TablePair pair = random_pair(2, kV, 70, 1.3, 0.8);
  const SamplingParams target =
      constrained(with_penalties(), TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {}));
  SamplingParams draft = target;
  draft.banned_tokens = {2, 3};
  draft.constraint_yields_to_masks = true;
  const std::vector<double> law = ended_law(*pair.target, with_penalties(), kPrompt);
  const Generator generator(pair.target, target, std::make_shared<ModelDrafterFactory>(pair.draft, draft),
                            until_end(config_of(VerifyMethod::chain, 3)));
  const ScopedMutant on(Mutant::draft_q_from_raw_logits);
  const stats::GofResult broken = stats::g_test(run_generator(generator, kPrompt, 30000, kV).counts, law);
  INFO("mutant: " << broken.detail);
  CHECK_FALSE(broken.passed(stats::kAlpha));
}

TEST_CASE("a banned token that a match needs is never entered: exact for ar and every method", "[constraints][exact]") {
  // Banning 'e' makes "d" a dead end of kEndPattern: the automaton built with the sampler's permitted tokens never
  // allows 'd', and the law is the target's restricted to what the permitted letters can complete.
  const TablePair pair = random_pair(2, kV, 71, 1.3, 0.9);
  SamplingParams banned = with_penalties();
  banned.banned_tokens = {4};
  const auto c = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {}, sampler_masks(banned, kV));
  CHECK_FALSE(c->allowed(c->walk({0}))->test(3));
  const SamplingParams params = constrained(banned, c);
  static const StdRegexOracle without_e(kEndPattern, "abcdf", kEndL + 3);
  const std::vector<double> law = restricted_law(*pair.target, banned, kPrompt, kEndL, without_e, true);
  for (const Setup& s : every_method(pair, params)) {
    if (s.name == "prompt-lookup") continue;
    INFO(describe(s.config, s.name));
    const Generator generator(pair.target, params, s.drafter, until_end(s.config));
    const stats::GofResult gof = stats::g_test(run_generator(generator, kPrompt, 30000, kV).counts, law);
    INFO(gof.detail);
    CHECK(gof.passed(stats::kAlpha));
  }
  // Byte-level liveness lets a sample into "d", where the run fails.
  const ScopedMutant on(Mutant::constraint_liveness_per_byte);
  const auto per_byte =
      TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {}, sampler_masks(banned, kV));
  const Generator generator(pair.target, constrained(banned, per_byte), nullptr, until_end(config_of(std::nullopt, 0)));
  GenerationMetrics m;
  CHECK_THROWS_WITH(generator.generate_many(kPrompt, 0, 2000, m), Contains("no token can continue"));
}

TEST_CASE("with every stop token banned, a match that cannot continue ends the sequence", "[constraints]") {
  SamplingParams params;
  params.stop_tokens = {5};
  params.banned_tokens = {5};
  const auto c = TokenConstraint::from_regex("[ab]{0,2}c", letter_token_strings(kV), params.stop_tokens,
                                             sampler_masks(params, kV));
  CHECK(c->ended(c->walk({0, 2})));
  CHECK_FALSE(c->ended(c->walk({0})));
  CHECK(c->allowed(c->walk({0, 2})) == nullptr);
  const TablePair pair = random_pair(1, kV, 72, 1.0, 0.8);
  const Generator generator(pair.target, constrained(params, c), nullptr, config_of(std::nullopt, 0));
  GenerationMetrics m;
  for (const SequenceOutput& o : generator.generate_many(kPrompt, 0, 200, m)) {
    INFO(letters(o.tokens));
    CHECK(std::regex_match(letters(o.tokens), std::regex("[ab]{0,2}c")));
    CHECK(o.stop_reason == StopReason::stop);
  }
}

namespace {

// With the stop token 'f' and min_tokens 3: a match of one or two letters cannot be ended, so "c", "ac", "de" and the
// like are never entered. Every output ends with 'f' within kMinL tokens. In kLongPattern every string of 'a' and 'b'
// is a match, so a draft whose own min_tokens is 0 may propose 'f' after one letter, which the target rejects.
const char* kMinPattern = "[ab]{0,2}(c|de)";
const char* kLongPattern = "[ab]+c?";
constexpr int32_t kMinL = 5;

SamplingParams stopping_after_three() {
  SamplingParams s = with_penalties();
  s.stop_tokens = {5};
  s.min_tokens = 3;
  return s;
}

// The law of outputs under `pattern` (every live prefix of which completes within kMinL letters), computed WITHOUT
// the constraint code: the unconstrained pipeline (whose min_tokens mask holds 'f' back), restricted to the letters
// after which std::regex still finds a match of at least 3 letters, and to 'f' where the output matches, renormalised
// at each step.
std::vector<double> min_tokens_law(const std::string& pattern, const TableModel& model,
                                   const std::vector<Token>& prompt) {
  const StdRegexOracle long_matches(pattern, "abcde", kMinL, 3);
  return kept_law(
      model, stopping_after_three(), prompt, kMinL,
      [&](const std::vector<Token>& out, Token x) {
        return x == 5 ? long_matches.match(letters(out)) : long_matches.live(letters(out) + char('a' + x));
      },
      [](const std::vector<Token>& out) { return !out.empty() && out.back() == 5; });
}

}  // namespace

TEST_CASE("with min_tokens and a stop token, a match is never entered that would have to end too soon: exact",
          "[constraints][exact]") {
  const TablePair pair = random_pair(2, kV, 73, 1.3, 0.9);
  const SamplingParams masks = stopping_after_three();
  const auto c = TokenConstraint::from_regex(kMinPattern, letter_token_strings(kV), {5}, sampler_masks(masks, kV));
  TokenSet scratch;
  const std::vector<char> first = flags(*c->allowed(TokenConstraint::kInitial, 0, scratch));
  CHECK(first == std::vector<char>{1, 1, 0, 0, 0, 0});  // 'c' and "de" would end too soon
  // Rows below a token the target cannot emit are left open: after a stop token before min_tokens, or where no match
  // can run long enough (after 'c').
  CHECK(c->allowed(TokenConstraint::kStopped, 2, scratch) == nullptr);
  CHECK(c->allowed(TokenConstraint::kStopped, 3, scratch) != nullptr);
  CHECK(c->allowed(c->walk({2}), 1, scratch) == nullptr);
  const SamplingParams params = constrained(masks, c);
  for (const std::vector<Token>& prompt : {kPrompt, kLookupPrompt}) {
    const std::vector<double> law = min_tokens_law(kMinPattern, *pair.target, prompt);
    for (const Setup& s : every_method(pair, params)) {
      if ((prompt == kLookupPrompt) != (s.name == "prompt-lookup")) continue;  // lookup drafts "ac", cut by the mask
      GenerationConfig config = s.config;
      config.max_new_tokens = kMinL;
      INFO(describe(config, s.name) << " prompt size " << prompt.size());
      const Generator generator(pair.target, params, s.drafter, config);
      const stats::GofResult gof = stats::g_test(run_generator(generator, prompt, 30000, kV).counts, law);
      INFO(gof.detail);
      CHECK(gof.passed(stats::kAlpha));
    }
  }
  // A draft whose own min_tokens is 0 proposes 'f' early under kLongPattern; the target's row after it is left open.
  const auto long_c =
      TokenConstraint::from_regex(kLongPattern, letter_token_strings(kV), {5}, sampler_masks(masks, kV));
  const SamplingParams long_params = constrained(masks, long_c);
  SamplingParams draft = long_params;
  draft.min_tokens = 0;
  draft.constraint_yields_to_masks = true;
  const auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, draft);
  const std::vector<double> long_law = min_tokens_law(kLongPattern, *pair.target, kPrompt);
  for (GenerationConfig config :
       {config_of(VerifyMethod::chain, 3), config_of(VerifyMethod::tree, 0, {2, 2}, SiblingScheme::iid)}) {
    config.max_new_tokens = kMinL;
    INFO(describe(config, "model, draft min_tokens 0"));
    const Generator generator(pair.target, long_params, drafter, config);
    const RunResult r = run_generator(generator, kPrompt, 30000, kV);
    const stats::GofResult gof = stats::g_test(r.counts, long_law);
    INFO(gof.detail);
    CHECK(gof.passed(stats::kAlpha));
  }
  // Unforeseen, min_tokens lets a sample into "c", where it can neither stop nor go on.
  const ScopedMutant on(Mutant::constraint_ignores_min_tokens);
  GenerationConfig config = config_of(std::nullopt, 0);
  config.max_new_tokens = kMinL;
  const Generator generator(pair.target, params, nullptr, config);
  GenerationMetrics m;
  CHECK_THROWS_WITH(generator.generate_many(kPrompt, 0, 2000, m), Contains("no token can continue"));
}

TEST_CASE("bad words of several tokens: an output they leave no way to finish is never entered: exact for every method",
          "[constraints][exact]") {
  // Under kEndPattern, the bad words "abc" and "bde" leave "ab" no way on ('c' is banned after it, and 'e' after
  // "abd"), while "bb" goes on to "bbc". The law is the target's restricted to the matches in which neither word
  // occurs.
  const TablePair pair = random_pair(2, kV, 74, 1.3, 0.9);
  SamplingParams words = with_penalties();
  words.bad_words = {{0, 1, 2}, {1, 3, 4}};
  const auto c = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {}, sampler_masks(words, kV));
  CHECK_FALSE(c->allowed(c->walk({0}))->test(1));
  CHECK(c->allowed(c->walk({1}))->test(1));
  CHECK(c->allowed(c->walk({1, 1})) != nullptr);
  CHECK(c->allowed(c->walk({1, 1}))->count() == 1);  // 'c' alone
  const SamplingParams params = constrained(words, c);
  static const StdRegexOracle without_words(std::string("(?!.*(abc|bde))(") + kEndPattern + ")", "abcdef", kEndL + 3);
  REQUIRE_FALSE(without_words.live("ab"));
  REQUIRE(without_words.live("bb"));
  for (const std::vector<Token>& prompt : {kPrompt, kLookupPrompt}) {
    const std::vector<double> law = restricted_law(*pair.target, words, prompt, kEndL, without_words, true);
    for (const Setup& s : every_method(pair, params)) {
      if ((prompt == kLookupPrompt) != (s.name == "prompt-lookup") && s.name != "ar") continue;
      INFO(describe(s.config, s.name) << " prompt size " << prompt.size());
      const Generator generator(pair.target, params, s.drafter, until_end(s.config));
      const stats::GofResult gof = stats::g_test(run_generator(generator, prompt, 30000, kV).counts, law);
      INFO(gof.detail);
      CHECK(gof.passed(stats::kAlpha));
    }
  }
  // Unforeseen, the bad words let a sample into "ab" or "bd", where no token can continue it.
  const ScopedMutant on(Mutant::constraint_ignores_bad_words);
  const auto blind = TokenConstraint::from_regex(kEndPattern, letter_token_strings(kV), {}, sampler_masks(words, kV));
  const Generator generator(pair.target, constrained(words, blind), nullptr, until_end(config_of(std::nullopt, 0)));
  GenerationMetrics m;
  CHECK_THROWS_WITH(generator.generate_many(kPrompt, 0, 2000, m), Contains("no token can continue the output"));
}

TEST_CASE("bad words: the automaton's states against every output, and the row after a stop token left open",
          "[constraints]") {
  // BadWordAutomaton against the sampler's rule, read off the output directly, for random words and outputs.
  // Over two or three tokens, words overlap often, so outputs run through failure links of every depth.
  std::mt19937 rng(75);
  for (int trial = 0; trial < 2000; ++trial) {
    const Token tokens = 2 + static_cast<Token>(trial % 2);
    std::vector<std::vector<Token>> words(1 + rng() % 5);
    for (auto& w : words) {
      w.resize(1 + rng() % 5);
      for (Token& t : w) t = static_cast<Token>(rng() % tokens);
    }
    const BadWordAutomaton automaton(words);
    int32_t state = BadWordAutomaton::kRoot;
    std::vector<Token> output;
    for (int n = 0; n < 16; ++n) {
      std::set<Token> expected;
      for (const auto& w : words)
        if (w.size() > 1 && output.size() + 1 >= w.size() &&
            std::equal(w.begin(), w.end() - 1, output.end() - static_cast<std::ptrdiff_t>(w.size() - 1)))
          expected.insert(w.back());
      REQUIRE(std::vector<Token>(expected.begin(), expected.end()) == automaton.banned(state));
      const Token t = static_cast<Token>(rng() % tokens);
      output.push_back(t);
      state = automaton.step(state, t);
    }
  }
  // A bad word may ban a match's end: "c" then the stop token. Under [ab]{0,2}c every match ends with 'c', so none can
  // be ended and the automaton is refused where it is built; under [ab]{0,2}(c|d), 'c' is never entered.
  SamplingParams stop_after_c;
  stop_after_c.stop_tokens = {5};
  stop_after_c.bad_words = {{2, 5}};
  CHECK_THROWS_WITH(
      TokenConstraint::from_regex("[ab]{0,2}c", letter_token_strings(kV), {5}, sampler_masks(stop_after_c, kV)),
      Contains("no token can begin a match"));
  const auto ends_d =
      TokenConstraint::from_regex("[ab]{0,2}(c|d)", letter_token_strings(kV), {5}, sampler_masks(stop_after_c, kV));
  CHECK_FALSE(ends_d->allowed(TokenConstraint::kInitial)->test(2));
  CHECK(ends_d->allowed(TokenConstraint::kInitial)->test(3));
  // With two stop tokens, a bad word that bans one leaves the other to end the match; banning both leaves none.
  const auto two_stops = TokenConstraint::from_regex("a", {"a", "z", "z"}, {1, 2}, SamplerMasks{{}, 0, {{0, 1}}});
  CHECK(flags(*two_stops->allowed(two_stops->walk({0}))) == std::vector<char>{0, 0, 1});
  CHECK_THROWS_WITH(TokenConstraint::from_regex("a", {"a", "z", "z"}, {1, 2}, SamplerMasks{{}, 0, {{0, 1}, {0, 2}}}),
                    Contains("no token can begin a match"));
  // A word of one token given to the automaton directly bans that token, as sampler_masks would.
  CHECK_THROWS_WITH(TokenConstraint::from_regex("a", {"a", "z"}, {}, SamplerMasks{{}, 0, {{0}}}),
                    Contains("no token can begin a match"));
  // A bad word of two stop tokens bans the stop after a stop: the row after it, past the sequence's end, is left open
  // rather than failing the run.
  SamplingParams stop_stop = stop_after_c;
  stop_stop.bad_words = {{5, 5}};
  const SamplingParams params = constrained(
      stop_stop,
      TokenConstraint::from_regex("[ab]{0,2}c", letter_token_strings(kV), {5}, sampler_masks(stop_stop, kV)));
  const SamplerPipeline pipeline(params, kV);
  TokenHistory h{kPrompt, {}, std::nan("")};
  for (Token t : {0, 2, 5}) h = pipeline.advance(h, t, nullptr);
  REQUIRE(h.constraint_state == TokenConstraint::kStopped);
  std::vector<float> logits(kV, 0.0f), probs(kV);
  CHECK_NOTHROW(pipeline.process(logits.data(), h, probs.data()));
}

TEST_CASE("a match no token can continue because the model's own logits are -inf is an error naming the output",
          "[constraints]") {
  // Order 1 over kV tokens: after 'a', the model gives 'b' no mass; "ab" is the only match.
  std::vector<float> logits(kV * kV, 0.0f);
  logits[0 * kV + 1] = -std::numeric_limits<float>::infinity();
  const auto model = std::make_shared<TableModel>(1, kV, logits, "no b after a");
  const SamplingParams params =
      constrained(SamplingParams{}, TokenConstraint::from_regex("ab", letter_token_strings(kV), {}));
  const Generator generator(model, params, nullptr, config_of(std::nullopt, 0));
  GenerationMetrics m;
  CHECK_THROWS_WITH(generator.generate(kPrompt, 0, m),
                    Contains("regex 'ab': no token can continue the output 'a'") && Contains("the model's own -inf"));
}

TEST_CASE("a pattern that matches only the empty output ends before any token; beams end at a match's end",
          "[constraints]") {
  const TablePair pair = random_pair(1, kV, 68, 1.0, 0.8);
  const auto empty_only = TokenConstraint::from_regex("()", letter_token_strings(kV), {});
  REQUIRE(empty_only->ended(TokenConstraint::kInitial));
  const auto drafter = std::make_shared<ModelDrafterFactory>(pair.draft, constrained(SamplingParams{}, empty_only));
  for (const GenerationConfig& config : {config_of(std::nullopt, 0), config_of(VerifyMethod::chain, 2)}) {
    const Generator generator(pair.target, constrained(SamplingParams{}, empty_only), config.method ? drafter : nullptr,
                              config);
    GenerationMetrics m;
    const SequenceOutput o = generator.generate(kPrompt, 0, m);
    CHECK(o.tokens.empty());
    CHECK(o.stop_reason == StopReason::stop);
  }
  BeamSearchConfig beam;
  beam.beam_width = 3;
  beam.max_new_tokens = 6;
  GenerationMetrics m;
  const BeamSearchOutput none =
      BeamSearch(pair.target, constrained(SamplingParams{}, empty_only), beam).search(kPrompt, m);
  REQUIRE(none.nbest.size() == 1);
  CHECK(none.nbest[0].tokens.empty());
  CHECK(none.nbest[0].stopped);
  // "a(b|cd)e?": every hypothesis ends at "abe" or "acde" (not at the complete "ab"), before the length limit.
  const auto finite = TokenConstraint::from_regex("a(b|cd)e?", letter_token_strings(kV), {});
  const BeamSearchOutput out = BeamSearch(pair.target, constrained(SamplingParams{}, finite), beam).search(kPrompt, m);
  REQUIRE_FALSE(out.nbest.empty());
  for (const BeamHypothesis& h : out.nbest) {
    INFO(letters(h.tokens));
    CHECK((letters(h.tokens) == "abe" || letters(h.tokens) == "acde"));
    CHECK(h.stopped);
  }
}

TEST_CASE("JSON schema constrained sampling on a byte-level model always yields valid JSON", "[constraints]") {
  constexpr int32_t V = 128;  // ASCII bytes; token 0 (NUL) is the stop token
  std::vector<float> logits(static_cast<size_t>(V) * V);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(philox_gaussian(66, i));
  auto target = std::make_shared<TableModel>(1, V, logits, "bytes");
  std::vector<float> noisy(logits);
  for (size_t i = 0; i < noisy.size(); ++i) noisy[i] += static_cast<float>(0.5 * philox_gaussian(67, i));
  auto draft = std::make_shared<TableModel>(1, V, noisy, "bytes-draft");
  const std::string schema =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":3},"ok":{"type":"boolean"},)"
      R"("tags":{"type":"array","items":{"enum":["x","yz"]},"maxItems":2}},"required":["name","ok"]})";
  SamplingParams params;
  params.stop_tokens = {0};
  params.constraint = TokenConstraint::from_json_schema(schema, "inline", byte_strings(V), {0});
  for (const GenerationConfig& base : {config_of(std::nullopt, 0), config_of(VerifyMethod::chain, 4)}) {
    GenerationConfig config = base;
    config.max_new_tokens = 80;  // longer than any valid text: every output completes and stops
    const Generator generator(target, params,
                              config.method ? std::make_shared<ModelDrafterFactory>(draft, params) : nullptr, config);
    GenerationMetrics m;
    for (const SequenceOutput& o : generator.generate_many({'{'}, 0, 300, m)) {
      const std::string text = params.constraint->text(o.tokens);
      INFO(text);
      REQUIRE(std::find(o.tokens.begin(), o.tokens.end(), 0) != o.tokens.end());
      const nlohmann::json j = nlohmann::json::parse(text);
      CHECK(j.at("name").is_string());
      CHECK(j.at("ok").is_boolean());
      if (j.contains("tags")) CHECK(j["tags"].size() <= 2);
    }
  }
}

TEST_CASE("experiment files: [sampling] regex / json_schema sweeps and the [beam] section", "[constraints][runner]") {
  const std::string dir = "/tmp/specula-constraints-ini-test";
  std::filesystem::create_directories(dir);
  const std::string schema = dir + "/s.json";
  std::ofstream(schema) << R"({"type":"boolean"})";
  auto write = [&](const std::string& sampling) {
    const std::string path = dir + "/e.ini";
    std::ofstream(path) << "[experiment]\ntarget = bigram:t.txt\nprompts = p.txt\n[draft]\ndrafter = prompt-lookup\n"
                           "method = chain, beam\n[beam]\nwidth = 3\nlength_penalty = 0.5\n[sampling]\n"
                        << sampling << "\n";
    return path;
  };
  const ExperimentConfig c =
      load_experiment(write("regex = none | (ab|c)+ | a{1,2}\njson_schema = none | " + schema), {});
  CHECK(c.axes.at("sampling.regex") == std::vector<std::string>{"none", "(ab|c)+", "a{1,2}"});
  CHECK(c.axes.at("sampling.json_schema") == std::vector<std::string>{"none", schema});
  CHECK(c.beam.at("width") == "3");
  CHECK_THAT(c.resolved_ini(),
             Contains("regex = none | (ab|c)+ | a{1,2}") && Contains("[beam]") && Contains("length_penalty = 0.5"));
  // Errors name the file, the line and the key, and the pattern's own position.
  CHECK_THROWS_WITH(load_experiment(write("regex = (ab"), {}), Contains("e.ini:11") && Contains("sampling.regex") &&
                                                                   Contains("regex '(ab'") && Contains("position 0"));
  // A file's errors name its path once, after the key.
  CHECK_THROWS_WITH(load_experiment(write("json_schema = " + dir + "/missing.json"), {}),
                    Equals(dir + "/e.ini:11: key 'sampling.json_schema': cannot open '" + dir + "/missing.json'"));
  CHECK_THROWS_WITH(load_experiment(write("json_schema = " + dir), {}),
                    Equals(dir + "/e.ini:11: key 'sampling.json_schema': '" + dir + "' is a folder, not a file"));
  CHECK_THROWS_WITH(load_experiment(write("token_strings = " + dir), {}),
                    Equals(dir + "/e.ini:11: key 'sampling.token_strings': '" + dir + "' is a folder, not a file"));
  std::ofstream(schema) << R"({"type":"integer","minimum":0})";
  CHECK_THROWS_WITH(
      load_experiment(write("json_schema = " + schema), {}),
      StartsWith(dir + "/e.ini:11: key 'sampling.json_schema': json schema '" + schema + "'") && Contains("'minimum'"));
  CHECK_THROWS_WITH(load_experiment(write("temperature = 1\n[beam]\nwidht = 2"), {}),
                    Contains("unknown key 'beam.widht'"));
  std::filesystem::remove_all(dir);
}
