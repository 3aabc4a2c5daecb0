// exp8 (harness/models/transformer/vector_exp.h), the decoding step's exp, against exp in double rounded to
// float: at most 1 unit in the last place over its whole finite range (every 61st float from -104 to 88.72,
// about 37 million values, subnormal results included), and the special values. The same check fails two
// deliberately wrong variants, so it can fail.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>

#include "harness/models/transformer/vector_exp.h"

namespace specula {
namespace {

// Floats ordered as integers (negative floats below positive ones, -0 = +0), so that the distance between
// two floats counts the floats between them: units in the last place, subnormals included.
int64_t ordered(float f) {
  int32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits < 0 ? -static_cast<int64_t>(bits & 0x7fffffff) : bits;
}

int64_t ulps_apart(float a, float b) { return std::llabs(ordered(a) - ordered(b)); }

using Exp8 = std::function<Float8(Float8)>;

// The largest distance from the reference over every stride-th float of [-104, 88.7228] (bit patterns).
int64_t worst_ulps(const Exp8& f, uint32_t stride) {
  int64_t worst = 0;
  auto check = [&](uint32_t first, uint32_t last) {
    for (uint64_t u = first; u <= last; u += 8 * static_cast<uint64_t>(stride)) {
      Float8 x;
      for (int k = 0; k < 8; ++k) {
        const uint32_t bits = static_cast<uint32_t>(std::min<uint64_t>(u + k * static_cast<uint64_t>(stride), last));
        std::memcpy(reinterpret_cast<char*>(&x) + 4 * k, &bits, 4);
      }
      const Float8 y = f(x);
      for (int k = 0; k < 8; ++k) {
        const float reference = static_cast<float>(std::exp(static_cast<double>(x[k])));
        const int64_t d = ulps_apart(y[k], reference);
        if (d > worst) worst = d;
      }
    }
  };
  check(0x00000000u, 0x42b17217u);  // +0 to 88.72283 (the largest x with a finite result)
  check(0x80000000u, 0xc2d00000u);  // -0 to -104
  return worst;
}

Float8 splat(float v) { return Float8{} + v; }

}  // namespace

TEST_CASE("exp8: within 1 unit in the last place of exp over its finite range, and exact at the special values",
          "[transformer]") {
  const Exp8 exact = [](Float8 x) { return exp8(x); };
  const int64_t worst = worst_ulps(exact, 61);
  INFO("worst distance from exp: " << worst << " units in the last place");
  CHECK(worst <= 1);

  CHECK(exp8(splat(0.0f))[0] == 1.0f);
  CHECK(exp8(splat(1.0f))[0] == static_cast<float>(std::exp(1.0)));
  CHECK(exp8(splat(-std::numeric_limits<float>::infinity()))[0] == 0.0f);  // a masked score weighs exactly 0
  CHECK(exp8(splat(-104.5f))[0] == 0.0f);
  CHECK(exp8(splat(-1e30f))[0] == 0.0f);
  CHECK(exp8(splat(88.73f))[0] == std::numeric_limits<float>::infinity());
  CHECK(exp8(splat(std::numeric_limits<float>::infinity()))[0] == std::numeric_limits<float>::infinity());
  CHECK(std::isnan(exp8(splat(std::numeric_limits<float>::quiet_NaN()))[0]));
  // The first float whose exp exceeds FLT_MAX overflows through the arithmetic (2^64 * 2^64), not the clamp.
  const float first_overflow = std::nextafter(88.7228317f, 100.0f);
  CHECK(exp8(splat(first_overflow))[0] == std::numeric_limits<float>::infinity());
  const float largest = exp8(splat(88.7228317f))[0];
  CHECK(std::isfinite(largest));
  CHECK(ulps_apart(largest, static_cast<float>(std::exp(88.7228317))) <= 1);
  // Lanes are independent: each lane gives the bits it gives alone, whatever its neighbours hold.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const Float8 inputs = {-inf, 0.5f, 100.0f, -0.5f, -90.0f, nan, 3.0f, -3.0f};
  const Float8 mixed = exp8(inputs);
  for (int k = 0; k < 8; ++k) {
    const float together = mixed[k], alone = exp8(splat(inputs[k]))[0];
    if (k != 5) CHECK(std::memcmp(&together, &alone, sizeof(float)) == 0);
  }
  CHECK(std::isnan(mixed[5]));
}

// exp8 compiled for AVX2 (as decode_step.cpp's x86-64-v3 clones compile it) and for the x86-64 baseline (this
// file's own flags): no contraction, so the same bits.
__attribute__((target("arch=x86-64-v3"))) void exp8_avx2(const float* x, float* y) {
  Float8 v;
  std::memcpy(&v, x, sizeof v);
  const Float8 e = exp8(v);
  std::memcpy(y, &e, sizeof e);
}

TEST_CASE("exp8: the AVX2 build gives the baseline build's bits", "[transformer]") {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    WARN("this CPU has no AVX2 and FMA: nothing to compare");
    return;
  }
  int64_t differing = 0;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 8 * 4099) {
    float x[8], y_avx2[8];
    for (int k = 0; k < 8; ++k) {
      const uint32_t bits = static_cast<uint32_t>(u + k * 517);
      std::memcpy(&x[k], &bits, 4);
    }
    Float8 v;
    std::memcpy(&v, x, sizeof v);
    const Float8 y_base = exp8(v);
    exp8_avx2(x, y_avx2);
    differing += std::memcmp(&y_base, y_avx2, sizeof y_avx2) != 0;
  }
  CHECK(differing == 0);
}

TEST_CASE("exp8: the check fails an exp off by 2 to 4 units and one that flushes subnormal results to zero",
          "[transformer]") {
  const Exp8 scaled = [](Float8 x) { return exp8(x) * (1.0f + 0x1p-21f); };
  CHECK(worst_ulps(scaled, 997) > 1);
  const Exp8 flushed = [](Float8 x) {
    const Float8 y = exp8(x);
    return y < FLT_MIN ? Float8{} : y;
  };
  CHECK(worst_ulps(flushed, 997) > 1);
}

}  // namespace specula
