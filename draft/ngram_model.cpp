#include "draft/ngram_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "harness/io/input_file.h"
#include "harness/io/output_file.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

constexpr int32_t kMaxOrder = 16;
constexpr int32_t kMaxVocab = 1 << 30;
constexpr const char* kMagic = "specula-ngram";
constexpr int kVersion = 1;

// n-grams and histories are hashed as their token ids packed into bytes.
std::string pack(const Token* tokens, size_t n) {
  return std::string(reinterpret_cast<const char*>(tokens), n * sizeof(Token));
}

std::vector<Token> unpack(const std::string& key) {
  std::vector<Token> out(key.size() / sizeof(Token));
  std::memcpy(out.data(), key.data(), key.size());
  return out;
}

// Chen & Goodman 1998, eq. (26): discounts from the count-of-counts n1..n4 of one order; a discount that is
// undefined or not in (0, k) falls back to KenLM's defaults (0.5, 1.0, 1.5).
NgramModel::Discounts estimate_discounts(const std::unordered_map<std::string, int64_t>& counts) {
  double n[5] = {0, 0, 0, 0, 0};
  for (const auto& kv : counts)
    if (kv.second <= 4) n[kv.second] += 1.0;
  NgramModel::Discounts d;
  const double y = n[1] / (n[1] + 2.0 * n[2]);
  const double estimate[3] = {1.0 - 2.0 * y * n[2] / n[1], 2.0 - 3.0 * y * n[3] / n[2], 3.0 - 4.0 * y * n[4] / n[3]};
  const double fallback[3] = {0.5, 1.0, 1.5};
  double* out[3] = {&d.d1, &d.d2, &d.d3};
  for (int k = 0; k < 3; ++k) {
    const bool ok = std::isfinite(estimate[k]) && estimate[k] > 0.0 && estimate[k] < k + 1.0;
    *out[k] = ok ? estimate[k] : fallback[k];
    if (!ok) d.fallback = true;
  }
  return d;
}

// Reads the next non-empty line, counting lines; false at end of file.
bool next_line(std::istream& in, std::string& line, int& line_no) {
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) return true;
  }
  return false;
}

// Parses a whole non-negative integer field; false on anything else.
bool parse_count(const std::string& text, int64_t& value) {
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) return false;
  value = std::stoll(text);
  return true;
}

std::vector<std::string> fields_of(const std::string& line) {
  std::istringstream ss(line);
  std::vector<std::string> out;
  std::string f;
  while (ss >> f) out.push_back(f);
  return out;
}

}  // namespace

NgramModel::NgramModel(int32_t order, int32_t vocab_size) : order_(order), vocab_size_(vocab_size), levels_(order) {
  if (order < 1 || order > kMaxOrder) fail("n-gram model: order must be in 1..", kMaxOrder, ", got ", order);
  if (vocab_size < 1 || vocab_size > kMaxVocab)
    fail("n-gram model: vocabulary size must be in 1..", kMaxVocab, ", got ", vocab_size);
}

NgramModel NgramModel::train(const std::vector<Token>& tokens, int32_t order, int32_t vocab_size) {
  return train(tokens, tokens, order, vocab_size);
}

NgramModel NgramModel::train(const std::vector<Token>& tokens, const std::vector<Token>& labels, int32_t order,
                             int32_t vocab_size) {
  NgramModel m(order, vocab_size);
  if (labels.size() != tokens.size())
    fail("n-gram training: ", labels.size(), " labels for ", tokens.size(), " tokens");
  for (const std::vector<Token>* seq : {&tokens, &labels})
    for (size_t i = 0; i < seq->size(); ++i)
      if ((*seq)[i] < 0 || (*seq)[i] >= vocab_size)
        fail("n-gram training: ", seq == &tokens ? "token " : "label ", i, " has id ", (*seq)[i],
             ", outside the vocabulary [0, ", vocab_size, ")");
  const size_t T = tokens.size();
  const size_t N = static_cast<size_t>(order);
  // The n-gram ending at position i: the n - 1 tokens before i, then the label of i.
  std::vector<Token> gram(N);
  auto ending_at = [&](size_t i, size_t n) {
    std::copy(tokens.begin() + (i + 1 - n), tokens.begin() + i, gram.begin());
    gram[n - 1] = labels[i];
    return pack(gram.data(), n);
  };
  // Highest order: raw counts.
  for (size_t i = N - 1; i < T; ++i) ++m.levels_[N - 1].counts[ending_at(i, N)];
  // Lower orders: continuation counts N1+(. g), the distinct left contexts of g (the corpus start is one).
  for (size_t n = 1; n < N; ++n) {
    std::unordered_set<std::string> extended;  // distinct (n + 1)-grams x g
    for (size_t i = n; i < T; ++i) extended.insert(ending_at(i, n + 1));
    auto& counts = m.levels_[n - 1].counts;
    for (const std::string& xg : extended) ++counts[xg.substr(sizeof(Token))];
    if (T >= n) ++counts[ending_at(n - 1, n)];
  }
  m.finalize();
  return m;
}

void NgramModel::finalize() {
  for (int32_t n = 1; n <= order_; ++n) {
    Level& level = levels_[n - 1];
    level.contexts.clear();
    for (const auto& [key, c] : level.counts) {
      Context& ctx = level.contexts[key.substr(0, key.size() - sizeof(Token))];
      Token w;
      std::memcpy(&w, key.data() + key.size() - sizeof(Token), sizeof(Token));
      ctx.total += c;
      (c == 1 ? ctx.n1 : c == 2 ? ctx.n2 : ctx.n3plus) += 1;
      ctx.next.emplace_back(w, c);
    }
    // Deterministic order of continuations (float sums do not depend on hash order).
    for (auto& kv : level.contexts) std::sort(kv.second.next.begin(), kv.second.next.end());
    level.discounts = estimate_discounts(level.counts);
  }
}

int64_t NgramModel::count(const std::vector<Token>& ngram) const {
  if (ngram.empty() || static_cast<int32_t>(ngram.size()) > order_) return 0;
  const auto& counts = levels_[ngram.size() - 1].counts;
  const auto it = counts.find(pack(ngram.data(), ngram.size()));
  return it == counts.end() ? 0 : it->second;
}

void NgramModel::distribution(const Token* history, size_t length, double* out) const {
  std::fill(out, out + vocab_size_, 1.0 / vocab_size_);  // P_0: uniform
  const size_t top = std::min(static_cast<size_t>(order_), length + 1);
  for (size_t n = 1; n <= top; ++n) {
    const Level& level = levels_[n - 1];
    const auto it = level.contexts.find(pack(history + (length - (n - 1)), n - 1));
    if (it == level.contexts.end()) continue;  // unseen history: P_n = P_{n-1}
    const Context& ctx = it->second;
    const Discounts& d = level.discounts;
    const double total = static_cast<double>(ctx.total);
    const double gamma = (d.d1 * ctx.n1 + d.d2 * ctx.n2 + d.d3 * ctx.n3plus) / total;
    for (int32_t w = 0; w < vocab_size_; ++w) out[w] *= gamma;
    for (const auto& [w, c] : ctx.next) out[w] += std::max(static_cast<double>(c) - d(c), 0.0) / total;
  }
}

std::vector<double> NgramModel::distribution(const std::vector<Token>& history) const {
  std::vector<double> out(vocab_size_);
  distribution(history.data(), history.size(), out.data());
  return out;
}

double NgramModel::probability(Token w, const std::vector<Token>& history) const {
  if (w < 0 || w >= vocab_size_)
    fail("n-gram model: token id ", w, " is outside the vocabulary [0, ", vocab_size_, ")");
  return distribution(history)[w];
}

void NgramModel::save(const std::string& path) const {
  std::ostringstream out;
  out << kMagic << ' ' << kVersion << "\norder " << order_ << "\nvocab " << vocab_size_ << '\n';
  for (int32_t n = 1; n <= order_; ++n) out << "ngrams " << n << ' ' << levels_[n - 1].counts.size() << '\n';
  for (int32_t n = 1; n <= order_; ++n) {
    out << n << "-grams\n";
    std::vector<std::pair<std::vector<Token>, int64_t>> rows;
    rows.reserve(levels_[n - 1].counts.size());
    for (const auto& [key, c] : levels_[n - 1].counts) rows.emplace_back(unpack(key), c);
    std::sort(rows.begin(), rows.end());
    for (const auto& [ngram, c] : rows) {
      out << c;
      for (Token t : ngram) out << ' ' << t;
      out << '\n';
    }
  }
  out << "end\n";
  write_output_file(path, out.str(), "the n-gram model");
}

namespace {

// The header: magic and version, order, vocabulary. Leaves `in` at the n-gram counts.
struct NgramHeader {
  int32_t order;
  int32_t vocab;
};

NgramHeader read_header(std::istream& in, const std::string& path, std::string& line, int& line_no) {
  auto expect_line = [&](const char* what) {
    if (!next_line(in, line, line_no)) fail(path, ": truncated n-gram model file: ends before ", what);
    return fields_of(line);
  };
  auto header_value = [&](const char* key, int64_t lo, int64_t hi) {
    const std::vector<std::string> f = expect_line(key);
    int64_t v = 0;
    if (f.size() != 2 || f[0] != key || !parse_count(f[1], v) || v < lo || v > hi)
      fail(path, ":", line_no, ": expected '", key, " <", lo, "..", hi, ">', got '", line, "'");
    return v;
  };
  const std::vector<std::string> f = expect_line("the header");
  if (f.size() != 2 || f[0] != kMagic)
    fail(path, ":", line_no, ": not a Specula n-gram model (expected '", kMagic, " ", kVersion, "', got '", line, "')");
  if (f[1] != std::to_string(kVersion))
    fail(path, ":", line_no, ": unsupported n-gram model format version '", f[1], "' (this build reads ", kVersion,
         ")");
  const int32_t order = static_cast<int32_t>(header_value("order", 1, kMaxOrder));
  const int32_t vocab = static_cast<int32_t>(header_value("vocab", 1, kMaxVocab));
  return {order, vocab};
}

}  // namespace

int32_t NgramModel::read_vocab_size(const std::string& path) {
  std::ifstream in = open_input_file(path, "n-gram model");
  std::string line;
  int line_no = 0;
  return read_header(in, path, line, line_no).vocab;
}

NgramModel NgramModel::load(const std::string& path) {
  std::ifstream in = open_input_file(path, "n-gram model");
  std::string line;
  int line_no = 0;
  auto expect_line = [&](const char* what) {
    if (!next_line(in, line, line_no)) fail(path, ": truncated n-gram model file: ends before ", what);
    return fields_of(line);
  };
  const NgramHeader header = read_header(in, path, line, line_no);
  const int32_t order = header.order, vocab = header.vocab;
  std::vector<std::string> f;
  NgramModel m(order, vocab);
  std::vector<int64_t> expected(order);
  for (int32_t n = 1; n <= order; ++n) {
    f = expect_line("the n-gram counts");
    int64_t k = 0, c = 0;
    if (f.size() != 3 || f[0] != "ngrams" || !parse_count(f[1], k) || k != n || !parse_count(f[2], c))
      fail(path, ":", line_no, ": expected 'ngrams ", n, " <count>', got '", line, "'");
    expected[n - 1] = c;
  }
  std::vector<Token> ngram;
  for (int32_t n = 1; n <= order; ++n) {
    f = expect_line("a section header");
    if (f.size() != 1 || f[0] != std::to_string(n) + "-grams")
      fail(path, ":", line_no, ": expected '", n, "-grams', got '", line, "'");
    auto& counts = m.levels_[n - 1].counts;
    counts.reserve(static_cast<size_t>(std::min<int64_t>(expected[n - 1], 1 << 20)));
    // A context's total is a sum of counts: bounded here, so that no sum the model forms can wrap (a wrapped total
    // made probabilities of NaN, or summing past 1, with no word of the file).
    constexpr int64_t kMaxCountSum = int64_t{1} << 62;
    int64_t level_sum = 0;
    for (int64_t r = 0; r < expected[n - 1]; ++r) {
      if (!next_line(in, line, line_no))
        fail(path, ": truncated n-gram model file: ", n, "-grams section has ", r, " of ", expected[n - 1], " records");
      f = fields_of(line);
      if (static_cast<int32_t>(f.size()) != n + 1)
        fail(path, ":", line_no, ": a ", n, "-gram record needs a count and ", n, " token id(s), got '", line, "'");
      int64_t c = 0;
      if (!parse_count(f[0], c) || c < 1) fail(path, ":", line_no, ": count '", f[0], "' is not an integer >= 1");
      if (c > kMaxCountSum - level_sum)
        fail(path, ":", line_no, ": the ", n, "-gram counts sum past 2^62 (no corpus has that many tokens)");
      level_sum += c;
      ngram.assign(n, 0);
      for (int32_t i = 0; i < n; ++i) {
        int64_t t = 0;
        if (!parse_count(f[i + 1], t) || t >= vocab)
          fail(path, ":", line_no, ": token id '", f[i + 1], "' is outside the vocabulary [0, ", vocab, ")");
        ngram[i] = static_cast<Token>(t);
      }
      if (!counts.emplace(pack(ngram.data(), n), c).second)
        fail(path, ":", line_no, ": duplicate ", n, "-gram '", line, "'");
    }
  }
  f = expect_line("'end'");
  if (f.size() != 1 || f[0] != "end") fail(path, ":", line_no, ": expected 'end', got '", line, "'");
  if (next_line(in, line, line_no)) fail(path, ":", line_no, ": unexpected data after 'end': '", line, "'");
  m.finalize();
  return m;
}

}  // namespace specula
