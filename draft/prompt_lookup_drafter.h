// Prompt lookup (Saxena 2023; vLLM's `ngram` speculator, llama.cpp's `lookup`): find the longest suffix of
// the context (prompt + generated text), of length max_n down to min_n, that occurred earlier in the
// context, and propose the tokens that followed its most recent earlier occurrence. No model, no
// randomness: the drafts are point masses (draft_q rows empty), verified by verify/ALGORITHMS.md §1 "Deterministic
// drafts" — exact for any target, since the choice never depends on the verifier's coins.
//
// For a tree shape (--method tree) the candidates of several earlier occurrences are merged into a trie:
// occurrences ranked by match length, then recency; each continuation is walked from the root, adding a
// child where its token is new and the shape still has room at that depth. Siblings are distinct tokens,
// verified as deterministic candidates (verify/ALGORITHMS.md §3, "multiple n-gram matches").
#pragma once

#include <string>
#include <vector>

#include "draft/drafter.h"

namespace specula {

struct PromptLookupOptions {
  int32_t max_n = 3;  // longest suffix tried
  int32_t min_n = 1;  // shortest suffix accepted as a match
};

// "" -> defaults; "max_n=3,min_n=1" (either key, any order). Throws Error naming the spec and the bad entry.
PromptLookupOptions parse_prompt_lookup_options(const std::string& text, const std::string& spec);

// One earlier occurrence of a suffix of the context.
struct LookupMatch {
  int32_t length = 0;  // n: tokens matched
  int32_t end = 0;     // context index just after the earlier occurrence (its continuation starts here)
};

// The earlier occurrences of suffixes of `context`, best first: longer suffixes first, then the most
// recent occurrence first. An occurrence must end before the last token, so it has a continuation (it may
// overlap the suffix itself). At most `limit` matches.
std::vector<LookupMatch> find_lookup_matches(const std::vector<Token>& context, const PromptLookupOptions& options,
                                             size_t limit);

// The chain proposal: up to k tokens following the best match; empty when nothing matches.
std::vector<Token> prompt_lookup_chain(const std::vector<Token>& context, const PromptLookupOptions& options,
                                       int32_t k);

class PromptLookupDrafterFactory : public DrafterFactory {
 public:
  // The drafter has no vocabulary of its own: it takes the target's, `vocab_size`.
  PromptLookupDrafterFactory(PromptLookupOptions options, int32_t vocab_size);
  std::unique_ptr<Drafter> create() const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::string description() const override;
  bool records_draft_laws() const override { return false; }  // point masses

 private:
  PromptLookupOptions options_;
  int32_t vocab_size_;
};

// `prompt-lookup[:max_n=N,min_n=M]` (draft/registry/drafter_registry.cpp).
std::shared_ptr<const DrafterFactory> make_prompt_lookup_drafter(const DrafterSpec& spec);
void check_prompt_lookup_spec(const DrafterSpec& spec);  // its options, nothing loaded

}  // namespace specula
