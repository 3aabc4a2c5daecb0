#include "harness/models/hf/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <unordered_map>

#include "harness/models/json_fields.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

using nlohmann::json;

// GPT-2's pre-tokenizer pattern (the ByteLevel pre-tokenizer's use_regex).
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// `\s` and `\S` as Unicode White_Space (what Oniguruma, the tokenizers library's engine, matches; ICU's own
// `\s` is [\t\n\f\r\p{Z}] and misses U+000B and U+0085).
std::string white_space_as_unicode(const std::string& pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      out += c == 's' ? "\\p{White_Space}" : c == 'S' ? "\\P{White_Space}" : std::string{'\\', c};
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7f >> n);
    for (size_t k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + k]);
      if ((d >> 6) != 0x2) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8.
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n;
  }
  return true;
}

// Splits UTF-8 `s` into code points (a stray byte of invalid UTF-8 is one "code point" of its own).
std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    s += static_cast<char>(0xe0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

// A compiled ICU pattern; matchers are made per call (a RegexPattern is immutable and thread-safe, a
// RegexMatcher is neither).
struct SplitStep {
  std::string source;
  std::shared_ptr<icu::RegexPattern> pattern;
};

SplitStep compile(const std::string& source, const std::string& where) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError parse_error;
  const icu::UnicodeString pattern = icu::UnicodeString::fromUTF8(white_space_as_unicode(source));
  std::shared_ptr<icu::RegexPattern> p(icu::RegexPattern::compile(pattern, 0, parse_error, status));
  if (U_FAILURE(status) || !p)
    fail(where, ": cannot compile pre-tokenizer regex '", source, "': ", u_errorName(status), " at offset ",
         parse_error.offset);
  return {source, p};
}

// "Isolated" split: every match is a piece and so is the text between matches.
void split_isolated(const SplitStep& step, const std::string& s, std::vector<std::string>& out) {
  UErrorCode status = U_ZERO_ERROR;
  UText* text = utext_openUTF8(nullptr, s.data(), static_cast<int64_t>(s.size()), &status);
  std::unique_ptr<icu::RegexMatcher> m(step.pattern->matcher(status));
  if (U_FAILURE(status)) {
    utext_close(text);
    fail("pre-tokenizer regex '", step.source, "': ", u_errorName(status));
  }
  m->reset(text);
  int64_t prev = 0;
  while (m->find(status) && U_SUCCESS(status)) {
    const int64_t a = m->start64(status), b = m->end64(status);
    if (a > prev) out.push_back(s.substr(prev, a - prev));
    if (b > a) out.push_back(s.substr(a, b - a));
    prev = b;
  }
  utext_close(text);
  if (U_FAILURE(status)) fail("pre-tokenizer regex '", step.source, "': ", u_errorName(status));
  if (prev < static_cast<int64_t>(s.size())) out.push_back(s.substr(prev));
}

const json* get(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string type_of(const json& j, const std::string& where) {
  const json* t = get(j, "type");
  if (!t || !t->is_string()) fail(where, ": missing 'type' in ", j.dump().substr(0, 200));
  return t->get<std::string>();
}

}  // namespace

const std::vector<std::string>& byte_level_alphabet() {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes take the code
  // points 256, 257, ... in byte order, so no byte maps to whitespace or a control character.
  static const std::vector<std::string> alphabet = [] {
    std::vector<std::string> a(256);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      a[b] = encode_utf8(printable ? b : next++);
    }
    return a;
  }();
  return alphabet;
}

struct ByteLevelBpeTokenizer::Impl {
  std::string where;
  std::unordered_map<std::string, Token> vocab;
  std::vector<std::string> pieces;  // id -> vocabulary string ("" for ids that only added tokens use)
  std::unordered_map<std::string, int32_t> merge_rank;  // "a b" -> rank
  struct Added {
    std::string content;
    Token id;
  };
  std::vector<Added> added;                      // longest content first
  std::vector<size_t> added_by_first_byte[256];  // indices into `added`, longest first
  std::unordered_map<Token, std::string> added_content;
  const icu::Normalizer2* normalizer = nullptr;  // null: none
  std::vector<SplitStep> splits;
  bool ignore_merges = false;
  bool byte_fallback = false;
  Token unk = -1;
  std::vector<Token> prefix, suffix;
  std::unordered_map<std::string, uint8_t> byte_of;  // alphabet character -> byte
  int32_t vocab_size = 0;

  void parse(const json& j);
  void parse_model(const json& model);
  void parse_added_tokens(const json& added_tokens);
  void parse_normalizer(const json& n);
  void parse_pre_tokenizer(const json& p, bool& byte_level);
  void parse_post_processor(const json& p);
  Token lookup_byte(uint8_t b) const;
  void encode_piece(const std::string& piece, std::vector<Token>& out) const;
  void encode_segment(std::string segment, std::vector<Token>& out) const;
};

void ByteLevelBpeTokenizer::Impl::parse_pre_tokenizer(const json& p, bool& byte_level) {
  const std::string type = type_of(p, where + ": pre_tokenizer");
  if (type == "Sequence") {
    const json* steps = get(p, "pretokenizers");
    if (!steps || !steps->is_array()) fail(where, ": pre_tokenizer Sequence needs 'pretokenizers'");
    for (const json& s : *steps) parse_pre_tokenizer(s, byte_level);
  } else if (type == "ByteLevel") {
    if (get(p, "add_prefix_space") && (*get(p, "add_prefix_space")).get<bool>())
      fail(where, ": ByteLevel add_prefix_space = true is not supported");
    byte_level = true;
    const json* use_regex = get(p, "use_regex");
    if (!use_regex || use_regex->get<bool>()) splits.push_back(compile(kGpt2Pattern, where));
  } else if (type == "Split") {
    const json* behavior = get(p, "behavior");
    if (!behavior || *behavior != "Isolated")
      fail(where, ": Split behavior ", behavior ? behavior->dump() : "null", " is not supported (only \"Isolated\")");
    if (get(p, "invert") && get(p, "invert")->get<bool>()) fail(where, ": Split with invert = true is not supported");
    const json* pattern = get(p, "pattern");
    if (pattern && get(*pattern, "Regex") && get(*pattern, "Regex")->is_string())
      splits.push_back(compile(get(*pattern, "Regex")->get<std::string>(), where));
    else if (pattern && get(*pattern, "String") && get(*pattern, "String")->is_string())
      splits.push_back(compile("\\Q" + get(*pattern, "String")->get<std::string>() + "\\E", where));
    else
      fail(where, ": Split needs a pattern {\"Regex\": ...} or {\"String\": ...}");
  } else if (type == "Digits") {
    const json* individual = get(p, "individual_digits");
    splits.push_back(compile(individual && individual->get<bool>() ? "\\p{N}" : "\\p{N}+", where));
  } else {
    fail(where, ": pre-tokenizer '", type, "' is not supported (supported: ByteLevel, Split, Digits, Sequence)");
  }
}

void ByteLevelBpeTokenizer::Impl::parse_post_processor(const json& p) {
  const std::string type = type_of(p, where + ": post_processor");
  if (type == "Sequence") {
    const json* steps = get(p, "processors");
    if (!steps || !steps->is_array()) fail(where, ": post_processor Sequence needs 'processors'");
    for (const json& s : *steps) parse_post_processor(s);
  } else if (type == "TemplateProcessing") {
    const json* single = get(p, "single");
    const json* specials = get(p, "special_tokens");
    if (!single || !single->is_array()) fail(where, ": TemplateProcessing needs 'single'");
    bool seen_sequence = false;
    for (const json& item : *single) {
      if (get(item, "Sequence")) {
        seen_sequence = true;
        continue;
      }
      const json* special = get(item, "SpecialToken");
      if (!special || !get(*special, "id")) fail(where, ": TemplateProcessing item ", item.dump(), " not understood");
      const std::string name = get(*special, "id")->get<std::string>();
      const json* entry = specials ? get(*specials, name.c_str()) : nullptr;
      if (!entry || !get(*entry, "ids"))
        fail(where, ": TemplateProcessing names special token '", name, "' without ids");
      for (const json& id : *get(*entry, "ids")) (seen_sequence ? suffix : prefix).push_back(id.get<Token>());
    }
  } else if (type != "ByteLevel") {  // ByteLevel only trims offsets
    fail(where, ": post-processor '", type, "' is not supported (supported: TemplateProcessing, ByteLevel, Sequence)");
  }
}

// model: type BPE, its options, vocab, merges (ranked in order) and unk_token.
void ByteLevelBpeTokenizer::Impl::parse_model(const json& model_json) {
  const json* model = &model_json;
  const std::string model_type = get(*model, "type") ? type_of(*model, where) : "BPE";
  if (model_type != "BPE") fail(where, ": model type '", model_type, "' is not supported (only BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (get(*model, key) && !get(*model, key)->get<std::string>().empty())
      fail(where, ": BPE '", key, "' is not supported");
  if (get(*model, "dropout") && get(*model, "dropout")->get<double>() != 0.0)
    fail(where, ": BPE dropout is not supported (encoding must be deterministic)");
  ignore_merges = get(*model, "ignore_merges") && get(*model, "ignore_merges")->get<bool>();
  byte_fallback = get(*model, "byte_fallback") && get(*model, "byte_fallback")->get<bool>();

  const json* v = get(*model, "vocab");
  if (!v || !v->is_object()) fail(where, ": model.vocab must be an object");
  for (const auto& item : v->items()) {
    if (!item.value().is_number_integer() || item.value().get<int64_t>() < 0 ||
        item.value().get<int64_t>() >= std::numeric_limits<Token>::max())
      fail(where, ": vocab entry '", item.key(), "' has id ", item.value().dump());
    const Token id = item.value().get<Token>();
    vocab[item.key()] = id;
    if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(id + 1);
    pieces[id] = item.key();
  }
  const json* merges = get(*model, "merges");
  if (merges) {
    if (!merges->is_array()) fail(where, ": model.merges must be an array");
    int32_t rank = 0;
    for (const json& m : *merges) {
      std::string key;
      if (m.is_string()) {
        key = m.get<std::string>();
        if (std::count(key.begin(), key.end(), ' ') != 1) fail(where, ": merge '", key, "' is not two symbols");
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        key = m[0].get<std::string>() + " " + m[1].get<std::string>();
      } else {
        fail(where, ": merge ", m.dump(), " is not \"a b\" or [\"a\", \"b\"]");
      }
      merge_rank.emplace(key, rank++);  // a repeated merge keeps its first (best) rank
    }
  }
  if (const json* u = get(*model, "unk_token")) {
    const auto it = vocab.find(u->get<std::string>());
    if (it == vocab.end()) fail(where, ": unk_token '", u->get<std::string>(), "' is not in the vocabulary");
    unk = it->second;
  }
}

// added_tokens: matched before BPE, longest content first.
void ByteLevelBpeTokenizer::Impl::parse_added_tokens(const json& added_tokens) {
  for (const json& a : added_tokens) {
    if (!get(a, "id") || !get(a, "content")) fail(where, ": added token ", a.dump(), " needs 'id' and 'content'");
    const Token id = get(a, "id")->get<Token>();
    const std::string content = get(a, "content")->get<std::string>();
    if (content.empty()) fail(where, ": added token ", id, " has empty content");
    added.push_back({content, id});
    added_content[id] = content;
    if (static_cast<size_t>(id) >= pieces.size()) pieces.resize(id + 1);
  }
  std::stable_sort(added.begin(), added.end(),
                   [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });
  for (size_t i = 0; i < added.size(); ++i)
    added_by_first_byte[static_cast<unsigned char>(added[i].content[0])].push_back(i);
}

// normalizer: one Unicode normal form (alone or as a one-step Sequence), through ICU.
void ByteLevelBpeTokenizer::Impl::parse_normalizer(const json& n) {
  std::string type = type_of(n, where + ": normalizer");
  if (type == "Sequence" && get(n, "normalizers") && get(n, "normalizers")->size() == 1)
    type = type_of((*get(n, "normalizers"))[0], where + ": normalizer");
  UErrorCode status = U_ZERO_ERROR;
  if (type == "NFC")
    normalizer = icu::Normalizer2::getNFCInstance(status);
  else if (type == "NFKC")
    normalizer = icu::Normalizer2::getNFKCInstance(status);
  else if (type == "NFD")
    normalizer = icu::Normalizer2::getNFDInstance(status);
  else if (type == "NFKD")
    normalizer = icu::Normalizer2::getNFKDInstance(status);
  else
    fail(where, ": normalizer '", type, "' is not supported (supported: NFC, NFKC, NFD, NFKD or none)");
  if (U_FAILURE(status)) fail(where, ": ICU has no ", type, " normalizer: ", u_errorName(status));
}

void ByteLevelBpeTokenizer::Impl::parse(const json& j) {
  if (!j.is_object()) fail(where, ": expected a JSON object");
  const json* model = get(j, "model");
  if (!model || !model->is_object()) fail(where, ": missing 'model'");
  parse_model(*model);
  if (const json* added_tokens = get(j, "added_tokens")) parse_added_tokens(*added_tokens);
  vocab_size = static_cast<int32_t>(pieces.size());

  if (const json* n = get(j, "normalizer")) parse_normalizer(*n);

  bool byte_level = false;
  if (const json* p = get(j, "pre_tokenizer")) parse_pre_tokenizer(*p, byte_level);
  if (!byte_level)
    fail(where,
         ": not a byte-level BPE (its pre_tokenizer has no ByteLevel step); SentencePiece-style "
         "tokenizers are read from tokenizer.model");
  if (const json* d = get(j, "decoder")) {
    const std::string type = type_of(*d, where + ": decoder");
    if (type != "ByteLevel")
      fail(where, ": decoder '", type, "' is not supported (byte-level BPE decodes with ByteLevel)");
  }
  if (const json* p = get(j, "post_processor")) parse_post_processor(*p);
  for (Token t : prefix)
    if (t < 0 || t >= vocab_size) fail(where, ": template token id ", t, " is outside the vocabulary");
  for (Token t : suffix)
    if (t < 0 || t >= vocab_size) fail(where, ": template token id ", t, " is outside the vocabulary");

  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) byte_of[alphabet[b]] = static_cast<uint8_t>(b);
}

Token ByteLevelBpeTokenizer::Impl::lookup_byte(uint8_t b) const {
  static const char* hex = "0123456789ABCDEF";
  const std::string name = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
  const auto it = vocab.find(name);
  return it == vocab.end() ? -1 : it->second;
}

void ByteLevelBpeTokenizer::Impl::encode_piece(const std::string& piece, std::vector<Token>& out) const {
  const auto& alphabet = byte_level_alphabet();
  std::vector<std::string> symbols;
  std::string whole;
  for (unsigned char b : piece) {
    symbols.push_back(alphabet[b]);
    whole += alphabet[b];
  }
  if (ignore_merges) {
    const auto it = vocab.find(whole);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // GPT-2 encoder.py: merge the lowest-ranked adjacent pair, every non-overlapping occurrence left to right.
  while (symbols.size() > 1) {
    int32_t best = std::numeric_limits<int32_t>::max();
    size_t at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const auto it = merge_rank.find(symbols[i] + " " + symbols[i + 1]);
      if (it != merge_rank.end() && it->second < best) {
        best = it->second;
        at = i;
      }
    }
    if (best == std::numeric_limits<int32_t>::max()) break;
    const std::string first = symbols[at], second = symbols[at + 1];
    std::vector<std::string> merged;
    for (size_t i = 0; i < symbols.size(); ++i) {
      if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
        merged.push_back(first + second);
        ++i;
      } else {
        merged.push_back(symbols[i]);
      }
    }
    symbols.swap(merged);
  }
  for (const std::string& s : symbols) {
    const auto it = vocab.find(s);
    if (it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    bool done = false;
    if (byte_fallback) {
      std::vector<Token> bytes;
      for (const std::string& c : utf8_chars(s)) {
        const auto b = byte_of.find(c);
        const Token t = b == byte_of.end() ? -1 : lookup_byte(b->second);
        if (t < 0) break;
        bytes.push_back(t);
      }
      if (bytes.size() == utf8_chars(s).size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        done = true;
      }
    }
    if (!done && unk >= 0) {
      out.push_back(unk);
      done = true;
    }
    if (!done) fail(where, ": cannot encode '", s, "': not in the vocabulary, no byte fallback, no unk_token");
  }
}

void ByteLevelBpeTokenizer::Impl::encode_segment(std::string segment, std::vector<Token>& out) const {
  if (segment.empty()) return;
  if (normalizer && valid_utf8(segment)) {  // invalid UTF-8 passes through as bytes
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString u = icu::UnicodeString::fromUTF8(segment);
    if (!normalizer->isNormalized(u, status)) {
      const icu::UnicodeString n = normalizer->normalize(u, status);
      if (U_FAILURE(status)) fail(where, ": normalization failed: ", u_errorName(status));
      segment.clear();
      n.toUTF8String(segment);
    }
  }
  std::vector<std::string> pieces = {segment};
  for (const SplitStep& step : splits) {
    std::vector<std::string> next;
    for (const std::string& p : pieces) split_isolated(step, p, next);
    pieces.swap(next);
  }
  for (const std::string& p : pieces) encode_piece(p, out);
}

namespace {

json read_json(const std::string& path) { return read_json_file(path, "cannot open tokenizer"); }

}  // namespace

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(const std::string& path) : ByteLevelBpeTokenizer(read_json(path), path) {}

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(const json& tokenizer_json, const std::string& where) {
  auto impl = std::make_shared<Impl>();
  impl->where = where;
  try {
    impl->parse(tokenizer_json);
  } catch (const json::exception& e) {  // a field of the wrong JSON type
    fail(where, ": malformed tokenizer: ", e.what());
  }
  impl_ = impl;
}

ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

int32_t ByteLevelBpeTokenizer::vocab_size() const { return impl_->vocab_size; }
const std::vector<Token>& ByteLevelBpeTokenizer::template_prefix() const { return impl_->prefix; }
const std::vector<Token>& ByteLevelBpeTokenizer::template_suffix() const { return impl_->suffix; }

std::vector<Token> ByteLevelBpeTokenizer::encode(const std::string& text) const {
  const Impl& m = *impl_;
  std::vector<Token> out = m.prefix;
  size_t start = 0;  // of the text not yet encoded
  for (size_t i = 0; i < text.size();) {
    const Impl::Added* hit = nullptr;
    for (size_t k : m.added_by_first_byte[static_cast<unsigned char>(text[i])])  // longest first
      if (text.compare(i, m.added[k].content.size(), m.added[k].content) == 0) {
        hit = &m.added[k];
        break;
      }
    if (!hit) {
      ++i;
      continue;
    }
    m.encode_segment(text.substr(start, i - start), out);
    out.push_back(hit->id);
    i += hit->content.size();
    start = i;
  }
  m.encode_segment(text.substr(start), out);
  out.insert(out.end(), m.suffix.begin(), m.suffix.end());
  return out;
}

std::string ByteLevelBpeTokenizer::decode(const std::vector<Token>& tokens) const {
  const Impl& m = *impl_;
  size_t begin = 0, end = tokens.size();
  if (!m.prefix.empty() && tokens.size() >= m.prefix.size() &&
      std::equal(m.prefix.begin(), m.prefix.end(), tokens.begin()))
    begin = m.prefix.size();
  if (!m.suffix.empty() && end - begin >= m.suffix.size() &&
      std::equal(m.suffix.begin(), m.suffix.end(), tokens.end() - m.suffix.size()))
    end -= m.suffix.size();
  std::string out;
  for (size_t i = begin; i < end; ++i) {
    const Token t = tokens[i];
    if (t < 0 || t >= m.vocab_size)
      fail("bpe tokenizer: token id ", t, " is outside the vocabulary [0, ", m.vocab_size, ")");
    if (const auto a = m.added_content.find(t); a != m.added_content.end()) {
      out += a->second;
      continue;
    }
    const std::string& piece = m.pieces[t];
    if (piece.empty()) fail("bpe tokenizer: token id ", t, " has no vocabulary entry");
    if (m.byte_fallback && piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && piece[5] == '>' &&
        std::isxdigit(static_cast<unsigned char>(piece[3])) && std::isxdigit(static_cast<unsigned char>(piece[4]))) {
      out += static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16));
      continue;
    }
    for (const std::string& c : utf8_chars(piece)) {
      const auto b = m.byte_of.find(c);
      if (b != m.byte_of.end())
        out += static_cast<char>(b->second);
      else
        out += c;  // not a byte-level character: kept as written
    }
  }
  return out;
}

json byte_tokenizer_json() {
  json vocab = json::object();
  const auto& alphabet = byte_level_alphabet();
  for (int b = 0; b < 256; ++b) vocab[alphabet[b]] = b;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", json::array()}}}};
}

}  // namespace specula
