// ByteLevelBpeTokenizer's encode and decode (bpe_tokenizer.h; the tokenizer.json is read in
// bpe_tokenizer_json.cpp): normalization, the pre-tokenizer's splits, the BPE merges and byte fallback.
#include "harness/models/hf/bpe_tokenizer.h"

#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "harness/models/hf/bpe_tokenizer_impl.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

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

}  // namespace specula
