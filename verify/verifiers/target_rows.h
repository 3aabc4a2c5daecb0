// Processed distributions for every row of a draft tree: row 0 with the committed history, row j + 1 with
// the history extended by the path to node j (penalties, bad words, min-tokens and mirostat's mu all see
// the draft prefix, verify/ALGORITHMS.md §2). The same function serves target rows, bonus rows and the
// drafter's own rows, so plain decoding and every verifier use one PROCESS.
#pragma once

#include <vector>

#include "verify/sampling/sampler_pipeline.h"
#include "verify/verifiers/token_tree.h"

namespace specula {

// logits [tree.size() + 1, V] -> probs [tree.size() + 1, V].
void process_tree_rows(const SamplerPipeline& pipeline, const float* logits, const TokenHistory& committed,
                       const TokenTree& tree, float* probs);

// The history of row `row` (0 = committed; j + 1 = committed + path to node j), given the processed rows
// of its ancestors (for mirostat's mu).
TokenHistory row_history(const SamplerPipeline& pipeline, const TokenHistory& committed, const TokenTree& tree,
                         const float* probs, int32_t row);

// The history of a row `path_length` drafted tokens past `committed` whose tokens are not on the host (still in a
// device's memory): placeholders, for a pipeline that reads the path's length alone (min_tokens), never its tokens
// (SamplingParams::penalised() false).
TokenHistory path_length_history(const TokenHistory& committed, int32_t path_length);

}  // namespace specula
