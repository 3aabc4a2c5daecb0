// Per-row sampling parameters of the sampler pipeline. Defaults are "off" for every stage except
// temperature 1. Semantics follow vLLM where systems differ; see README "Sampler pipeline".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace specula {

using Token = int32_t;
class TokenConstraint;  // verify/sampling/token_constraint.h
struct TokenHistory;    // verify/sampling/token_history.h

// Filters that may be reordered by `sampler_order` (everything after temperature): rows of the filter stages'
// table (verify/sampling/filter_stages.h). The built-in stages are named here; stages added to the table take
// the values after them.
enum class FilterStage { min_p, top_k, top_p, typical_p, tfs_z, mirostat };

const char* filter_stage_name(FilterStage stage);
// Parses "min_p,top_k,top_p" (any stage of the table); throws naming `option` and the bad entry.
std::vector<FilterStage> parse_filter_order(const std::string& text, const std::string& option = "sampler_order");

// The smallest temperature other than 0 (greedy): logits / T stay finite for logits up to 3e35, and a
// smaller T is greedy decoding in all but name.
inline constexpr float kMinTemperature = 1e-3f;

struct SamplingParams {
  // Step 1: masks and bias.
  std::vector<Token> allowed_tokens;  // empty = all allowed
  std::vector<Token> banned_tokens;
  std::vector<std::vector<Token>> bad_words;  // last token banned when the output ends with the rest
  int32_t min_tokens = 0;                     // stop tokens banned while |output| < min_tokens
  std::vector<Token> stop_tokens;
  std::vector<std::pair<Token, float>> logit_bias;
  // Constrained decoding: only tokens that keep the output inside a regular language (the automaton's
  // state travels in TokenHistory::constraint_state). Null = unconstrained.
  std::shared_ptr<const TokenConstraint> constraint;
  // A draft's sampler: a row where the constraint and the draft's own masks (--draft-banned-tokens,
  // --draft-min-tokens, ...) leave no token drops the constraint's mask instead of failing. Any draft distribution
  // keeps the verification exact (the target rejects what it cannot emit), so the draft proposes on.
  bool constraint_yields_to_masks = false;

  // Step 2: penalties.
  float repetition_penalty = 1.0f;  // over prompt ∪ output
  float frequency_penalty = 0.0f;   // over output
  float presence_penalty = 0.0f;    // over output

  // Step 3: temperature (0 = greedy) or dynamic temperature (llama.cpp dynatemp) when range > 0.
  float temperature = 1.0f;
  float dynatemp_range = 0.0f;
  float dynatemp_exponent = 1.0f;

  // Step 4: filters, applied in `order`.
  float min_p = 0.0f;      // [0, 1], 0 = off
  int32_t top_k = 0;       // 0 or -1 = off
  float top_p = 1.0f;      // (0, 1], 1 = off
  float typical_p = 1.0f;  // (0, 1], 1 = off
  float tfs_z = 1.0f;      // (0, 1], 1 = off
  int32_t mirostat = 0;    // 0 = off, 2 = mirostat v2
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
  // Order of the filters. Active filters missing from the list run after the listed ones, in the
  // table's canonical order (min_p, top_k, top_p, typical_p, tfs_z, mirostat, then added stages).
  std::vector<FilterStage> order = {FilterStage::min_p, FilterStage::top_k, FilterStage::top_p};
  // Parameters of filter stages that keep them by name rather than in a field above (a stage added to the
  // table in a file of its own); stage_value gives `fallback` for one never set.
  std::map<std::string, double> stage_values;
  double stage_value(const std::string& name, double fallback) const {
    const auto it = stage_values.find(name);
    return it == stage_values.end() ? fallback : it->second;
  }

  bool greedy() const { return temperature == 0.0f; }
  bool uses_history() const;  // does the processed distribution depend on the token history?
  // The stop rule (verify/ALGORITHMS.md §9): does an output end with `x`, `after` being its history once x is in it?
  // It does at a stop token, or where the constraint's match has ended (match_ended).
  bool ends_with(Token x, const TokenHistory& after) const;
  // Has the constraint's match ended at `history` (TokenConstraint::ended: complete, and no token can continue it)?
  // Before any token, for a pattern that matches only the empty output.
  bool match_ended(const TokenHistory& history) const;
  // Whether a repetition, frequency or presence penalty reads which tokens the history holds. On a device (where
  // mirostat, bad_words and constraints are refused) a row's history is otherwise read for its length alone
  // (min_tokens); a penalised row's counts of ids still on the device are added there (TokenHistory::pending_ids).
  bool penalised() const { return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f; }

  // Throws ParameterError naming the parameter (the value in its detail) for any invalid setting, Error for a
  // constraint built over another vocabulary; `vocab_size` bounds token ids.
  void validate(int32_t vocab_size) const;

  // The filters that run, in the order they run.
  std::vector<FilterStage> active_filters() const;
  // Why this sampler leaves `parameter` (a sampler option's name with underscores: "top_p") unread at these values,
  // or "" where it reads it: greedy decoding applies no temperature and no filter, a filter stage's further
  // parameters (mirostat_tau) are read only while its first turns it on, and dynatemp_exponent only with a range.
  std::string unread_because(const std::string& parameter) const;
  // The chain as text, e.g. "logits -> penalties -> temperature -> min_p -> top_k -> top_p -> dist".
  std::string describe() const;
};

// The distribution greedy decoding (temperature 0) takes its argmax over: masks, bias and penalties, then a
// softmax at temperature 1 (greedy decoding runs no filter, so none runs here either). Its argmax is the greedy
// token; the rest ranks the runners-up, which the greedy point mass cannot (logprobs; a drafter's ranked
// candidates). Parameters that are not greedy are returned as they are.
SamplingParams at_unit_temperature(SamplingParams params);

}  // namespace specula
