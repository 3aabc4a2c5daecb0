// What a row's processed distribution may depend on besides its logits: the prompt, the tokens generated
// so far (for a verifier row: committed output followed by the draft prefix of that row's path), and the
// state of stateful processors (mirostat's mu). Penalties, bad words, min-tokens and mirostat read it.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

struct TokenHistory {
  std::vector<Token> prompt;
  std::vector<Token> output;
  // Mirostat v2 target surprise mu; NaN means "not started" (mu starts at 2 * tau).
  double mirostat_mu = std::nan("");
  // State of the constraint automaton after `output` (TokenConstraint::kInitial = 0 before any output).
  int32_t constraint_state = 0;

  // The history after one more generated token (used to walk a draft path).
  TokenHistory extended(Token t) const {
    TokenHistory h = *this;
    h.output.push_back(t);
    return h;
  }
};

}  // namespace specula
