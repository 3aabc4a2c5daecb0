// How a run decodes, read once from either source (`generate`'s options, or one setting of an experiment):
// the method, its draft shape, the defaults, and the rules that follow from the method. Errors name the
// parameter; the caller names the source (the flag, or file:line: key).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "harness/generation/generator.h"
#include "verify/sampling/sampling_params.h"
#include "verify/verifiers/token_tree.h"
#include "verify/verifiers/verification.h"

namespace specula {

struct DecodingMethod {
  std::string name = "ar";             // ar, beam, or a verification method's name (verify_methods.h)
  std::optional<VerifyMethod> verify;  // the speculative methods
  bool beam = false;
  bool speculative() const { return verify.has_value(); }
  bool verifies_trees() const;  // a draft tree's shape (--tree, draft.tree) applies
};

// "ar", "beam" or a verification method; throws Error "unknown method 'x' (known: ...)".
DecodingMethod parse_decoding_method(const std::string& text);
// Every name parse_decoding_method takes: "ar", the verification methods' table (lossy ones marked "(lossy)"
// when `mark_lossy`), "beam", joined by `separator`.
std::string decoding_method_names(const std::string& separator, bool mark_lossy = false);

// A speculative run's draft shape as given: K, the tree (empty: none given), the siblings' scheme.
struct DraftShape {
  int32_t num_draft_tokens = kDefaultNumDraftTokens;
  bool num_draft_tokens_given = false;  // false: the default, cut to max_new_tokens when that is smaller
  std::vector<int32_t> tree_shape;
  SiblingScheme tree_sampling = SiblingScheme::iid;
  DraftSchedule num_draft_tokens_schedule = DraftSchedule::constant;  // a chain's K between steps (draft_schedule.h)
  double confidence_threshold = 0.0;  // a chain's early stop on the draft's doubt (draft_schedule.h)
};

// The generation loop's configuration. Method tree with no shape verifies one chain of K drawn i.i.d.
// (shape 1,1,...,1), so `--method tree` alone is well defined.
GenerationConfig generation_config(const DecodingMethod& method, const DraftShape& shape, int32_t max_new_tokens,
                                   uint64_t seed);

// Greedy speculation is lossless against greedy decoding: its sampler runs at temperature 0 unless a
// temperature was given explicitly.
void apply_method_temperature(const DecodingMethod& method, bool temperature_given, SamplingParams& params);
// Refuses a greedy method (one whose verifier verifies greedy decoding) with a sampler that samples: `params` as the
// run applies them (apply_method_temperature). A ParameterError for "method".
void check_method_temperature(const std::optional<VerifyMethod>& method, const SamplingParams& params);

}  // namespace specula
