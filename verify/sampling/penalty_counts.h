// The ids a history's penalties read, counted once and kept as its output grows (SamplerPipeline::keep_counts and
// advance): a penalised row reads these counts and its own few uncounted tokens (its draft path) instead of walking its
// whole history, so that neither a step's rows nor a generation's steps cost more as the output grows.
#pragma once

#include <cstdint>
#include <vector>

#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula {

struct PenaltyCounts {
  int32_t vocab_size = 0;
  int64_t prompt_size = 0;         // the whole prompt is counted
  int64_t output_counted = 0;      // the output's first output_counted tokens are counted
  std::vector<int32_t> in_prompt;  // [V] occurrences of each id in the prompt
  std::vector<int32_t> in_output;  // [V] occurrences of each id among the counted output tokens
  std::vector<Token> seen;         // the distinct ids of the prompt and the counted output, in first-seen order
  std::vector<Token> produced;     // the distinct ids of the counted output, in first-seen order

  // The counts of a whole history (no token left out, none pending); an id outside the vocabulary is refused by name.
  static PenaltyCounts of(const TokenHistory& history, int32_t vocab_size);
  // Counts the held output tokens of `history` that are not counted yet (the history these counts were made for).
  void catch_up(const TokenHistory& history);
};

// How many of the output's last tokens `history.counts` has not counted (a row's draft path, or tokens added while the
// counts were shared); they are held. Refused by name where counts and history disagree.
size_t uncounted_tokens(const TokenHistory& history);

// The checks every reader of a row's penalties makes before it reads them (the pipeline's check_history and the
// device's SamplerBatch): a history that left output tokens out needs counts where `penalised`, and counts must be of
// `vocab_size` and of the history's prompt (its length; a held prompt only) and output. Returns how many of the held
// output tokens are not counted: all of them without counts.
size_t check_penalty_counts(const TokenHistory& history, bool penalised, int32_t vocab_size);

}  // namespace specula
