#include "verify/constraints/regex.h"

#include <memory>

#include "kernels/shared/error.h"

namespace specula {
namespace {

using ByteSet = std::bitset<256>;

struct Node {
  enum Kind { empty, bytes, concat, alternation, repeat } kind = empty;
  ByteSet set;                                        // bytes
  std::vector<std::shared_ptr<const Node>> children;  // concat, alternation, repeat (one child)
  int32_t min = 0, max = -1;                          // repeat: max -1 = unbounded
};
using NodePtr = std::shared_ptr<const Node>;

NodePtr make_bytes(const ByteSet& set) {
  auto n = std::make_shared<Node>();
  n->kind = Node::bytes;
  n->set = set;
  return n;
}

NodePtr make_list(Node::Kind kind, std::vector<NodePtr> children) {
  if (children.size() == 1) return children[0];
  auto n = std::make_shared<Node>();
  n->kind = children.empty() ? Node::empty : kind;
  n->children = std::move(children);
  return n;
}

ByteSet byte_range(int lo, int hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return s;
}

ByteSet ascii_complement(const ByteSet& s) {
  ByteSet out;
  for (int b = 0; b < 128; ++b)
    if (!s.test(b)) out.set(b);
  return out;
}

// One well-formed UTF-8 encoded non-ASCII character, the byte sequences of the Unicode Standard's Table 3-7
// ("Well-Formed UTF-8 Byte Sequences", §3.9): no overlong form (C0, C1, E0 80..9F, F0 80..8F), no surrogate (ED
// A0..BF) and nothing above U+10FFFF (F4 90..BF, F5..FF), so a constrained output is always valid UTF-8 (and a
// JSON text valid JSON).
NodePtr non_ascii_character() {
  const auto range = [](int lo, int hi) { return make_bytes(byte_range(lo, hi)); };
  const NodePtr cont = range(0x80, 0xbf);
  std::vector<NodePtr> alts;
  alts.push_back(make_list(Node::concat, {range(0xc2, 0xdf), cont}));
  alts.push_back(make_list(Node::concat, {range(0xe0, 0xe0), range(0xa0, 0xbf), cont}));
  alts.push_back(make_list(Node::concat, {range(0xe1, 0xec), cont, cont}));
  alts.push_back(make_list(Node::concat, {range(0xed, 0xed), range(0x80, 0x9f), cont}));
  alts.push_back(make_list(Node::concat, {range(0xee, 0xef), cont, cont}));
  alts.push_back(make_list(Node::concat, {range(0xf0, 0xf0), range(0x90, 0xbf), cont, cont}));
  alts.push_back(make_list(Node::concat, {range(0xf1, 0xf3), cont, cont, cont}));
  alts.push_back(make_list(Node::concat, {range(0xf4, 0xf4), range(0x80, 0x8f), cont, cont}));
  return make_list(Node::alternation, std::move(alts));
}

// An ASCII byte set, or (negated) its ASCII complement together with every non-ASCII character.
NodePtr class_node(const ByteSet& set, bool negated) {
  if (!negated) return make_bytes(set);
  return make_list(Node::alternation, {make_bytes(ascii_complement(set)), non_ascii_character()});
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

class Parser {
 public:
  explicit Parser(const std::string& pattern) : p_(pattern) {}

  NodePtr parse() {
    size_t end = p_.size();
    if (pos_ < end && p_[pos_] == '^') ++pos_;
    if (end > pos_ && p_[end - 1] == '$' && !escaped_at(end - 1))
      end_ = end - 1;
    else
      end_ = end;
    NodePtr n = alternation();
    if (pos_ < end_) {
      if (p_[pos_] == ')') error(pos_, "unmatched ')'");
      error(pos_, "unexpected '", p_[pos_], "'");
    }
    return n;
  }

 private:
  template <typename... Parts>
  [[noreturn]] void error(size_t at, const Parts&... parts) const {
    fail("regex '", p_, "': position ", at, ": ", parts...);
  }

  // Is the character at `i` preceded by an odd number of backslashes?
  bool escaped_at(size_t i) const {
    size_t n = 0;
    while (i > n && p_[i - 1 - n] == '\\') ++n;
    return n % 2 == 1;
  }

  bool more() const { return pos_ < end_; }
  char peek() const { return p_[pos_]; }

  NodePtr alternation() {
    std::vector<NodePtr> alts = {concatenation()};
    while (more() && peek() == '|') {
      ++pos_;
      alts.push_back(concatenation());
    }
    return make_list(Node::alternation, std::move(alts));
  }

  NodePtr concatenation() {
    std::vector<NodePtr> items;
    while (more() && peek() != '|' && peek() != ')') items.push_back(repetition());
    return make_list(Node::concat, std::move(items));
  }

  // An atom and at most one quantifier: ECMAScript and PCRE refuse a quantifier on a quantifier (`a**`, `a{2}{3}`:
  // "nothing to repeat"), and so does this, rather than give such a pattern a meaning those engines do not.
  NodePtr repetition() {
    NodePtr atom = this->atom();
    if (!more()) return atom;
    const char c = peek();
    int32_t lo = 0, hi = -1;
    const size_t q = pos_;
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      lo = 1;
      ++pos_;
    } else if (c == '?') {
      hi = 1;
      ++pos_;
    } else if (c != '{' || !counted(lo, hi)) {  // counted() parses {n}, {n,}, {n,m}
      return atom;
    }
    if (more() && peek() == '+') error(pos_, "possessive quantifiers are not supported");
    if (more() && peek() == '?') ++pos_;  // lazy: the same language
    if (hi >= 0 && lo > hi) error(q, "repetition {", lo, ",", hi, "} has min > max");
    if (more()) {
      const size_t at = pos_;
      const char next = peek();
      int32_t unused_lo = 0, unused_hi = -1;  // a '{' that is no repetition is refused by counted() itself
      if (next == '*' || next == '+' || next == '?' || (next == '{' && counted(unused_lo, unused_hi)))
        error(at, "nothing to repeat before '", next,
              "': a quantifier cannot follow a quantifier (group the repeated part: (a*)*)");
    }
    auto n = std::make_shared<Node>();
    n->kind = Node::repeat;
    n->children = {atom};
    n->min = lo;
    n->max = hi;
    return n;
  }

  // {n}, {n,}, {n,m}; returns false (and consumes nothing) when the brace is not a quantifier.
  bool counted(int32_t& lo, int32_t& hi) {
    size_t i = pos_ + 1;
    auto number = [&](int32_t& out) {
      const size_t from = i;
      long v = 0;
      while (i < end_ && p_[i] >= '0' && p_[i] <= '9') {
        v = v * 10 + (p_[i] - '0');
        if (v > 100000) error(from, "repetition count is too large");
        ++i;
      }
      out = static_cast<int32_t>(v);
      return i > from;
    };
    if (!number(lo)) error(pos_, "'{' must start a repetition {n}, {n,} or {n,m} (escape it as \\{)");
    if (i < end_ && p_[i] == '}') {
      hi = lo;
    } else if (i < end_ && p_[i] == ',') {
      ++i;
      if (!number(hi)) hi = -1;
      if (i >= end_ || p_[i] != '}') error(pos_, "unterminated repetition '{'");
    } else {
      error(pos_, "unterminated repetition '{'");
    }
    pos_ = i + 1;
    return true;
  }

  NodePtr atom() {
    const size_t at = pos_;
    const char c = peek();
    switch (c) {
      case '(': {
        ++pos_;
        if (more() && peek() == '?') {
          if (pos_ + 1 < end_ && p_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            error(at, "lookaround and group flags '(?' are not supported (only '(?:')");
          }
        }
        NodePtr inner = alternation();
        if (!more() || peek() != ')') error(at, "missing ')' to close this '('");
        ++pos_;
        return inner;
      }
      case '[':
        return char_class();
      case '.': {
        ++pos_;
        ByteSet nl;
        nl.set('\n');
        return class_node(nl, true);
      }
      case '*':
      case '+':
      case '?':
        error(at, "nothing to repeat before '", c, "'");
      case '{':
        error(at, "nothing to repeat before '{' (escape it as \\{)");
      case '^':
      case '$':
        error(at, "anchor '", c, "' inside the pattern is not supported (the pattern always matches the whole output)");
      case '\\':
        return escape_atom();
      default:
        break;
    }
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80) {
      ++pos_;
      ByteSet s;
      s.set(u);
      return make_bytes(s);
    }
    // A non-ASCII character: its lead byte and continuation bytes form one atom.
    std::vector<NodePtr> seq;
    do {
      ByteSet s;
      s.set(static_cast<unsigned char>(p_[pos_]));
      seq.push_back(make_bytes(s));
      ++pos_;
    } while (more() && (static_cast<unsigned char>(peek()) & 0xc0) == 0x80);
    return make_list(Node::concat, std::move(seq));
  }

  int hex_value(size_t i) const {
    const char h = i < end_ ? p_[i] : '\0';
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    if (h >= 'A' && h <= 'F') return h - 'A' + 10;
    error(i, "expected a hexadecimal digit");
  }

  // Parses an escape at pos_ (the backslash). Returns true and fills `set` for single-byte escapes and
  // classes; for \uHHHH with a code point >= 0x80 fills `utf8` instead.
  bool escape(ByteSet& set, bool& is_class, std::string& utf8, bool in_class) {
    const size_t at = pos_;
    ++pos_;
    if (!more()) error(at, "the pattern ends with a lone backslash");
    const char e = peek();
    ++pos_;
    is_class = false;
    switch (e) {
      case 'd':
        is_class = true;
        set = byte_range('0', '9');
        return true;
      case 'D':
        is_class = true;
        set = ascii_complement(byte_range('0', '9'));
        return true;
      case 'w':
      case 'W': {
        is_class = true;
        set = byte_range('a', 'z') | byte_range('A', 'Z') | byte_range('0', '9');
        set.set('_');
        if (e == 'W') set = ascii_complement(set);
        return true;
      }
      case 's':
      case 'S': {
        is_class = true;
        set.reset();
        for (char w : {' ', '\t', '\n', '\r', '\f', '\v'}) set.set(static_cast<unsigned char>(w));
        if (e == 'S') set = ascii_complement(set);
        return true;
      }
      case 'n':
        set.reset();
        set.set('\n');
        return true;
      case 't':
        set.reset();
        set.set('\t');
        return true;
      case 'r':
        set.reset();
        set.set('\r');
        return true;
      case 'f':
        set.reset();
        set.set('\f');
        return true;
      case 'v':
        set.reset();
        set.set('\v');
        return true;
      case '0':
        set.reset();
        set.set(0);
        return true;
      case 'x': {
        const int v = hex_value(pos_) * 16 + hex_value(pos_ + 1);
        pos_ += 2;
        set.reset();
        set.set(v);
        return true;
      }
      case 'u': {
        uint32_t cp = 0;
        for (int k = 0; k < 4; ++k) cp = cp * 16 + hex_value(pos_ + k);
        pos_ += 4;
        if (cp < 0x80) {
          set.reset();
          set.set(cp);
          return true;
        }
        if (in_class)
          error(at, "\\u", std::hex, cp, " is not ASCII: classes hold ASCII characters and \\xHH bytes only");
        utf8.clear();
        append_utf8(utf8, cp);
        return false;
      }
      case 'b':
      case 'B':
        error(at, "word boundaries '\\", e, "' are not supported");
      default:
        break;
    }
    if (e >= '1' && e <= '9') error(at, "backreferences are not regular and not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || static_cast<unsigned char>(e) >= 0x80)
      error(at, "unknown escape '\\", e, "'");
    set.reset();
    set.set(static_cast<unsigned char>(e));
    return true;
  }

  NodePtr escape_atom() {
    ByteSet set;
    bool is_class = false;
    std::string utf8;
    if (escape(set, is_class, utf8, false)) return make_bytes(set);
    std::vector<NodePtr> seq;
    for (char b : utf8) {
      ByteSet s;
      s.set(static_cast<unsigned char>(b));
      seq.push_back(make_bytes(s));
    }
    return make_list(Node::concat, std::move(seq));
  }

  NodePtr char_class() {
    const size_t open = pos_;
    ++pos_;
    bool negated = false;
    if (more() && peek() == '^') {
      negated = true;
      ++pos_;
    }
    ByteSet set;
    bool first = true;
    while (true) {
      if (!more()) error(open, "missing ']' to close this '['");
      if (peek() == ']' && !first) break;
      first = false;
      const size_t item_at = pos_;
      int lo = -1;
      if (peek() == '\\') {
        ByteSet s;
        bool is_class = false;
        std::string utf8;
        escape(s, is_class, utf8, true);
        if (is_class) {
          set |= s;
          continue;
        }
        lo = static_cast<int>(s._Find_first());
      } else {
        const unsigned char u = static_cast<unsigned char>(peek());
        if (u >= 0x80) error(item_at, "non-ASCII characters inside a class are not supported (use an alternation)");
        lo = u;
        ++pos_;
      }
      // A range lo-hi (a '-' before ']' is literal).
      if (more() && peek() == '-' && pos_ + 1 < end_ && p_[pos_ + 1] != ']') {
        ++pos_;
        int hi = -1;
        if (peek() == '\\') {
          ByteSet s;
          bool is_class = false;
          std::string utf8;
          const size_t hi_at = pos_;
          escape(s, is_class, utf8, true);
          if (is_class) error(hi_at, "a class escape cannot end a range");
          hi = static_cast<int>(s._Find_first());
        } else {
          const unsigned char u = static_cast<unsigned char>(peek());
          if (u >= 0x80) error(pos_, "non-ASCII characters inside a class are not supported (use an alternation)");
          hi = u;
          ++pos_;
        }
        if (hi < lo) error(item_at, "range is out of order (end before start)");
        set |= byte_range(lo, hi);
      } else {
        set.set(lo);
      }
    }
    ++pos_;  // ']'
    if (negated) return class_node(set, true);
    return make_bytes(set);
  }

  const std::string& p_;
  size_t pos_ = 0;
  size_t end_ = 0;
};

class Compiler {
 public:
  Compiler(Nfa& nfa, const std::string& pattern) : nfa_(nfa), pattern_(pattern) {}

  // Returns (start, end) of a fragment whose `end` has no outgoing moves yet.
  std::pair<int32_t, int32_t> compile(const Node& n) {
    switch (n.kind) {
      case Node::empty: {
        const int32_t s = add(), e = add();
        nfa_.states[s].epsilon.push_back(e);
        return {s, e};
      }
      case Node::bytes: {
        const int32_t s = add(), e = add();
        nfa_.states[s].bytes = n.set;
        nfa_.states[s].on_byte = e;
        return {s, e};
      }
      case Node::concat: {
        auto [s, e] = compile(*n.children[0]);
        for (size_t i = 1; i < n.children.size(); ++i) {
          auto [cs, ce] = compile(*n.children[i]);
          nfa_.states[e].epsilon.push_back(cs);
          e = ce;
        }
        return {s, e};
      }
      case Node::alternation: {
        const int32_t s = add(), e = add();
        for (const NodePtr& c : n.children) {
          auto [cs, ce] = compile(*c);
          nfa_.states[s].epsilon.push_back(cs);
          nfa_.states[ce].epsilon.push_back(e);
        }
        return {s, e};
      }
      case Node::repeat: {
        const int32_t s = add();
        int32_t e = s;
        for (int32_t i = 0; i < n.min; ++i) {
          auto [cs, ce] = compile(*n.children[0]);
          nfa_.states[e].epsilon.push_back(cs);
          e = ce;
        }
        if (n.max < 0) {  // star: loop back through the child
          auto [cs, ce] = compile(*n.children[0]);
          const int32_t out = add();
          nfa_.states[e].epsilon.push_back(cs);
          nfa_.states[e].epsilon.push_back(out);
          nfa_.states[ce].epsilon.push_back(cs);
          nfa_.states[ce].epsilon.push_back(out);
          return {s, out};
        }
        const int32_t out = add();
        for (int32_t i = n.min; i < n.max; ++i) {  // optional copies, each may end the repetition
          auto [cs, ce] = compile(*n.children[0]);
          nfa_.states[e].epsilon.push_back(cs);
          nfa_.states[e].epsilon.push_back(out);
          e = ce;
        }
        nfa_.states[e].epsilon.push_back(out);
        return {s, out};
      }
    }
    return {0, 0};
  }

 private:
  int32_t add() {
    if (static_cast<int32_t>(nfa_.states.size()) >= kMaxNfaStates)
      fail("regex '", pattern_, "': too large: more than ", kMaxNfaStates,
           " automaton states after expanding counted repetitions {n,m}");
    nfa_.states.emplace_back();
    return static_cast<int32_t>(nfa_.states.size()) - 1;
  }

  Nfa& nfa_;
  const std::string& pattern_;
};

}  // namespace

Nfa compile_regex(const std::string& pattern) {
  const NodePtr root = Parser(pattern).parse();
  Nfa nfa;
  auto [s, e] = Compiler(nfa, pattern).compile(*root);
  nfa.start = s;
  nfa.accept = e;
  return nfa;
}

std::string regex_escape(const std::string& text) {
  static const std::string meta = "\\^$.|?*+()[]{}/-";
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (meta.find(c) != std::string::npos) {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace specula
