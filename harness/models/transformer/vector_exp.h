// exp over 8 floats at once, for the softmax and SiLU of the decoding step (decode_step.cpp), where a scalar
// std::exp per element cost about as much as the attention's arithmetic (8 x 8 x 129 exps per row of the
// 27M target at 128 cached tokens, plus 8 x 1536 for SiLU).
//
// Method (Cody & Waite 1980; the polynomial of the Cephes library's expf, Moshier 1989): x = n ln2 + r with
// n = round(x / ln2) and |r| <= ln2 / 2, ln2 split in two parts so n ln2 is subtracted exactly; exp(r) by a
// degree-7 polynomial (1 + r + r^2 P(r)); then times 2^n, applied as 2^(n/2) 2^(n - n/2) so that both
// factors are normal floats and the result rounds once, also in the subnormal range.
//
// Accuracy, against exp in double rounded to float: at most 1 unit in the last place for every float x in
// [-104, 88.7228] (all 2.24 billion checked once; 99.2% are exact; tests/test_vector_exp.cpp samples every
// 61st), subnormal results included; exp(x) = 0 for x < -104 and x = -inf, +inf from x = 88.7228394 (the first float
// whose exp exceeds FLT_MAX) up, NaN for NaN. Written with GCC vector extensions and no fused multiply-add (the project
// compiles without contraction), so every target clone of a caller gives the same bits.
#pragma once

#include <cstdint>
#include <cstring>

namespace specula {

// The vectors pass only between always-inlined functions of one target, so GCC's note that a 32-byte vector
// return changes the ABI without AVX (-Wpsabi) concerns no real call.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float Float8 __attribute__((vector_size(32)));
typedef int32_t Int8 __attribute__((vector_size(32)));

inline __attribute__((always_inline)) Float8 exp8(Float8 x) {
  const Float8 log2e = Float8{} + 1.44269504088896341f;
  const Float8 ln2_hi = Float8{} + 0.693359375f;  // 355 / 512, 9 significant bits: n * ln2_hi is exact for |n| < 2^15
  const Float8 ln2_lo = Float8{} + -2.12194440e-4f;
  const Float8 round_magic = Float8{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer (ties even)
  // Outside [lowest, highest] the result is 0 or +inf (set at the end); clamp so the arithmetic stays finite.
  const float lowest = -104.0f, highest = 88.7228394f;
  const Int8 too_small = x < lowest;
  const Int8 too_large = x > highest;
  const Int8 is_nan = x != x;
  Float8 xc = too_small ? Float8{} + lowest : (too_large ? Float8{} + highest : x);
  xc = is_nan ? Float8{} : xc;

  const Float8 shifted = xc * log2e + round_magic;
  const Float8 n = shifted - round_magic;
  Int8 ni;
  std::memcpy(&ni, &shifted, sizeof ni);
  Int8 magic_bits;
  std::memcpy(&magic_bits, &round_magic, sizeof magic_bits);
  ni -= magic_bits;  // n as an integer, in [-150, 128]

  const Float8 r = (xc - n * ln2_hi) - n * ln2_lo;
  Float8 p = Float8{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const Float8 expr = p * (r * r) + r + 1.0f;

  const Int8 half = ni >> 1, rest = ni - half;  // both in [-75, 64]: 2^half and 2^rest are normal floats
  const Int8 bits_half = (half + 127) << 23, bits_rest = (rest + 127) << 23;
  Float8 scale_half, scale_rest;
  std::memcpy(&scale_half, &bits_half, sizeof scale_half);
  std::memcpy(&scale_rest, &bits_rest, sizeof scale_rest);
  Float8 y = (expr * scale_half) * scale_rest;

  const float inf = __builtin_inff();
  y = too_small ? Float8{} : y;
  y = too_large ? Float8{} + inf : y;
  return is_nan ? x : y;
}

#pragma GCC diagnostic pop

}  // namespace specula
