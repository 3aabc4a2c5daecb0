// Constrained decoding: a token-level automaton over the model's vocabulary, built from a regular
// expression (or a JSON Schema compiled to one, verify/constraints/json_schema.h), in the manner of
// Outlines (Willard & Louf 2023): the byte DFA of the pattern (lazily determinised) is walked through each
// token's string (a trie of them, TokenTrie), so each automaton state has an allowed-token mask (a token is allowed
// iff its bytes lead to a state from which the pattern can still be completed with tokens). Masks are computed once
// per state and cached, a bit a token (TokenSet); a token's next state is found again when asked for (its bytes
// stepped through the DFA), not stored V-wide per state.
//
// Liveness is taken at the level of tokens, under the sampler's other masks (SamplerMasks): a token is allowed
// only when a match can still be completed from where it leads with tokens the sampler can emit. A test on bytes
// alone would let an output enter a prefix that the token strings cannot finish, or that only banned tokens could
// finish, and the run would fail in the middle. A state's liveness is a least fixpoint (can a state be reached where
// a match can end?), found by a breadth-first search and remembered. The search first asks whether single-byte tokens
// alone can finish a match: where the vocabulary spells every byte the pattern needs, that settles it without a pass
// over the whole vocabulary for each state on the way. Without bad words of several tokens the pattern's NFA answers
// that at once (LazyByteDfa::completes_within); with them, it answers for the bytes in no bad word, and otherwise a
// breadth-first walk of single-byte tokens does (giving up past kByteWalkStates DFA states, where bytes found only
// inside longer tokens make it blow up). Only where single bytes cannot does it walk tokens of any length. With a
// stop token the sampler can emit and min_tokens, a match may end only once the output has min_tokens tokens: a
// token is then allowed only where a path of the tokens still needed leads on (the longest path from each state,
// capped at min_tokens, is found by a depth-first search and remembered; a cycle makes it unbounded). Bad words of
// several tokens ban a token after some outputs only: the automaton then runs beside the pattern's DFA the bad words'
// own (BadWordAutomaton), and its states are the pairs met, so that a token a bad word bans is not allowed, no path
// through one counts towards liveness, and a match whose every stop token a bad word bans cannot end there.
//
// The automaton state is part of the row's history (TokenHistory::constraint_state), advanced by
// SamplerPipeline::advance with every emitted token, exactly like the penalties' counts: draft rows, tree
// paths and the bonus row all see the state after their own path (verify/ALGORITHMS.md §2, "Grammar or FSM").
//
// Stop tokens end a match: they are allowed only in states where the output so far is a complete match,
// and lead to kStopped, where only stop tokens are allowed (a fixed-length output is padded with them).
// Their strings are never walked. A stop token the sampler never emits (banned) ends nothing: with every stop
// token banned, the constraint behaves as one without stop tokens (and min_tokens, which bans only stop tokens, does
// not bear on it). Without stop tokens, a complete match that no token can continue (the state is `ended`) ends the
// sequence itself, as a stop token would (verify/ALGORITHMS.md §9): the generator and beam search stop there. A row
// whose path already left the language (kDead: an illegal draft token, which the verifier always rejects since
// p(token) = 0) or ended never emits a kept token (what a verifier draws there is cut with the sequence's end), so
// its mask is left open rather than empty.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "verify/constraints/byte_dfa.h"
#include "verify/sampling/bad_word_automaton.h"
#include "verify/sampling/logits_processors.h"
#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_set.h"
#include "verify/sampling/token_trie.h"

namespace specula {

// What the target sampler's other settings let through, as far as a constraint can foresee it (sampler_masks).
struct SamplerMasks {
  std::vector<char> permitted;  // [V], or empty for every token: can the sampler ever emit the token?
  int32_t min_tokens = 0;       // stop tokens are banned until the output has this many tokens
  std::vector<std::vector<Token>> bad_words = {};  // of several tokens: the last is banned after the rest
};

class TokenConstraint {
 public:
  static constexpr int32_t kInitial = 0;
  static constexpr int32_t kDead = -1;
  static constexpr int32_t kStopped = -2;

  // `description` names the constraint in errors (e.g. "regex 'a+b'"). token_strings[t] is token t's text
  // (bytes); an empty string is never allowed. `masks`: what the sampler's other settings let through. Throws Error
  // when the pattern matches no string at all, or when no match can be spelled with the permitted tokens (and the
  // empty output is not one), or none of at least min_tokens tokens where that binds.
  TokenConstraint(std::string description, const Nfa& nfa, std::vector<std::string> token_strings,
                  std::vector<Token> stop_tokens, SamplerMasks masks = {});

  // Throws Error naming the pattern (or schema) and the position of a syntax error or unsupported feature.
  static std::shared_ptr<const TokenConstraint> from_regex(const std::string& pattern,
                                                           std::vector<std::string> token_strings,
                                                           std::vector<Token> stop_tokens, SamplerMasks masks = {});
  // `source` names the schema in errors (a file name).
  static std::shared_ptr<const TokenConstraint> from_json_schema(const std::string& schema_json,
                                                                 const std::string& source,
                                                                 std::vector<std::string> token_strings,
                                                                 std::vector<Token> stop_tokens,
                                                                 SamplerMasks masks = {});

  const std::string& description() const { return description_; }
  int32_t vocab_size() const { return static_cast<int32_t>(token_strings_.size()); }
  const std::vector<std::string>& token_strings() const { return token_strings_; }
  const std::vector<Token>& stop_tokens() const { return stop_tokens_; }
  // Stop tokens are banned until the output has this many tokens: the sampler's min_tokens where a stop token it can
  // emit ends a match, else 0.
  int32_t min_tokens() const { return min_tokens_; }

  // Allowed tokens of a state; nullptr for kDead and ended states (no mask: the row is never used to emit a token).
  const TokenSet* allowed(int32_t state) const;
  // The same after `produced` tokens of output: less the tokens after which a match could end only before
  // min_tokens (with a stop token; the stop tokens themselves are left to the min_tokens mask). Built in `scratch`
  // while min_tokens binds. Null also for a row below a token the target cannot emit there (never used, so left
  // open): after a stop token before min_tokens, or where no match can run to min_tokens.
  const TokenSet* allowed(int32_t state, int32_t produced, TokenSet& scratch) const;
  // One token of that mask, found without building it: true also where the row is left open (null above).
  bool allows(int32_t state, int32_t produced, Token token) const;
  // Is the output that led to `state` a complete match that no token can continue? Only without stop tokens the
  // sampler can emit (with them, a complete match allows them). The sequence ends there.
  bool ended(int32_t state) const;
  // The state after `token`; kDead when the token is not allowed.
  int32_t next_state(int32_t state, Token token) const;
  // Is the output that led to `state` a complete match (or ended by a stop token)?
  bool complete(int32_t state) const;

  // The state after a whole token sequence, from kInitial.
  int32_t walk(const std::vector<Token>& tokens) const;
  // The text of `tokens` (stop tokens and everything after them left out).
  std::string text(const std::vector<Token>& tokens) const;
  // Number of DFA states built so far (they are built lazily).
  int32_t states_built() const;

 private:
  // A state's transitions are not kept token by token (V int32 a state, which a long JSON output would multiply by
  // thousands of states): a token's next state is its bytes stepped through the DFA (step_token), or one pass over the
  // trie for them all (step_tokens).
  struct StateInfo {
    TokenSet allowed;                 // of V tokens
    std::vector<int32_t> successors;  // the distinct states the allowed non-stop tokens lead to, before pruning
    bool complete = false;
    int32_t num_allowed = 0;
    bool pruned = false;  // tokens into dead states are cut (what callers see)
  };
  // Two walks over the automaton: through single-byte tokens only (decided on the NFA where it can be, else steps of
  // the byte DFA: cheap, and enough wherever the vocabulary spells every byte the pattern needs) and through tokens of
  // any length (each state's successors, found by a pass over the whole trie). Each has its tables by state.
  enum class Walk { bytes, tokens };
  // The byte walk gives up once the automaton has this many DFA states: where a byte the pattern needs comes only
  // inside longer tokens, it may determinise exponentially many states the tokens never reach.
  static constexpr int32_t kByteWalkStates = 1 << 16;
  // Only DFA states count: the pairs with bad-word states are cheap, and many are made (one per distinct next state of
  // a state's tokens) that no search visits.
  bool byte_walk_spent() const { return dfa_.num_states() > kByteWalkStates; }
  static constexpr char kUnknown = 0, kLiveState = 1, kDeadState = 2;
  static constexpr int32_t kNotFound = -1;
  struct Tables {
    std::vector<char> liveness;    // can a state be reached where a match can end?
    std::vector<int32_t> longest;  // longest path through states that can, capped at min_tokens_
  };
  const StateInfo& info(int32_t state) const;
  // The mask after `produced` tokens before min_tokens cuts it: null where the row is left open; `needed` > 0 where a
  // token is kept only if a path of `needed` more tokens goes on from where it leads.
  struct MinTokensMask {
    const TokenSet* mask;
    int32_t needed;
  };
  MinTokensMask min_tokens_mask(int32_t state, int32_t produced) const;
  // The rest run with mutex_ held.
  // A state is a pair (DFA state, bad-word state), numbered as first met; without bad words of several tokens, the
  // DFA state itself.
  int32_t state_of(int32_t dfa_state, int32_t words_state) const;
  int32_t dfa_of(int32_t state) const { return bad_words_.empty() ? state : pairs_[state].first; }
  int32_t words_of(int32_t state) const { return bad_words_.empty() ? BadWordAutomaton::kRoot : pairs_[state].second; }
  int32_t num_states() const;
  // Is the token's string walked through the DFA (in the trie)? Stop tokens' strings never are: they end a match.
  bool walked(Token t) const { return permitted_[t] && !is_stop_[t]; }
  bool can_end(int32_t state) const;  // a complete match that a token the sampler emits there (a stop, or none) ends
  // Calls visit(token, next state) for every walked token (permitted, not a stop) that the pattern lets follow `state`
  // and no bad word bans there, in one preorder pass over the trie.
  template <class Visit>
  void step_tokens(int32_t state, Visit&& visit) const;
  int32_t step_token(int32_t state, Token token) const;  // the same for one such token; kDead for any other
  StateInfo build(int32_t state) const;                  // the token transitions, before dead ends are cut
  StateInfo& unpruned(int32_t state) const;              // built on first use
  Tables& tables(Walk walk) const;
  char& liveness(Walk walk, int32_t state) const;
  void successors(Walk walk, int32_t state, std::vector<int32_t>& out) const;
  bool search_live(Walk walk, int32_t state) const;
  bool live(int32_t state) const;  // through tokens of any length
  void prune(int32_t state, StateInfo& info) const;
  StateInfo& pruned(int32_t state) const;
  int32_t longest(Walk walk, int32_t state) const;
  bool reaches(int32_t state, int32_t needed) const;  // a path of `needed` tokens to where a match can end?

  std::string description_;
  std::vector<std::string> token_strings_;
  std::vector<Token> stop_tokens_;
  std::vector<Token> ending_stops_;  // the stop tokens the sampler can emit
  std::vector<char> is_stop_;
  std::vector<char> permitted_;            // [V]
  std::vector<Token> single_byte_tokens_;  // the permitted non-stop tokens of one byte
  std::bitset<256> single_bytes_;          // their bytes
  std::bitset<256> clean_single_bytes_;    // the bytes of those in no bad word of several tokens
  int32_t min_tokens_ = 0;                 // 0 without a stop token the sampler can emit
  BadWordAutomaton bad_words_;             // of several tokens
  TokenTrie trie_;                         // the permitted non-stop tokens' strings
  StateInfo stopped_;

  mutable std::mutex mutex_;
  mutable LazyByteDfa dfa_;
  mutable std::vector<std::unique_ptr<StateInfo>> infos_;   // by state
  mutable std::vector<std::pair<int32_t, int32_t>> pairs_;  // state -> (DFA state, bad-word state), with bad words
  mutable std::unordered_map<int64_t, int32_t> pair_states_;
  // The pairs whose bad-word state is the root, by DFA state (kNotFound where not yet met): after most tokens no
  // word has begun, and a constraint steps every token from each state it builds.
  mutable std::vector<int32_t> root_pairs_;
  mutable Tables bytes_, tokens_;
};

// Token t -> the one byte 'a' + t: the default token strings of table models without a tokenizer
// (V <= 159). Throws Error for larger vocabularies.
std::vector<std::string> letter_token_strings(int32_t vocab_size);
// A token-strings file's text (read from `source`): line t holds token t's string, with escapes \\ \n \t \r \s
// (space) \xHH. Throws Error naming the source and line; the text must have exactly `vocab_size` lines.
std::vector<std::string> parse_token_strings(const std::string& text, const std::string& source, int32_t vocab_size);

// What a sampler with these settings lets through: permitted[t] is 0 for a token its mask step (apply_masks_and_bias)
// bans with no output yet, i.e. outside allowed_tokens, banned, a one-token bad word or with a -inf logit bias; its
// min_tokens; and its bad words of several tokens, which ban a token only after some outputs. Throws where the
// settings are invalid for the vocabulary (SamplingParams::validate).
SamplerMasks sampler_masks(const SamplingParams& s, int32_t vocab_size);

// What the command line and experiment files say about a constraint (all optional).
struct ConstraintOptions {
  std::string regex;               // --regex
  std::string json_schema_file;    // --json-schema FILE
  std::string token_strings_file;  // --token-strings FILE
  bool any() const { return !regex.empty() || !json_schema_file.empty(); }
};

// The texts of the files the options name, read by the caller: the harness opens files, this layer parses them.
struct ConstraintFileTexts {
  std::string json_schema;    // json_schema_file's text, when it is given
  std::string token_strings;  // token_strings_file's text, when it is given
};

// The constraint the options describe, or null when they name none. Token strings come from the
// token-strings file when given, else `tokenizer_strings` (a model's tokenizer, token by token) when not
// empty, else letter_token_strings. `masks`: the target sampler's sampler_masks. Throws Error naming the option:
// both --regex and --json-schema, a bad pattern, schema or token-strings file.
std::shared_ptr<const TokenConstraint> constraint_from_options(const ConstraintOptions& options,
                                                               const ConstraintFileTexts& texts, int32_t vocab_size,
                                                               std::vector<std::string> tokenizer_strings,
                                                               std::vector<Token> stop_tokens, SamplerMasks masks = {});

// Pipeline step 1 (masks): keeps only the tokens the constraint allows in the history's state. A no-op
// without a constraint. Throws Error naming the constraint and the text so far when no token can continue (only the
// model's own -inf logits, or masks the constraint was not built with, can bring that about). A row after a stop token
// is past the sequence's end and never used: where a bad word bans every stop token there, it is left open.
void apply_token_constraint(LogitsRow row, const SamplingParams& s, const TokenHistory& h);

}  // namespace specula
