// The individual stages of the sampler pipeline and the row scans they share (internal to verify/).
// Definitions, with citations, are in each stage's source file; none picks a token.
//
// A row is held in two forms on its way through the pipeline:
//   LogitsRow   the dense float32 row [V], -inf marking removed tokens. Masks, bias and penalties write
//               into it; each touches a few listed tokens or applies a mask.
//   Candidates  the tokens that can still survive, as (id, logit) in ascending id order; every other token
//               is removed. Temperature, the filters and the final softmax work on these. The pipeline cuts
//               the dense row down to its candidates once, with a threshold that provably keeps every token
//               the first filter would keep (sampler_pipeline.cpp), so after the cut nothing costs O(V).
// Ascending id order makes every float64 sum over candidates add the same terms in the same order as a
// loop over the whole row would (removed tokens add exact zeros), so results do not depend on the form.
#pragma once

#include <cstdint>
#include <vector>

#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"
#include "verify/sampling/token_set.h"

// Whole-row scans are compiled twice, for AVX2 (x86-64-v3) and the baseline, and picked at load time: the
// project builds for the baseline, and these passes are most of the pipeline's time.
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define SPECULA_ROW_SCAN __attribute__((target_clones("arch=x86-64-v3", "default")))
#endif
#endif
#ifndef SPECULA_ROW_SCAN
#define SPECULA_ROW_SCAN
#endif

namespace specula {

// ---- The dense row ----------------------------------------------------------------------------------------

// A row being processed: float32 logits, -inf marking removed tokens.
struct LogitsRow {
  float* logits;
  int32_t size;
};

void apply_masks_and_bias(LogitsRow row, const SamplingParams& s, const TokenHistory& h);
void apply_penalties(LogitsRow row, const SamplingParams& s, const TokenHistory& h);

int32_t count_finite(LogitsRow row);
// Keeps exactly the tokens in the set (others -> -inf).
void keep_only(LogitsRow row, const TokenSet& keep);
// Would keep_only leave any token above -inf?
bool any_kept(LogitsRow row, const TokenSet& keep);

// Copies logits [size] into `row`; throws Error naming the first NaN or +inf token.
void copy_checked_logits(const float* logits, int32_t size, float* row);

// What the cut needs to know about a dense row, from one read-only pass.
struct RowSummary {
  static constexpr int32_t kChunk = 64;  // tokens per chunk: the cut skips whole chunks below its threshold
  std::vector<float> chunk_max;          // [ceil(V / kChunk)] largest logit of each chunk (-inf if none)
  float max = 0.0f;                      // largest logit of the row
  bool unusual = false;                  // the row holds a NaN or +inf (only absurd bias/penalty/temperature)
};
void summarise_row(LogitsRow row, RowSummary& summary);

// ---- Candidates ---------------------------------------------------------------------------------------------

struct Candidates {
  int32_t vocab_size = 0;     // V of the row they come from
  std::vector<Token> ids;     // ascending
  std::vector<float> logits;  // logits[j] belongs to ids[j]

  int32_t size() const { return static_cast<int32_t>(ids.size()); }
  void clear() {
    ids.clear();
    logits.clear();
  }
  // Keeps the candidates j for which keep(j) holds, in order (keep may read other arrays indexed by j).
  template <class Keep>
  void keep_if(Keep keep) {
    size_t n = 0;
    for (size_t j = 0; j < ids.size(); ++j) {
      if (!keep(j)) continue;
      ids[n] = ids[j];
      logits[n] = logits[j];
      ++n;
    }
    ids.resize(n);
    logits.resize(n);
  }
};

// The tokens of `row` with logit >= cut (with cut = -inf: every token that is not -inf, NaN and +inf
// included, as the dense stages would see them), in ascending id order. Chunks whose maximum is below the
// cut are skipped without reading them.
void collect_candidates(LogitsRow row, const RowSummary& summary, float cut, Candidates& out);

void apply_temperature(Candidates& c, float temperature);
void apply_dynamic_temperature(Candidates& c, const SamplingParams& s);
void apply_greedy(Candidates& c);  // keeps only the first (lowest-id) maximal logit, set to 0
void apply_min_p(Candidates& c, float min_p);
void apply_top_k(Candidates& c, int32_t k);
void apply_top_p(Candidates& c, float top_p);
void apply_typical_p(Candidates& c, float typical_p);
void apply_tfs_z(Candidates& c, float z);
void apply_mirostat_v2(Candidates& c, double mu);
// Softmax over the candidates into probs [V] (float64 accumulation); zero for every other token. Throws if
// there is no candidate.
void softmax_candidates(const Candidates& c, float* probs);

// Helpers shared by the filters: the largest logit, the number of finite ones, and the probabilities
// (float64, normalised over the candidates exactly as over the whole row).
float max_logit(const Candidates& c);
int32_t count_finite(const Candidates& c);
void candidate_probabilities(const Candidates& c, std::vector<double>& p);

// min-p's pre-cut window around the exact threshold min_p_threshold(max_logit, min_p): every x below
// `lower` fails min_p_keeps and every x >= `upper` passes it, so only [lower, upper) needs the exact test.
struct MinPWindow {
  float lower, upper;
};
MinPWindow min_p_window(float max_logit, float min_p);

// ---- Sparse rows (selectors and verifiers) -------------------------------------------------------------------
// A processed distribution is zero almost everywhere; these find its support with one vectorised scan.

// Ascending ids of the nonzero entries of row [size] (NaN counts as nonzero, -0 as zero).
void nonzero_ids(const float* row, int32_t size, std::vector<int32_t>& ids);
// sample_from_weights over the listed entries, every other weight being zero: weights[j] is the weight of
// ids[j], ids ascending. The same float64 sums in the same order, hence the same token for the same u.
Token sample_listed_weights(const int32_t* ids, const double* weights, int32_t n, double u);
Token sample_listed_weights(const int32_t* ids, const float* row, int32_t n, double u);  // weight of id = row[id]
// The verifiers' residual draw (sample_residual) when the residual is zero outside `support`, the ascending
// nonzero ids of `fallback` (weights[j] belongs to support[j]): the fallback is drawn from when every
// weight is zero. Throws when both are empty.
Token sample_support_residual(const std::vector<int32_t>& support, const std::vector<double>& weights,
                              const float* fallback, double u);

}  // namespace specula
