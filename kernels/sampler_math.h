// Per-element and per-row decisions of the sampler pipeline and the verifiers, written once for the
// CPU reference and the CUDA kernels (the macro SPECULA_HD makes them __host__ __device__ under nvcc).
// Only vocabulary-wide reductions differ between the backends; every decision below is shared.
// Convention: p = target, q = draft.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

namespace specula {

// ---- Sampler pipeline, step 2: penalties (vLLM semantics) -------------------------------------------

// Repetition penalty r over prompt ∪ output (CTRL, Keskar et al. 2019): divide positive logits by r,
// multiply negative ones by r, so the penalised token always becomes less likely whatever its sign.
SPECULA_HD float apply_repetition_penalty(float logit, float r) { return logit > 0.0f ? logit / r : logit * r; }

// Frequency and presence penalties over output tokens only (OpenAI semantics, as vLLM).
SPECULA_HD float apply_frequency_presence(float logit, int32_t count_in_output, float frequency, float presence) {
  return logit - frequency * static_cast<float>(count_in_output) - (count_in_output > 0 ? presence : 0.0f);
}

// ---- Filters: predicates on one token given row statistics ------------------------------------------

// min-p (Nguyen et al. 2024): keep x iff p(x) >= m * max p, i.e. exp(logit - max_logit) >= m. Evaluated
// on logits so no normaliser is needed.
SPECULA_HD bool min_p_keeps(double logit, double max_logit, double min_p) {
  return std::exp(logit - max_logit) >= min_p;
}

// ---- Verification ------------------------------------------------------------------------------------

// Leviathan et al. 2023, Alg. 1: accept a draft token with probability min(1, p/q). With u in the open
// interval (0, 1) the test u * q <= p rejects with certainty when p = 0, and q = 0 (an impossible draw
// that signals a bookkeeping bug upstream) always rejects.
SPECULA_HD bool accept_draft_token(double u, double p, double q) { return q > 0.0 && u * q <= p; }

// Weight of x in the residual distribution norm((p - q)+) (Leviathan et al. 2023, eq. 3). Left
// unnormalised: the residual is sampled from raw weights, so a tiny total never divides 0 by 0.
SPECULA_HD double residual_weight(double p, double q) { return p > q ? p - q : 0.0; }

// Block verification (Sun et al., ICLR 2025, Alg. 2): the capped joint ratio
// w_i = min(1, w_{i-1} * p_i(d_i) / q_i(d_i)), with w_0 = 1.
SPECULA_HD double block_capped_ratio(double w_prev, double p, double q) {
  if (q <= 0.0) return 0.0;
  const double w = w_prev * p / q;
  return w < 1.0 ? w : 1.0;
}

// Weight of x in the block residual norm((w * p_{i+1} - q_{i+1})+).
SPECULA_HD double block_residual_weight(double w, double p, double q) {
  const double d = w * p - q;
  return d > 0.0 ? d : 0.0;
}

// Block verification's stopping probability h_i = r_i / (r_i + 1 - w_i), with h := 1 when the
// denominator vanishes (w_i = 1 and r_i = 0: the continuation is certain, so stopping here is harmless).
SPECULA_HD double block_stop_probability(double residual_mass, double w) {
  const double denom = residual_mass + 1.0 - w;
  return denom > 0.0 ? residual_mass / denom : 1.0;
}

// Inverse-CDF step: token x is chosen by a uniform u when the running total crosses u * total inside x's
// weight. Zero weights can never be chosen because the running total must strictly increase past target.
SPECULA_HD bool cumulative_crosses(double cumulative_after, double target) { return cumulative_after > target; }

}  // namespace specula
