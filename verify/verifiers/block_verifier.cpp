// Block verification (Sun, Mendlovic, Leviathan, Aharoni, Ro, Beirami, Suresh; ICLR 2025,
// arXiv:2403.10444, Alg. 2; verify/ALGORITHMS.md §4). Decides the accepted length from the capped joint ratios
// w_i = min(1, w_{i-1} p_i(d_i) / q_i(d_i)) instead of token by token, and resamples from
// norm((w_tau p_{tau+1} - q_{tau+1})+). Never accepts fewer tokens in expectation than token-wise
// verification, and equals it when q is a point mass (then we simply run the chain verifier).
#include <vector>

#include "kernels/shared/mutation_points.h"
#include "kernels/shared/sampler_math.h"
#include "verify/sampling/logits_processors.h"
#include "verify/verifiers/verification.h"

namespace specula {

VerifyOutcome verify_block(const float* p, const TokenTree& chain, int32_t vocab_size, const StepRandom& rng) {
  const int32_t gamma = chain.size();
  for (int32_t i = 0; i < gamma; ++i)
    if (chain.q_at_row(i).empty()) return verify_chain(p, chain, vocab_size, rng);
  auto p_row = [&](int32_t row) { return p + static_cast<size_t>(row) * vocab_size; };

  VerifyOutcome out;
  std::vector<double> w(gamma + 1, 1.0);  // w[i]: capped joint ratio after i drafts
  for (int32_t i = 1; i <= gamma; ++i) {
    const Token d = chain.tokens[i - 1];
    const double q_d = chain.q_at_row(i - 1)[d];
    if (q_d <= 0.0) ++out.q_zero_errors;
    w[i] = block_capped_ratio(w[i - 1], p_row(i - 1)[d], q_d);
  }
  // Residual weights (w p - q)+ are zero wherever p is (q >= 0), so sums over a row visit only p's support:
  // the same terms in the same order as a loop over the vocabulary. `support` holds that of row `support_row`.
  thread_local std::vector<int32_t> support;
  thread_local std::vector<double> residual;
  int32_t support_row = -1;
  auto support_of = [&](int32_t row) -> const std::vector<int32_t>& {
    if (support_row != row) nonzero_ids(p_row(row), vocab_size, support);
    support_row = row;
    return support;
  };
  // Backward scan: the largest i whose stop test passes (equivalently, the last passing i going forward).
  int32_t tau = 0;
  for (int32_t i = gamma; i >= 1; --i) {
    double h;
    if (i == gamma) {
      h = w[gamma];
    } else {
      const float* p_next = p_row(i);
      const std::vector<float>& q_next = chain.q_at_row(i);
      double r = 0.0;
      for (const Token x : support_of(i)) r += block_residual_weight(w[i], p_next[x], q_next[x]);
      h = block_stop_probability(r, w[i]);
    }
    if (accept_uniform(rng, static_cast<uint32_t>(i)) <= h) {
      tau = i;
      break;
    }
  }
  for (int32_t i = 0; i < tau; ++i) {
    out.emitted.push_back(chain.tokens[i]);
    out.path.push_back(i);
  }
  out.accepted = tau;
  if (tau == gamma) {
    out.all_accepted = true;
    if (!mutant_on(Mutant::bonus_missing))
      out.emitted.push_back(sample_categorical(p_row(gamma), vocab_size, rng.key(RandomRole::bonus, gamma)));
    return out;
  }
  const float* p_next = p_row(tau);
  const std::vector<float>& q_next = chain.q_at_row(tau);
  const double scale = mutant_on(Mutant::block_tokenwise_residual) ? 1.0 : w[tau];
  const std::vector<int32_t>& ids = support_of(tau);
  residual.resize(ids.size());
  for (size_t j = 0; j < ids.size(); ++j) residual[j] = block_residual_weight(scale, p_next[ids[j]], q_next[ids[j]]);
  const double v = rng.key(RandomRole::residual, static_cast<uint32_t>(tau)).uniform();
  out.emitted.push_back(sample_support_residual(ids, residual, p_next, v));
  return out;
}

}  // namespace specula
