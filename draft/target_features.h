// The hook through which a drafter reads the target's features f_t (the final hidden state after the final
// norm, i.e. the LM head's input; Medusa's h_t and EAGLE's f_t) for the committed context. Torch-free.
//
// Today's implementation (draft/head_drafters.cpp) is the simplest correct one: each drafter keeps its own
// session of the target and runs the committed tokens it has not seen yet, reusing its KV cache, so one
// propose() costs an extra target forward over the tokens committed by the last step (accepted + 1). It is
// counted (TargetFeatureStats) and its time is part of the draft time. The verification forward already
// computes these features for the accepted path, so a source backed by the Generator's target session
// (passed in the DraftRequest) can remove that forward without touching the drafters.
#pragma once

#include <cstdint>
#include <vector>

#include "verify/sampling_params.h"

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
