#include "harness/models/language_model.h"

#include <algorithm>
#include <utility>

#include "kernels/shared/error.h"

namespace specula {

void check_rows_asked(const TreeLogitsCall& call, const std::string& model) {
  if (call.first_row < 0 || call.first_row > call.tree->size())
    fail(model, ": rows asked from ", call.first_row, " of a call of ", call.tree->size() + 1, " rows");
}

std::vector<Token> with_placeholders(std::vector<Token> ids) {
  for (Token& t : ids) t = std::max<Token>(t, 0);
  return ids;
}

TokenTree with_placeholders(TokenTree tree) {
  tree.tokens = with_placeholders(std::move(tree.tokens));
  return tree;
}

void LanguageModel::batch_tree_logits(const std::vector<TreeLogitsCall>& calls) const {
  for (const TreeLogitsCall& c : calls) {
    check_rows_asked(c, description());
    if (c.device_tokens) fail(description(), ": token ids given in device memory, which the model does not read");
    if (c.out_on_gpu) fail(description(), ": logits asked in GPU memory, but the model does not compute on a GPU");
    if (c.first_row == 0) {
      c.session->tree_logits(*c.context, *c.tree, c.out);
      continue;
    }
    // The session writes every row: the ones asked for are its last.
    const size_t V = static_cast<size_t>(vocab_size());
    std::vector<float> rows(static_cast<size_t>(c.tree->size() + 1) * V);
    c.session->tree_logits(*c.context, *c.tree, rows.data());
    std::copy(rows.begin() + static_cast<std::ptrdiff_t>(c.first_row * V), rows.end(), c.out);
  }
}

}  // namespace specula
