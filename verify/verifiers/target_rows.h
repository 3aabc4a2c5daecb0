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

// The history of a row whose drafted path past `committed` is not on the host (its ids still in a device's memory, at
// indices `path` of the array the device call names, oldest first): placeholders with TokenHistory::pending_ids, so
// that the device's sampler reads the path's length (min_tokens) here and its ids' counts (penalties) there.
TokenHistory pending_history(const SamplerPipeline& pipeline, const TokenHistory& committed, std::vector<int32_t> path);

}  // namespace specula
