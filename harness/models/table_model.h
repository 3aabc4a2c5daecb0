// Table models: logits that depend only on the last `order` tokens, read from a table. Their laws are
// known in closed form, which makes them the workhorse of the exact-law tests (tests/TESTING.md "Table models").
//   bigram:PATH   a text file of V lines with V logits each; line t holds the next-token logits when the
//                 last token is t.
// Order-2 tables (indexed by the last two tokens) are built in code for tests that must see bugs which
// corrupt tokens further back.
#pragma once

#include <string>
#include <vector>

#include "harness/models/language_model.h"

namespace specula {

class TableModel : public LanguageModel {
 public:
  // logits: [V^order, V]; row index = sum over the last `order` tokens t_{-order..-1} of t * V^(age).
  TableModel(int32_t order, int32_t vocab_size, std::vector<float> logits, std::string description);

  int32_t vocab_size() const override { return vocab_size_; }
  int32_t order() const { return order_; }
  std::string description() const override { return description_; }
  std::unique_ptr<ModelSession> new_session() const override;

  // Logits row for the position after `context` (which must hold at least `order` tokens).
  const float* row_after(const std::vector<Token>& context) const;
  const float* row_after(const std::vector<Token>& context, const std::vector<Token>& suffix) const;

 private:
  int32_t order_;
  int32_t vocab_size_;
  std::vector<float> logits_;
  std::string description_;
};

// Reads a bigram table; errors name the file, line and column (ragged rows, non-numbers, NaN, +inf).
TableModel load_bigram_model(const std::string& path);

}  // namespace specula
