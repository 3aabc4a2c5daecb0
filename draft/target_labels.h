// The target's own choices over a corpus, the training events of a distilled n-gram drafter
// (`specula train-ngram --distill-from MODEL`). A corpus n-gram predicts the *text*; a drafter is accepted
// when it predicts the *target*: at T = 0 the target's argmax, which differs from the next byte of the text
// wherever the target is wrong or the text is surprising. Training on (context from the text, the target's
// choice after it) pairs fits the n-gram to the law it is verified against, as distillation fits a draft
// model (Zhou et al. 2024, "DistillSpec", §3: train the drafter on the target's outputs, not on data).
//
// Each position i >= 1 is labelled with the target's choice after tokens[i - c .. i - 1], where the context
// c is as long as the target's window allows: the corpus is cut into windows of the target's positions that
// overlap by `overlap` tokens, and a window labels only the positions after its overlap (the first window
// labels all of its own), so every label but the first few has at least `overlap` tokens of context.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "harness/models/language_model.h"

namespace specula {

struct TargetLabelOptions {
  // 0: the argmax of the raw logits (lowest id on ties), the token greedy decoding emits when no bias, penalty
  // or mask changes the row. > 0: a draw from softmax(logits / temperature), keyed by (seed, position) so the
  // labels do not depend on threads.
  double temperature = 0.0;
  uint64_t seed = 0;
  int32_t window = 0;    // positions per target call; 0 = the target's max_positions() (256 when unbounded)
  int32_t overlap = 64;  // context carried into each window after the first
  int32_t threads = 1;   // windows run in parallel, one session each
  // Called with (labelled positions, all positions) after each window, from one thread at a time.
  std::function<void(int64_t, int64_t)> progress;
  // "" = none. Otherwise each finished window's labels are appended to this file as they are made, and a run
  // given a file that already holds some (the same tokens, target and options, checked by its header line)
  // labels only the windows it lacks: an interrupted run resumes where it stopped. A record cut short by the
  // interruption is dropped. The caller removes the file once the labels are used.
  std::string checkpoint;
  // Called with (windows already in the checkpoint, all windows) before any target call of a resumed run.
  std::function<void(int64_t, int64_t)> resumed;
};

// labels[i] for every position of `tokens`: labels[0] = tokens[0] (there is no context to predict it from),
// labels[i] the target's choice after the context ending at i - 1. Throws Error when the window is more than
// the target holds or not more than the overlap, the temperature is negative or not finite, or a token is
// outside the target's vocabulary; an error of the target's own is passed on.
std::vector<Token> target_labels(const LanguageModel& target, const std::vector<Token>& tokens,
                                 const TargetLabelOptions& options);

}  // namespace specula
