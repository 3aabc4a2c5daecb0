#include "draft/prompt_lookup_drafter.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "draft/drafter_options.h"
#include "harness/models/language_model.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

// Matches considered when building a tree: enough to fill any reasonable shape, bounded so a long
// repetitive context costs O(limit * depth) trie work on top of the scan.
constexpr size_t kTreeMatchLimit = 256;

class PromptLookupDrafter : public Drafter {
 public:
  explicit PromptLookupDrafter(const PromptLookupOptions& options) : options_(options) {}

  std::string name() const override { return "prompt-lookup"; }

  TokenTree propose(const DraftRequest& request) override {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<Token>& context = *request.context;
    TokenTree tree = request.tree_shape.empty()
                         ? TokenTree::chain(prompt_lookup_chain(context, options_, request.num_draft_tokens))
                         : trie_of_matches(context, request.tree_shape);
    tree.scheme = SiblingScheme::deterministic;  // point masses: draft_q stays empty
    return counted(std::move(tree), start);
  }

 private:
  // Continuations of the ranked matches merged into a trie limited by `shape` (see the header).
  TokenTree trie_of_matches(const std::vector<Token>& context, const std::vector<int32_t>& shape) const {
    TokenTree tree;
    std::vector<std::vector<int32_t>> children(1);  // per row: child nodes
    const int32_t depth_limit = static_cast<int32_t>(shape.size());
    for (const LookupMatch& m : find_lookup_matches(context, options_, kTreeMatchLimit)) {
      int32_t row = 0;
      for (int32_t d = 0; d < depth_limit && m.end + d < static_cast<int32_t>(context.size()); ++d) {
        const Token t = context[m.end + d];
        int32_t next = -1;
        for (int32_t c : children[row])
          if (tree.tokens[c] == t) next = c;
        if (next < 0) {
          if (static_cast<int32_t>(children[row].size()) >= shape[d]) break;  // no room at this depth
          tree.add(t, row - 1);
          next = tree.size() - 1;
          children[row].push_back(next);
          children.emplace_back();
        }
        row = next + 1;
      }
    }
    return tree;
  }

  PromptLookupOptions options_;
};

}  // namespace

PromptLookupOptions parse_prompt_lookup_options(const std::string& text, const std::string& spec) {
  PromptLookupOptions o;
  for (const auto& [key, value] : parse_drafter_options(text, spec, {"max_n", "min_n"})) {
    const long v = drafter_option_int(value, key, spec);
    if (v < 1 || v > 64) fail_parameter("draft", " ", spec, ": ", key, " must be in 1..64, got ", v);
    (key == "max_n" ? o.max_n : o.min_n) = static_cast<int32_t>(v);
  }
  if (o.min_n > o.max_n) fail_parameter("draft", " ", spec, ": min_n (", o.min_n, ") must be <= max_n (", o.max_n, ")");
  return o;
}

std::vector<LookupMatch> find_lookup_matches(const std::vector<Token>& context, const PromptLookupOptions& options,
                                             size_t limit) {
  std::vector<LookupMatch> out;
  std::set<int32_t> ends;  // a shorter match ending where a longer one did has the same continuation
  const int32_t T = static_cast<int32_t>(context.size());
  for (int32_t n = std::min(options.max_n, T - 1); n >= options.min_n && out.size() < limit; --n) {
    // Occurrence [end - n, end) with end <= T - 1, most recent first.
    for (int32_t end = T - 1; end >= n && out.size() < limit; --end) {
      if (!std::equal(context.begin() + (end - n), context.begin() + end, context.end() - n)) continue;
      if (ends.insert(end).second) out.push_back({n, end});
    }
  }
  return out;
}

std::vector<Token> prompt_lookup_chain(const std::vector<Token>& context, const PromptLookupOptions& options,
                                       int32_t k) {
  const std::vector<LookupMatch> best = find_lookup_matches(context, options, 1);
  if (best.empty() || k <= 0) return {};
  const size_t from = static_cast<size_t>(best[0].end);
  const size_t to = std::min(context.size(), from + static_cast<size_t>(k));
  return std::vector<Token>(context.begin() + from, context.begin() + to);
}

PromptLookupDrafterFactory::PromptLookupDrafterFactory(PromptLookupOptions options, int32_t vocab_size)
    : options_(options), vocab_size_(vocab_size) {
  if (options_.min_n < 1 || options_.max_n < options_.min_n)
    fail("prompt-lookup: need 1 <= min_n <= max_n, got min_n=", options_.min_n, ", max_n=", options_.max_n);
}

std::unique_ptr<Drafter> PromptLookupDrafterFactory::create() const {
  return std::make_unique<PromptLookupDrafter>(options_);
}

std::string PromptLookupDrafterFactory::description() const {
  return "prompt-lookup:max_n=" + std::to_string(options_.max_n) + ",min_n=" + std::to_string(options_.min_n);
}

void check_prompt_lookup_spec(const DrafterSpec& spec) { parse_prompt_lookup_options(spec.rest, spec.spec); }

std::shared_ptr<const DrafterFactory> make_prompt_lookup_drafter(const DrafterSpec& spec) {
  if (!spec.target) fail_parameter("draft", " ", spec.spec, ": needs the target model");
  return std::make_shared<PromptLookupDrafterFactory>(parse_prompt_lookup_options(spec.rest, spec.spec),
                                                      spec.target->vocab_size());
}

}  // namespace specula
