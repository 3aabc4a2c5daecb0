// The hook through which a drafter reads the target's features f_t (the final hidden state after the final
// norm, i.e. the LM head's input; Medusa's h_t and EAGLE's f_t) for the committed context. Torch-free.
//
// Two sources (draft/heads/head_drafters.cpp). When the generation loop's target runs the heads' own module, the
// features come from its session (ModelSession::context_features): the verification forward already
// computed them for the accepted path, so drafting costs no target forward. Otherwise (the --target is
// another copy of the checkpoint, or a drafter used outside the loop) each drafter keeps its own session of
// its target and runs the committed tokens it has not seen yet, reusing its KV cache: one extra target
// forward per proposal over the tokens the last step committed, counted in TargetFeatureStats and in the
// draft time.
#pragma once

#include <cstdint>
#include <vector>

#include "verify/sampling/sampling_params.h"

namespace specula {

struct TargetFeatureStats {
  int64_t forwards = 0;  // target forwards run to obtain features
  int64_t rows = 0;      // token rows in those forwards
};

class TargetFeatureSource {
 public:
  virtual ~TargetFeatureSource() = default;
  virtual int32_t hidden_size() const = 0;
  // The features of positions [0, n) of `tokens` (f_t after tokens[0..t]): row-major [n, hidden_size()],
  // valid until the next call. n <= tokens.size().
  virtual const float* features(const std::vector<Token>& tokens, int64_t n) = 0;
  virtual const TargetFeatureStats& stats() const = 0;
};

}  // namespace specula
