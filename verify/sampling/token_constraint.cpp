#include "verify/sampling/token_constraint.h"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <string>

#include "kernels/shared/error.h"
#include "kernels/shared/mutation_points.h"
#include "verify/constraints/json_schema.h"

namespace specula {

TokenConstraint::TokenConstraint(std::string description, const Nfa& nfa, std::vector<std::string> token_strings,
                                 std::vector<Token> stop_tokens, SamplerMasks masks)
    : description_(std::move(description)),
      token_strings_(std::move(token_strings)),
      stop_tokens_(std::move(stop_tokens)),
      permitted_(std::move(masks.permitted)),
      dfa_(nfa) {
  const int32_t V = vocab_size();
  if (V <= 0) fail(description_, ": no token strings (the vocabulary is empty)");
  if (dfa_.start() == LazyByteDfa::kDead) fail(description_, ": the pattern matches no string at all");
  if (permitted_.empty()) permitted_.assign(V, 1);
  if (static_cast<int32_t>(permitted_.size()) != V)
    fail(description_, ": ", permitted_.size(), " permitted-token flags for a vocabulary of ", V);
  for (const std::vector<Token>& word : masks.bad_words) {
    for (Token t : word)
      if (t < 0 || t >= V) fail(description_, ": bad word token id ", t, " is outside the vocabulary [0, ", V, ")");
    if (word.size() == 1) permitted_[word[0]] = 0;  // a word of one token bans it whatever the output
  }
  is_stop_.assign(V, 0);
  for (Token t : stop_tokens_) {
    if (t < 0 || t >= V) fail(description_, ": stop token id ", t, " is outside the vocabulary [0, ", V, ")");
    is_stop_[t] = 1;
    if (permitted_[t]) ending_stops_.push_back(t);
  }
  if (masks.min_tokens < 0) fail(description_, ": min_tokens must be >= 0, got ", masks.min_tokens);
  if (!ending_stops_.empty()) min_tokens_ = masks.min_tokens;
  if (!mutant_on(Mutant::constraint_ignores_bad_words)) bad_words_ = BadWordAutomaton(masks.bad_words);
  state_of(kInitial, BadWordAutomaton::kRoot);  // the start: DFA state 0, no word begun
  std::vector<char> in_trie(V);
  for (Token t = 0; t < V; ++t) in_trie[t] = walked(t);
  trie_ = TokenTrie(token_strings_, in_trie);
  stopped_.allowed = TokenSet(V);
  stopped_.complete = true;
  for (Token t : ending_stops_) stopped_.allowed.set(t);
  stopped_.num_allowed = stopped_.allowed.count();  // a stop token listed twice is one token
  stopped_.pruned = true;
  for (int32_t i = 1; i < trie_.size(); i = trie_.end[i])  // the root's children
    if (trie_.depth[i] == 1)
      single_byte_tokens_.insert(single_byte_tokens_.end(), trie_.tokens_begin(i), trie_.tokens_end(i));
  std::vector<char> in_bad_words(V, 0);
  for (const std::vector<Token>& word : masks.bad_words)
    for (Token t : word) in_bad_words[t] = 1;
  for (Token t : single_byte_tokens_) {
    single_bytes_.set(static_cast<unsigned char>(token_strings_[t][0]));
    if (!in_bad_words[t]) clean_single_bytes_.set(static_cast<unsigned char>(token_strings_[t][0]));
  }
  if (mutant_on(Mutant::constraint_byte_walk_any_byte)) single_bytes_ = clean_single_bytes_ = std::bitset<256>().set();
  // Refused where it is built, not at the first token: a pattern the tokens cannot spell, or not long enough.
  bool spelled = false, long_enough = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    spelled = live(kInitial);
    long_enough = spelled && reaches(kInitial, min_tokens_);
  }
  if (!spelled)
    fail(description_,
         ": no token can begin a match (no sequence of token strings spells one, or only tokens that other settings "
         "ban would: check the token strings, allowed_tokens, banned_tokens, bad_words and logit_bias)");
  if (!long_enough)
    fail(description_, ": no match of at least ", min_tokens_, " tokens can be spelled (min_tokens ", min_tokens_,
         " bans the stop tokens that end a match until then)");
}

std::shared_ptr<const TokenConstraint> TokenConstraint::from_regex(const std::string& pattern,
                                                                   std::vector<std::string> token_strings,
                                                                   std::vector<Token> stop_tokens, SamplerMasks masks) {
  return std::make_shared<const TokenConstraint>("regex '" + pattern + "'", compile_regex(pattern),
                                                 std::move(token_strings), std::move(stop_tokens), std::move(masks));
}

std::shared_ptr<const TokenConstraint> TokenConstraint::from_json_schema(const std::string& schema_json,
                                                                         const std::string& source,
                                                                         std::vector<std::string> token_strings,
                                                                         std::vector<Token> stop_tokens,
                                                                         SamplerMasks masks) {
  return std::make_shared<const TokenConstraint>("json schema '" + source + "'",
                                                 compile_json_schema(schema_json, source), std::move(token_strings),
                                                 std::move(stop_tokens), std::move(masks));
}

int32_t TokenConstraint::state_of(int32_t dfa_state, int32_t words_state) const {
  if (bad_words_.empty()) return dfa_state;
  if (words_state == BadWordAutomaton::kRoot) {
    if (root_pairs_.size() <= static_cast<size_t>(dfa_state))
      root_pairs_.resize(std::max<size_t>(2 * root_pairs_.size(), static_cast<size_t>(dfa_state) + 1), kNotFound);
    int32_t& state = root_pairs_[dfa_state];
    if (state == kNotFound) {
      state = static_cast<int32_t>(pairs_.size());
      pairs_.emplace_back(dfa_state, words_state);
    }
    return state;
  }
  const int64_t key = static_cast<int64_t>(dfa_state) << 32 | static_cast<uint32_t>(words_state);
  const auto [it, added] = pair_states_.try_emplace(key, static_cast<int32_t>(pairs_.size()));
  if (added) pairs_.emplace_back(dfa_state, words_state);
  return it->second;
}

int32_t TokenConstraint::num_states() const {
  return bad_words_.empty() ? dfa_.num_states() : static_cast<int32_t>(pairs_.size());
}

// With a stop token the sampler can emit, a match ends by emitting one, which a bad word may ban after this output.
bool TokenConstraint::can_end(int32_t state) const {
  if (!dfa_.accepting(dfa_of(state))) return false;
  if (ending_stops_.empty() || bad_words_.empty()) return true;
  return std::any_of(ending_stops_.begin(), ending_stops_.end(),
                     [&](Token t) { return !bad_words_.bans(words_of(state), t); });
}

template <class Visit>
void TokenConstraint::step_tokens(int32_t state, Visit&& visit) const {
  const int32_t words = words_of(state);
  // at[d] is the DFA state after the first d bytes of the node's string.
  std::vector<int32_t> at(trie_.max_depth + 1);
  at[0] = dfa_of(state);
  for (int32_t i = 1; i < trie_.size();) {
    const int32_t to = dfa_.step(at[trie_.depth[i] - 1], trie_.byte[i]);
    if (to == LazyByteDfa::kDead) {
      i = trie_.end[i];  // no token below can follow either
      continue;
    }
    at[trie_.depth[i]] = to;
    for (const Token* t = trie_.tokens_begin(i); t != trie_.tokens_end(i); ++t)
      if (bad_words_.empty())
        visit(*t, to);
      else if (!bad_words_.bans(words, *t))
        visit(*t, state_of(to, bad_words_.step(words, *t)));
    ++i;
  }
}

int32_t TokenConstraint::step_token(int32_t state, Token token) const {
  if (!walked(token) || token_strings_[token].empty()) return kDead;
  int32_t to = dfa_of(state);
  for (char c : token_strings_[token]) to = dfa_.step(to, static_cast<unsigned char>(c));
  if (to == LazyByteDfa::kDead || bad_words_.bans(words_of(state), token)) return kDead;
  return state_of(to, bad_words_.step(words_of(state), token));
}

TokenConstraint::StateInfo TokenConstraint::build(int32_t state) const {
  StateInfo info;
  info.allowed = TokenSet(vocab_size());
  info.complete = dfa_.accepting(dfa_of(state));
  std::vector<char> seen;  // by state: a vocabulary's tokens lead to few distinct states
  step_tokens(state, [&](Token t, int32_t next) {
    info.allowed.set(t);
    if (static_cast<int32_t>(seen.size()) <= next) seen.resize(std::max<size_t>(2 * seen.size(), next + 1), 0);
    if (!seen[next]) info.successors.push_back(next);
    seen[next] = 1;
  });
  std::sort(info.successors.begin(), info.successors.end());
  if (info.complete)
    for (Token t : ending_stops_)
      if (!bad_words_.bans(words_of(state), t)) info.allowed.set(t);
  info.num_allowed = info.allowed.count();
  return info;
}

TokenConstraint::StateInfo& TokenConstraint::unpruned(int32_t state) const {
  if (static_cast<int32_t>(infos_.size()) <= state) infos_.resize(state + 1);
  if (!infos_[state]) infos_[state] = std::make_unique<StateInfo>(build(state));
  return *infos_[state];
}

TokenConstraint::Tables& TokenConstraint::tables(Walk walk) const { return walk == Walk::bytes ? bytes_ : tokens_; }

char& TokenConstraint::liveness(Walk walk, int32_t state) const {
  std::vector<char>& v = tables(walk).liveness;
  if (static_cast<int32_t>(v.size()) <= state) v.resize(std::max(state + 1, num_states()), kUnknown);
  return v[state];
}

// The distinct states one step leads to: one single-byte token (a step of the byte DFA, which builds no token
// transitions), or one token of any length (the state's token transitions, built on first use).
void TokenConstraint::successors(Walk walk, int32_t state, std::vector<int32_t>& out) const {
  out.clear();
  if (walk == Walk::bytes) {
    const int32_t from = dfa_of(state), words = words_of(state);
    for (Token t : single_byte_tokens_) {
      if (bad_words_.bans(words, t)) continue;
      const int32_t to = dfa_.step(from, static_cast<unsigned char>(token_strings_[t][0]));
      if (to != LazyByteDfa::kDead) out.push_back(state_of(to, bad_words_.step(words, t)));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  } else {
    out = unpruned(state).successors;  // sorted and distinct already
  }
}

// Breadth-first from `state` until one where a match can end, or a known-live one. Found: the path to it is live. Not
// found: every state the search reached is dead, since all that they reach was searched too. A token walk takes a state
// that single-byte tokens can finish from as found (they are tokens too), so it searches only where they cannot.
bool TokenConstraint::search_live(Walk walk, int32_t state) const {
  if (const char known = liveness(walk, state); known != kUnknown) return known == kLiveState;
  // Without bad words of several tokens, a state is its DFA state and can end a match where the DFA accepts: the byte
  // walk then asks whether some string of the single-byte tokens' bytes leads to acceptance, which the NFA answers
  // without exploring the DFA states on the way (a long pattern has tens of thousands of them).
  if (walk == Walk::bytes && bad_words_.empty()) {
    const bool found = dfa_.completes_within(dfa_of(state), single_bytes_);
    liveness(walk, state) = found ? kLiveState : kDeadState;
    return found;
  }
  // With them, the NFA's answer for all single bytes finds a state dead (bad words only take paths away), and its
  // answer for bytes whose tokens are in no bad word finds it live: the first such byte leaves no word begun, later
  // ones begin none, and where no word is begun nothing is banned (words of one token are not permitted at all). At
  // least one byte, since this state's own stop tokens may be banned; can_end covers none. Between the two, the
  // breadth-first walk decides.
  if (walk == Walk::bytes) {
    if (!dfa_.completes_within(dfa_of(state), single_bytes_)) {
      liveness(walk, state) = kDeadState;
      return false;
    }
    if (can_end(state) || dfa_.completes_within(dfa_of(state), clean_single_bytes_, true)) {
      liveness(walk, state) = kLiveState;
      return true;
    }
  }
  if (walk == Walk::bytes && byte_walk_spent()) return false;  // not found: the token walk decides
  std::vector<int32_t> order = {state}, parent = {-1}, next;
  std::set<int32_t> seen = {state};
  for (size_t k = 0; k < order.size(); ++k) {
    const int32_t u = order[k];
    const char known = liveness(walk, u);
    if (known == kLiveState || can_end(u) || (walk == Walk::tokens && search_live(Walk::bytes, u))) {
      for (int32_t i = static_cast<int32_t>(k); i >= 0; i = parent[i]) liveness(walk, order[i]) = kLiveState;
      return true;
    }
    if (known == kDeadState) continue;
    if (walk == Walk::bytes && byte_walk_spent()) return false;  // given up: nothing is marked
    successors(walk, u, next);
    for (int32_t to : next)
      if (seen.insert(to).second) {
        order.push_back(to);
        parent.push_back(static_cast<int32_t>(k));
      }
  }
  for (int32_t s : order) liveness(walk, s) = kDeadState;
  return false;
}

bool TokenConstraint::live(int32_t state) const { return search_live(Walk::tokens, state); }

void TokenConstraint::prune(int32_t state, StateInfo& info) const {
  if (info.pruned) return;
  info.pruned = true;
  if (mutant_on(Mutant::constraint_liveness_per_byte)) return;
  // Each successor's liveness first (a search may build other states), then one pass to cut the tokens into dead ones.
  bool any_dead = false;
  for (int32_t s : info.successors) any_dead = !live(s) || any_dead;
  if (!any_dead) return;
  step_tokens(state, [&](Token t, int32_t next) {
    if (info.allowed.test(t) && !live(next)) {
      info.allowed.reset(t);
      --info.num_allowed;
    }
  });
}

TokenConstraint::StateInfo& TokenConstraint::pruned(int32_t state) const {
  StateInfo& i = unpruned(state);
  prune(state, i);
  return i;
}

// The longest path from `state` through states the walk can still finish a match from, capped at min_tokens_: a
// match can be ended from there with at least that many more tokens. Depth-first, without recursion; a step back to
// a state on the path closes a cycle of such states, along which paths of any length run. A path of single-byte
// tokens is a path of tokens, so the byte walk's value is a lower bound of the token walk's.
int32_t TokenConstraint::longest(Walk walk, int32_t state) const {
  Tables& table = tables(walk);
  auto value = [&](int32_t s) -> int32_t& {
    if (static_cast<int32_t>(table.longest.size()) <= s) table.longest.resize(std::max(s + 1, num_states()), kNotFound);
    return table.longest[s];
  };
  if (value(state) != kNotFound) return value(state);
  struct Frame {
    int32_t state;
    std::vector<int32_t> next;  // the successors the walk can finish from
    size_t at = 0;              // the next of them to follow
    int32_t best = 0;           // the longest path found so far
  };
  std::set<int32_t> on_path;
  std::vector<Frame> path;
  auto enter = [&](int32_t s) {
    Frame f{s, {}, 0, 0};
    // A byte walk that has given up follows no more steps: its values stay lower bounds, which is all it gives.
    if (walk == Walk::tokens || !byte_walk_spent()) successors(walk, s, f.next);
    f.next.erase(std::remove_if(f.next.begin(), f.next.end(), [&](int32_t to) { return !search_live(walk, to); }),
                 f.next.end());
    on_path.insert(s);
    path.push_back(std::move(f));
  };
  enter(state);
  while (!path.empty()) {
    Frame& f = path.back();
    bool descended = false;
    while (f.best < min_tokens_ && f.at < f.next.size()) {
      const int32_t to = f.next[f.at++];
      if (on_path.count(to)) {
        f.best = min_tokens_;
      } else if (value(to) != kNotFound) {
        f.best = std::max(f.best, 1 + value(to));
      } else {
        enter(to);  // `f` is not used again before it is back on top
        descended = true;
        break;
      }
    }
    if (descended) continue;
    const int32_t found = std::min(path.back().best, min_tokens_);
    value(path.back().state) = found;
    on_path.erase(path.back().state);
    path.pop_back();
    if (!path.empty()) path.back().best = std::max(path.back().best, 1 + found);
  }
  return value(state);
}

bool TokenConstraint::reaches(int32_t state, int32_t needed) const {
  return needed <= 0 || longest(Walk::bytes, state) >= needed || longest(Walk::tokens, state) >= needed;
}

const TokenConstraint::StateInfo& TokenConstraint::info(int32_t state) const {
  if (state == kStopped) return stopped_;
  std::lock_guard<std::mutex> lock(mutex_);
  if (state < 0 || state >= num_states())
    fail(description_, ": automaton state ", state, " does not exist (a history from another constraint?)");
  return pruned(state);
}

const TokenSet* TokenConstraint::allowed(int32_t state) const {
  if (state == kDead) return nullptr;
  const StateInfo& i = info(state);
  return i.complete && i.num_allowed == 0 ? nullptr : &i.allowed;  // an ended state's row is never used
}

TokenConstraint::MinTokensMask TokenConstraint::min_tokens_mask(int32_t state, int32_t produced) const {
  // A row after a stop token that min_tokens banned is below a token the target cannot emit: never used, left open.
  if (state == kStopped && produced < min_tokens_) return {nullptr, 0};
  const TokenSet* mask = allowed(state);
  if (!mask || state < 0 || produced >= min_tokens_ || mutant_on(Mutant::constraint_ignores_min_tokens))
    return {mask, 0};
  std::lock_guard<std::mutex> lock(mutex_);
  // So is a row whose path cannot run to min_tokens: a token above it was one the target's mask cut.
  if (!reaches(state, min_tokens_ - produced)) return {nullptr, 0};
  // After the next token, a match may end at once unless fewer than min_tokens_ tokens would have been produced.
  return {mask, min_tokens_ - produced - 1};
}

const TokenSet* TokenConstraint::allowed(int32_t state, int32_t produced, TokenSet& scratch) const {
  const MinTokensMask m = min_tokens_mask(state, produced);
  if (!m.mask || m.needed <= 0) return m.mask;
  std::lock_guard<std::mutex> lock(mutex_);
  scratch = *m.mask;
  step_tokens(state, [&](Token t, int32_t next) {
    if (scratch.test(t) && !reaches(next, m.needed)) scratch.reset(t);
  });
  return &scratch;
}

bool TokenConstraint::allows(int32_t state, int32_t produced, Token token) const {
  if (token < 0 || token >= vocab_size())
    fail(description_, ": token id ", token, " is outside the vocabulary [0, ", vocab_size(), ")");
  const MinTokensMask m = min_tokens_mask(state, produced);
  if (!m.mask) return true;
  if (!m.mask->test(token)) return false;
  if (m.needed <= 0 || is_stop_[token]) return true;  // stop tokens are left to the min_tokens mask, as above
  std::lock_guard<std::mutex> lock(mutex_);
  return reaches(step_token(state, token), m.needed);
}

bool TokenConstraint::ended(int32_t state) const {
  if (state == kDead) return false;
  const StateInfo& i = info(state);
  return i.complete && i.num_allowed == 0;
}

int32_t TokenConstraint::next_state(int32_t state, Token token) const {
  if (state == kDead) return kDead;
  if (token < 0 || token >= vocab_size())
    fail(description_, ": token id ", token, " is outside the vocabulary [0, ", vocab_size(), ")");
  if (!info(state).allowed.test(token)) return kDead;
  if (is_stop_[token]) return kStopped;
  std::lock_guard<std::mutex> lock(mutex_);
  return step_token(state, token);
}

bool TokenConstraint::complete(int32_t state) const { return state != kDead && info(state).complete; }

int32_t TokenConstraint::walk(const std::vector<Token>& tokens) const {
  int32_t state = kInitial;
  for (Token t : tokens) state = next_state(state, t);
  return state;
}

std::string TokenConstraint::text(const std::vector<Token>& tokens) const {
  std::string out;
  for (Token t : tokens) {
    if (t < 0 || t >= vocab_size() || is_stop_[t]) break;
    out += token_strings_[t];
  }
  return out;
}

int32_t TokenConstraint::states_built() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dfa_.num_states();
}

std::vector<std::string> letter_token_strings(int32_t vocab_size) {
  if (vocab_size > 256 - 'a')
    fail("token strings: the default 'a' + t covers at most ", 256 - 'a', " tokens, the vocabulary has ", vocab_size,
         " (give a token-strings file)");
  std::vector<std::string> out;
  for (int32_t t = 0; t < vocab_size; ++t) out.push_back(std::string(1, static_cast<char>('a' + t)));
  return out;
}

std::vector<std::string> parse_token_strings(const std::string& text, const std::string& path, int32_t vocab_size) {
  std::istringstream in(text);
  std::vector<std::string> out;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    // A raw carriage return at a line's end is a CRLF file's, almost surely not a token's own byte (written \r).
    if (!line.empty() && line.back() == '\r')
      fail(path, ":", line_no, ": the line ends with a carriage return (CRLF line ends? write \\r for a token's own)");
    std::string s;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] != '\\') {
        s += line[i];
        continue;
      }
      if (i + 1 >= line.size()) fail(path, ":", line_no, ": the line ends with a lone backslash");
      const char e = line[++i];
      auto hex = [&](char h) -> int {
        if (h >= '0' && h <= '9') return h - '0';
        if (h >= 'a' && h <= 'f') return h - 'a' + 10;
        if (h >= 'A' && h <= 'F') return h - 'A' + 10;
        fail(path, ":", line_no, ": column ", i + 1, ": '\\x' needs two hexadecimal digits");
      };
      switch (e) {
        case '\\':
          s += '\\';
          break;
        case 'n':
          s += '\n';
          break;
        case 't':
          s += '\t';
          break;
        case 'r':
          s += '\r';
          break;
        case 's':
          s += ' ';
          break;
        case 'x': {
          if (i + 2 >= line.size()) fail(path, ":", line_no, ": column ", i, ": '\\x' needs two hexadecimal digits");
          s += static_cast<char>(hex(line[i + 1]) * 16 + hex(line[i + 2]));
          i += 2;
          break;
        }
        default:
          fail(path, ":", line_no, ": column ", i, ": unknown escape '\\", e, "' (known: \\\\ \\n \\t \\r \\s \\xHH)");
      }
    }
    out.push_back(std::move(s));
  }
  if (static_cast<int32_t>(out.size()) != vocab_size)
    fail(path, ": ", out.size(), " token strings for a vocabulary of ", vocab_size, " (one line per token)");
  return out;
}

SamplerMasks sampler_masks(const SamplingParams& s, int32_t vocab_size) {
  s.validate(vocab_size);  // the mask step indexes a row by the token ids
  // The sampler's own mask step on a row of zeros with no output yet: what it bans there it bans whatever the
  // history, since a bad word of several tokens needs the rest of it in the output. Those words, and min_tokens, which
  // depend on the output, are carried apart.
  SamplingParams always = s;
  always.min_tokens = 0;
  std::vector<float> row(vocab_size, 0.0f);
  apply_masks_and_bias({row.data(), vocab_size}, always, TokenHistory{});
  std::vector<char> permitted(vocab_size);
  for (int32_t t = 0; t < vocab_size; ++t) permitted[t] = row[t] != -std::numeric_limits<float>::infinity();
  std::vector<std::vector<Token>> words;
  for (const std::vector<Token>& word : s.bad_words)
    if (word.size() > 1) words.push_back(word);
  return {std::move(permitted), s.min_tokens, std::move(words)};
}

std::shared_ptr<const TokenConstraint> constraint_from_options(const ConstraintOptions& options,
                                                               const ConstraintFileTexts& texts, int32_t vocab_size,
                                                               std::vector<std::string> tokenizer_strings,
                                                               std::vector<Token> stop_tokens, SamplerMasks masks) {
  if (!options.any()) return nullptr;
  if (!options.regex.empty() && !options.json_schema_file.empty())
    fail_parameter("regex", " and json_schema: give one constraint, not both");
  std::vector<std::string> strings;
  if (!options.token_strings_file.empty()) {
    strings = parse_token_strings(texts.token_strings, options.token_strings_file, vocab_size);
  } else if (!tokenizer_strings.empty()) {
    if (static_cast<int32_t>(tokenizer_strings.size()) != vocab_size)
      fail("token strings: the tokenizer has ", tokenizer_strings.size(), " tokens but the model has ", vocab_size);
    strings = std::move(tokenizer_strings);
  } else {
    strings = letter_token_strings(vocab_size);
  }
  // An automaton that cannot be built is the constraint's parameter's error, so that a front end names where it was
  // given (--regex; an experiment's file:line: key), not only the pattern.
  const char* parameter = options.regex.empty() ? "json_schema" : "regex";
  try {
    if (!options.regex.empty())
      return TokenConstraint::from_regex(options.regex, std::move(strings), std::move(stop_tokens), std::move(masks));
    return TokenConstraint::from_json_schema(texts.json_schema, options.json_schema_file, std::move(strings),
                                             std::move(stop_tokens), std::move(masks));
  } catch (const ParameterError&) {
    throw;
  } catch (const Error& e) {
    fail_parameter(parameter, ": ", e.what());
  }
}

void apply_token_constraint(LogitsRow row, const SamplingParams& s, const TokenHistory& h) {
  if (!s.constraint) return;
  thread_local TokenSet scratch;
  const TokenSet* allowed = s.constraint->allowed(h.constraint_state, static_cast<int32_t>(h.produced()), scratch);
  if (!allowed) return;  // the path left the language: this row is never used (see the header)
  const bool kept = any_kept(row, *allowed);
  if (!kept && s.constraint_yields_to_masks) return;  // a draft's row: see SamplingParams
  // A row after a stop token is past the sequence's end, never used: a bad word that ends with a stop token may leave
  // it no token.
  if (!kept && h.constraint_state == TokenConstraint::kStopped) return;
  if (!kept)
    fail(s.constraint->description(), ": no token can continue the output '", h.output_dropped > 0 ? "..." : "",
         s.constraint->text(h.output), "'",
         h.output_dropped > 0
             ? " (its last " + std::to_string(h.output.size()) + " of " + std::to_string(h.produced()) + " tokens)"
             : std::string(),
         " (every token that continues the match is masked here by the model's own -inf logits, or by masks the "
         "automaton was not built with)");
  keep_only(row, *allowed);
}

}  // namespace specula
