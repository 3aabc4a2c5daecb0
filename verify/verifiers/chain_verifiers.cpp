// Chain verifiers: greedy, token-wise rejection sampling and Medusa's (lossy) typical acceptance.
#include <cmath>
#include <vector>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"
#include "verify/verifiers/verification.h"

namespace specula {
namespace {

const float* row_ptr(const float* p, int32_t row, int32_t vocab_size) {
  return p + static_cast<size_t>(row) * vocab_size;
}

// The token emitted after every draft was accepted: a fresh draw from p_{k+1}, the row after the whole
// draft (the mutants draw it from the draft's last row or omit it).
void emit_bonus(VerifyOutcome& out, const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng) {
  out.all_accepted = true;
  if (mutant_on(Mutant::bonus_missing)) return;
  const int32_t k = chain.size();
  const float* row = row_ptr(p, k, vocab_size);
  if (mutant_on(Mutant::bonus_from_draft) && k > 0 && !chain.q_at_row(k - 1).empty())
    row = chain.q_at_row(k - 1).data();
  out.emitted.push_back(sample_categorical(row, vocab_size, rng.key(RandomRole::bonus, static_cast<uint32_t>(k))));
}

}  // namespace

VerifyOutcome verify_greedy(const float* p, const TokenTree& chain, int32_t vocab_size) {
  VerifyOutcome out;
  for (int32_t i = 0; i < chain.size(); ++i) {
    const Token best = argmax(row_ptr(p, i, vocab_size), vocab_size);
    out.emitted.push_back(best);
    if (chain.tokens[i] != best) return out;
    out.path.push_back(i);
    ++out.accepted;
  }
  out.all_accepted = true;
  if (!mutant_on(Mutant::bonus_missing))
    out.emitted.push_back(argmax(row_ptr(p, chain.size(), vocab_size), vocab_size));
  return out;
}

VerifyOutcome verify_chain(const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng) {
  VerifyOutcome out;
  thread_local std::vector<int32_t> support;
  thread_local std::vector<double> residual;
  for (int32_t i = 0; i < chain.size(); ++i) {
    const float* p_i = row_ptr(p, i, vocab_size);
    const std::vector<float>& q_i = chain.q_at_row(i);
    const Token d = chain.tokens[i];
    const bool point_mass = q_i.empty();
    const double q_d = point_mass ? 1.0 : q_i[d];
    if (q_d <= 0.0) ++out.q_zero_errors;  // impossible for a true proposal: reject (vLLM does the same)
    const double u = accept_uniform(rng, static_cast<uint32_t>(i));
    const bool accepted =
        mutant_on(Mutant::accept_q_over_p) ? (q_d > 0.0 && u * p_i[d] <= q_d) : accept_draft_token(u, p_i[d], q_d);
    if (accepted) {
      out.emitted.push_back(d);
      out.path.push_back(i);
      ++out.accepted;
      continue;
    }
    // Rejected: draw from norm((p - q)+), unnormalised (verify/ALGORITHMS.md §1). (p - q)+ is zero wherever p is,
    // so only p's support is visited: the same weights in the same order as a loop over the vocabulary.
    nonzero_ids(p_i, vocab_size, support);
    residual.resize(support.size());
    for (size_t j = 0; j < support.size(); ++j) {
      const Token x = support[j];
      const double q_x = point_mass ? (x == d ? 1.0 : 0.0) : q_i[x];
      residual[j] = residual_weight(p_i[x], q_x);
      if (mutant_on(Mutant::residual_not_subtracted)) residual[j] = p_i[x];
      if (mutant_on(Mutant::residual_zero_draft_token)) residual[j] = x == d ? 0.0 : p_i[x];
    }
    // The residual's uniform comes from its own stream; the mutant reuses the accept test's uniform,
    // which given a rejection is biased towards large values.
    const double v = mutant_on(Mutant::uniform_shared_accept_residual)
                         ? u
                         : rng.key(RandomRole::residual, static_cast<uint32_t>(i)).uniform();
    out.emitted.push_back(sample_support_residual(support, residual, p_i, v));
    return out;
  }
  emit_bonus(out, p, chain, vocab_size, rng);
  return out;
}

VerifyOutcome verify_typical(const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng,
                             const TypicalAcceptance& params) {
  VerifyOutcome out;
  thread_local std::vector<int32_t> support;
  for (int32_t i = 0; i < chain.size(); ++i) {
    const float* p_i = row_ptr(p, i, vocab_size);
    double entropy = 0.0;  // Medusa's entropy: -sum p log(p + 1e-5); zero p adds exact zeros
    nonzero_ids(p_i, vocab_size, support);
    const double offset = mutant_on(Mutant::typical_entropy_without_offset) ? 0.0 : 1e-5;
    for (const Token x : support) entropy -= p_i[x] * std::log(p_i[x] + offset);
    double threshold = std::min(params.epsilon, params.delta * std::exp(-entropy));
    if (mutant_on(Mutant::typical_threshold_max))
      threshold = std::max(params.epsilon, params.delta * std::exp(-entropy));
    if (!(p_i[chain.tokens[i]] > threshold)) {
      out.emitted.push_back(
          sample_categorical(p_i, vocab_size, rng.key(RandomRole::residual, static_cast<uint32_t>(i))));
      return out;
    }
    out.emitted.push_back(chain.tokens[i]);
    out.path.push_back(i);
    ++out.accepted;
  }
  emit_bonus(out, p, chain, vocab_size, rng);
  return out;
}

}  // namespace specula
