#include "harness/models/table_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "harness/io/input_file.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

class TableSession : public ModelSession {
 public:
  explicit TableSession(const TableModel& model) : model_(model) {}
  void tree_logits(const std::vector<Token>& context, const TokenTree& tree, float* out) override {
    const int32_t V = model_.vocab_size();
    std::memcpy(out, model_.row_after(context), sizeof(float) * V);
    for (int32_t n = 0; n < tree.size(); ++n)
      std::memcpy(out + static_cast<size_t>(n + 1) * V, model_.row_after(context, tree.path(n)), sizeof(float) * V);
  }

 private:
  const TableModel& model_;
};

}  // namespace

TableModel::TableModel(int32_t order, int32_t vocab_size, std::vector<float> logits, std::string description)
    : order_(order), vocab_size_(vocab_size), logits_(std::move(logits)), description_(std::move(description)) {
  size_t rows = 1;
  for (int32_t i = 0; i < order_; ++i) rows *= static_cast<size_t>(vocab_size_);
  if (logits_.size() != rows * vocab_size_)
    fail(description_, ": table of order ", order_, " over ", vocab_size_, " tokens needs ", rows * vocab_size_,
         " logits, got ", logits_.size());
}

std::unique_ptr<ModelSession> TableModel::new_session() const { return std::make_unique<TableSession>(*this); }

const float* TableModel::row_after(const std::vector<Token>& context) const { return row_after(context, {}); }

const float* TableModel::row_after(const std::vector<Token>& context, const std::vector<Token>& suffix) const {
  const size_t total = context.size() + suffix.size();
  if (total < static_cast<size_t>(order_))
    fail(description_, ": needs at least ", order_, " context token(s) (give --prompt-tokens)");
  size_t row = 0;
  for (int32_t age = order_; age >= 1; --age) {
    const size_t pos = total - static_cast<size_t>(age);
    const Token t = pos < context.size() ? context[pos] : suffix[pos - context.size()];
    if (t < 0 || t >= vocab_size_)
      fail(description_, ": token id ", t, " is outside the vocabulary [0, ", vocab_size_, ")");
    row = row * static_cast<size_t>(vocab_size_) + static_cast<size_t>(t);
  }
  return logits_.data() + row * static_cast<size_t>(vocab_size_);
}

TableModel load_bigram_model(const std::string& path) {
  std::ifstream in = open_input_file(path, "bigram model");
  std::vector<float> logits;
  std::string line;
  int line_no = 0, width = -1, rows = 0;
  while (std::getline(in, line)) {
    ++line_no;
    // Commas separate as spaces do, but an empty item between two (`1,,2`) is an error, as in a logits file.
    for (size_t comma = line.find(','); comma != std::string::npos; comma = line.find(',', comma + 1)) {
      const size_t next = line.find_first_not_of(" \t\r", comma + 1);
      const size_t before = comma == 0 ? std::string::npos : line.find_last_not_of(" \t\r", comma - 1);
      if (next == std::string::npos || line[next] == ',' || before == std::string::npos)
        fail(path, ":", line_no, ": an empty item beside the comma at character ", comma + 1);
    }
    for (char& c : line)
      if (c == ',') c = ' ';
    std::istringstream fields(line);
    std::string item;
    int column = 0;
    while (fields >> item) {
      ++column;
      char* end = nullptr;
      const double v = std::strtod(item.c_str(), &end);
      if (end != item.c_str() + item.size())  // a NUL byte inside the item ends strtod's reading early too
        fail(path, ":", line_no, ": column ", column, ": '", item, "' is not a number");
      if (std::isnan(v)) fail(path, ":", line_no, ": column ", column, ": NaN logit");
      // Stored as float32: a value past its range would become +inf, which no sampler can take (-inf, a token never
      // drawn, may be written as such or as a number below float32's range).
      if (v == INFINITY || static_cast<float>(v) == INFINITY)
        fail(path, ":", line_no, ": column ", column, ": '", item, "' is +inf or too large for a 32-bit float");
      logits.push_back(static_cast<float>(v));
    }
    if (column == 0) continue;  // blank line
    if (width < 0) width = column;
    if (column != width)
      fail(path, ":", line_no, ": row has ", column, " logits but the first row has ", width, " (ragged table)");
    if (std::all_of(logits.end() - column, logits.end(), [](float x) { return x == -INFINITY; }))
      fail(path, ":", line_no, ": every logit of the row is -inf (no token could follow its token)");
    ++rows;
  }
  if (rows == 0) fail(path, ": empty bigram model");
  if (rows != width) fail(path, ": a bigram table needs V rows of V logits, got ", rows, " rows of ", width);
  return TableModel(1, width, std::move(logits), "bigram:" + path);
}

}  // namespace specula
