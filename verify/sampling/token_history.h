// What a row's processed distribution may depend on besides its logits: the prompt, the tokens generated
// so far (for a verifier row: committed output followed by the draft prefix of that row's path), and the
// state of stateful processors (mirostat's mu). Penalties, bad words, min-tokens and mirostat read it.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/shared/error.h"
#include "verify/sampling/sampling_params.h"

namespace specula {

struct PenaltyCounts;  // verify/sampling/penalty_counts.h

struct TokenHistory {
  std::vector<Token> prompt;
  std::vector<Token> output;
  // Mirostat v2 target surprise mu; NaN means "not started" (mu starts at 2 * tau).
  double mirostat_mu = std::nan("");
  // State of the constraint automaton after `output` (TokenConstraint::kInitial = 0 before any output).
  int32_t constraint_state = 0;
  // A draft's tokens still in a device's memory: the last pending_ids.size() tokens of `output` are placeholders for
  // the ids at these indices of an array the device call that takes the history names (BatchVerifier's plans and
  // kept proposals, verify/device/batch_verifier.h), whose sampler adds them to the penalty counts there. The CPU's
  // pipeline refuses such a history; empty everywhere else.
  std::vector<int32_t> pending_ids{};
  // Output tokens left out before `output` (SamplerPipeline::trimmed): a row reads only the output's length, its last
  // few tokens (bad words, and the tokens `counts` has not counted) and the counts, so a draft or verifier row holds
  // that tail instead of a copy of the whole output. 0 in a whole history.
  int64_t output_dropped = 0;
  // The penalties' counts of the prompt and of the output's first tokens (SamplerPipeline::keep_counts), shared by the
  // rows a step trims from this history, and kept up by advance where this history alone holds them. Null: the
  // penalties walk the history.
  std::shared_ptr<PenaltyCounts> counts{};

  // Tokens generated so far, held or left out (min_tokens and the constraint's length limit read it).
  int64_t produced() const { return output_dropped + static_cast<int64_t>(output.size()); }

  // One more generated token, in place.
  void extend(Token t) {
    // A token after placeholders would break their rule (the last pending_ids.size() tokens).
    if (!pending_ids.empty()) fail("history: a token added after ids still in device memory");
    output.push_back(t);
  }

  // The history after one more generated token (used to walk a draft path).
  TokenHistory extended(Token t) const {
    TokenHistory h = *this;
    h.extend(t);
    return h;
  }
};

}  // namespace specula
