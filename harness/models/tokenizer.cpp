#include "harness/models/tokenizer.h"

namespace specula {

std::string token_id_escape(Token token) { return "<|id:" + std::to_string(token) + "|>"; }

std::string decode_for_output(const Tokenizer& tokenizer, const std::vector<Token>& tokens) {
  const int32_t V = tokenizer.vocab_size();
  std::string text;
  std::vector<Token> run;
  for (Token t : tokens) {
    if (t >= 0 && t < V) {
      run.push_back(t);
      continue;
    }
    if (!run.empty()) text += tokenizer.decode(run);
    run.clear();
    text += token_id_escape(t);
  }
  if (!run.empty()) text += tokenizer.decode(run);
  return text;
}

std::vector<std::string> token_strings_for_constraints(const Tokenizer& tokenizer, int32_t vocab_size) {
  std::vector<std::string> strings(vocab_size);
  for (Token t = 0; t < vocab_size && t < tokenizer.vocab_size(); ++t) strings[t] = tokenizer.decode({t});
  return strings;
}

}  // namespace specula
