// Per-element and per-row decisions of the sampler pipeline and the verifiers, written once for the
// CPU reference and the CUDA kernels (the macro SPECULA_HD makes them __host__ __device__ under nvcc).
// Only vocabulary-wide reductions differ between the backends; every decision below is shared.
// Convention: p = target, q = draft.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/shared/host_device.h"
#include "kernels/shared/mutation_points.h"

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

// ---- Float order and thresholds ------------------------------------------------------------------------
// Every supported filter (min-p, top-k, top-p) keeps an upper set of logit values, so a whole filter chain
// reduces to one threshold `cut`: keep x iff x is finite and x >= cut. The CUDA kernel finds each filter's
// threshold without sorting; these helpers are the exact, backend-independent pieces of that search.

SPECULA_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

SPECULA_HD float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

SPECULA_HD float negative_infinity() { return float_from_bits(0xff800000u); }

// A key whose unsigned order is the order of the floats (-inf < ... < -0 < +0 < ... < +inf); the radix
// select of the kernel works on these keys. -0 and +0 get different keys but compare equal as floats, so
// decisions are always made by comparing floats against a threshold, never keys.
SPECULA_HD uint32_t float_order_key(float x) {
  const uint32_t u = float_bits(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

SPECULA_HD float float_from_order_key(uint32_t key) {
  return float_from_bits((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// Is x a candidate of the current row (finite and not removed by an earlier filter)? NaN and +inf never
// reach the filters: the pipeline rejects them before.
SPECULA_HD bool kept_by_cut(float x, float cut) { return x != negative_infinity() && x >= cut; }

// The smallest float x with min_p_keeps(x, max_logit, min_p), found by bisection over the float order
// (32 evaluations, no pass over the row). Keeping x >= this threshold keeps exactly the tokens min_p_keeps
// accepts, because exp is monotone. Requires 0 < min_p <= 1 (so the max passes and -inf does not).
SPECULA_HD float min_p_threshold(float max_logit, float min_p) {
  uint32_t fails = float_order_key(negative_infinity());  // min_p_keeps is false here
  uint32_t passes = float_order_key(max_logit);           // and true here
  while (passes - fails > 1) {
    const uint32_t mid = fails + (passes - fails) / 2;
    if (min_p_keeps(float_from_order_key(mid), max_logit, min_p))
      passes = mid;
    else
      fails = mid;
  }
  return float_from_order_key(passes);
}

// top-k (Fan et al. 2018), tie-inclusive: with the k-th largest value `kth`, keep x >= kth.
SPECULA_HD bool top_k_keeps(float x, float kth) { return x >= kth; }

// top-p (Holtzman et al. 2020), tie-inclusive: keep x iff the mass of tokens strictly more probable than x
// is below top_p * total (so the token that crosses top_p is kept, and tied tokens share its fate).
// At the exact boundary (the mass above equals top_p * total) the token is dropped, as in Hugging Face's
// TopPLogitsWarper and vLLM (remove where the ascending cumulative mass <= 1 - top_p): verify/ALGORITHMS.md §2.
SPECULA_HD bool top_p_keeps(double mass_strictly_above, double total, double top_p) {
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::top_p_keeps_boundary_token)) return mass_strictly_above <= top_p * total;
#endif
  return mass_strictly_above < top_p * total;
}

// Fixed-point probability mass for the kernel's top-p search. Integer sums are associative, so the
// kernel's histogram of masses is deterministic whatever order its atomics land in. The scale 2^shift
// keeps the sum of `count` weights in [0, 2^63): shift = 63 - bit_length(count).
SPECULA_HD int fixed_mass_shift(int64_t count) {
  int bits = 0;
  while (count > 0) {
    ++bits;
    count >>= 1;
  }
  return 63 - bits;
}

// exp(x - max_logit) in float64 (as the CPU's row_probabilities), rounded to a multiple of 2^-shift.
SPECULA_HD uint64_t fixed_mass(float x, float max_logit, double scale) {
  const double e = std::exp(static_cast<double>(x) - static_cast<double>(max_logit));
  return static_cast<uint64_t>(e * scale + 0.5);
}

// top_p_keeps in fixed point: the smallest integer mass T such that "mass above < top_p * total" is
// "mass above < T" for integer masses. At least 1, so the most probable token is always kept.
SPECULA_HD uint64_t top_p_fixed_target(uint64_t total, float top_p) {
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::top_p_keeps_boundary_token))  // "above <= top_p * total" for integer masses
    return static_cast<uint64_t>(std::floor(static_cast<double>(top_p) * static_cast<double>(total))) + 1;
#endif
  const double t = std::ceil(static_cast<double>(top_p) * static_cast<double>(total));
  return t < 1.0 ? 1 : static_cast<uint64_t>(t);
}

// ---- The float-first top-p pass and its guard band ----------------------------------------------------
// fixed_mass costs a float64 exp per candidate, ~20 FP64 operations: slow where FP64 runs at 1/64 rate
// (sm_86/sm_89). The kernel first runs the whole radix select on float32 approximations of the same fixed
// masses, then proves from error bounds that the exact masses would select the same value; only when it
// cannot (top_p * Z within the band around a step of the cumulative mass) does it repeat the select with
// fixed_mass. Either way the threshold is the fixed-point one, so the kept set never depends on which
// pass decided (kernels/README.md, "The float-first top-p pass").

// The approximation's relative error bound, with margin. For d = x - max_logit <= 0 the pass computes
// expf(s) * (1 + e), where s + e = d exactly (TwoSum, Knuth TAOCP vol. 2 §4.2.2). Relative errors: expf
// <= 2 ulp = 2^-22 (CUDA's documented bound; glibc's expf is within 1 ulp), two float roundings 2^-24
// each, exp(e) against 1 + e below 2^-34 for |e| <= 104 * 2^-24, the CPU's float64 exp 2^-52: together
// under 3 * 2^-23 ≈ 3.6e-7. The bound used, 2^-20, leaves a factor of 2.6.
constexpr double kApproxMassRelativeError = 1.0 / 1048576.0;

// fixed_mass computed in float32: |approx - fixed_mass| <= kApproxMassRelativeError * fixed_mass + 3 (the
// truncation below, fixed_mass's rounding, and underflow below 2^-126 each cost under one unit). `scale`
// is 2^shift as a float (exact); the product is exact, and the truncation loses less than one unit.
SPECULA_HD uint64_t approx_fixed_mass(float x, float max_logit, float scale) {
  const float minus_max = -max_logit;
  const float s = x + minus_max;
  if (!(s > -104.0f)) return 0;  // expf(s) < 2^-149: the exact mass is below 1e-25 units as well
  const float bb = s - x;
  const float e = (x - (s - bb)) + (minus_max - bb);  // the rounding error of s, exactly
  float f = std::exp(s) * (1.0f + e);
  f = f < 1.0f ? f : 1.0f;  // x <= max_logit: the exact mass is at most 2^shift, and the row sum stays < 2^63
  return static_cast<uint64_t>(f * scale);
}

// A bound on |S - approx_S| for any sum S of at most `count` fixed masses whose approximations sum to
// approx_S: S - approx_S and approx_S - S are both within eps * S + 3 * count, and S <= (approx_S +
// 3 * count) / (1 - eps). 4096 more units cover the float64 rounding of this computation (a 63-bit sum in a
// 53-bit double).
SPECULA_HD uint64_t approx_mass_error(uint64_t approx_sum, int64_t count) {
  const double absolute = 3.0 * static_cast<double>(count);
  const double relative =
      kApproxMassRelativeError * (static_cast<double>(approx_sum) + absolute) / (1.0 - kApproxMassRelativeError);
  return static_cast<uint64_t>(relative + absolute) + 4096;
}

// Does the float pass's value v decide exactly? `above` and `through` are its approximate weights of the
// candidates above v and at or above v, `total` of all candidates. The exact select picks the one value
// with A < T <= C (A = W(> v), C = W(>= v), T = top_p_fixed_target(Z)); for integers A and C that is
// A < y <= C with y = top_p * Z rounded in float64. Splitting Z into disjoint sums, Z = A + (Z - A) and
// Z = C + (Z - C), the two tests read (1 - top_p) A < top_p (Z - A) and top_p (Z - C) <= (1 - top_p) C:
// each side is a sum over its own tokens and is bounded on its own, so the error a token contributes to Z
// is not counted a second time (Z's own bound would be about 1 / (1 - top_p) times as wide). The slack,
// 2^-48 Z, covers every float64 rounding here and in y, each below 2^-52 Z.
SPECULA_HD bool approx_top_p_certain(uint64_t above, uint64_t through, uint64_t total, int64_t count, float top_p) {
  const auto high = [count](uint64_t sum) {
    return static_cast<double>(sum) + static_cast<double>(approx_mass_error(sum, count));
  };
  const auto low = [count](uint64_t sum) {
    const uint64_t error = approx_mass_error(sum, count);
    return sum > error ? static_cast<double>(sum - error) : 0.0;
  };
  const double p = static_cast<double>(top_p), q = 1.0 - p;  // 1 - top_p is exact in float64
  const double slack = high(total) * (1.0 / 281474976710656.0) + 8.0;
  return q * high(above) + slack < p * low(total - above) && p * high(total - through) + slack <= q * low(through);
}

// The radix select's step, for top-k (weights 1, target k) and top-p (fixed masses, target from
// top_p_fixed_target): the value v sought satisfies weight(> v) < target <= weight(>= v). A bucket of
// values holds v iff above + weight(buckets higher) < target <= above + weight(this bucket and higher).
SPECULA_HD bool bucket_holds_target(uint64_t above, uint64_t higher, uint64_t this_and_higher, uint64_t target) {
  return above + higher < target && target <= above + this_and_higher;
}

// ---- Verification ------------------------------------------------------------------------------------

// The Philox offset of draw `slot` of speculative step `step` (StepRandom::key): 16 bits of slot under the
// step, so every draw of a step has its own counter and steps never overlap. Draws that share a counter would
// be equal, and correlated draws across steps break exactness without changing any one step's law, so a step
// may draw at most kMaxDrawsPerStep times: StepRandom::key refuses more, and a draft tree's 4096 nodes
// (verify/verifiers/token_tree.h) stay far below it.
constexpr uint32_t kMaxDrawsPerStep = uint32_t(1) << 16;
SPECULA_HD uint64_t step_draw_offset(uint64_t step, uint32_t slot) {
#if !defined(__CUDA_ARCH__)
  if (mutant_on(Mutant::step_draws_overlap)) return (step << 8) + slot;
#endif
  return (step << 16) | (slot & (kMaxDrawsPerStep - 1));
}

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

// The same step for a parallel prefix sum, whose rounding can differ by an ulp between neighbours: a token
// with zero weight must still never be chosen, so the weight is tested explicitly.
SPECULA_HD bool inverse_cdf_picks(double weight, double cumulative_after, double target) {
  return weight > 0.0 && cumulative_after > target;
}

}  // namespace specula
