#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>
#include "harness/models/transformer/vector_exp.h"
#include "verify/sampling/logits_processors.h"
#pragma GCC diagnostic ignored "-Wpsabi"
#ifndef TIMING_ONLY
#define TIMING_ONLY 0  // 1: parts.inc leaves a part out, so its outputs are not compared
#endif
#include "attend_body.inc"
}  // namespace specula
#include VARIANT  // variant16.inc, variant_mask.inc, or parts.inc with -DTIMING_ONLY and -DNO_<PART>=1
int main(int argc, char** argv) {
  const int variant = argc > 2 ? atoi(argv[2]) : 0;
  const int64_t T = argc > 3 ? atoi(argv[3]) : 136, D = 64, H = 8, L = argc > 4 ? atoi(argv[4]) : 8, rows = argc > 1 ? atoi(argv[1]) : 8;
  std::mt19937 rng(1); std::normal_distribution<float> n;
  std::vector<float> K(L * H * T * D), V(L * H * T * D), q(rows * H * D), y(rows * H * D), scores(T);
  for (auto& v : K) v = n(rng); for (auto& v : V) v = n(rng); for (auto& v : q) v = n(rng) * 0.2f;
  std::vector<float> mask(rows * T, 0.0f);
  for (int r = 0; r < rows; ++r) for (int t = T - rows + r + 1; t < T; ++t) mask[r * T + t] = -INFINITY;
  const float scale = 0.125f;
  std::vector<double> times;
  double sink = 0;
  for (int it = 0; it < 200; ++it) {
    auto a = std::chrono::steady_clock::now();
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        const float* k = K.data() + (l * H + h) * T * D; const float* v = V.data() + (l * H + h) * T * D;
        for (int r = 0; r < rows; ++r) (variant ? specula::attend2 : specula::attend)(q.data() + (r * H + h) * D, k, v, T, D, scale, mask.data() + r * T, scores.data(), y.data() + (r * H + h) * D);
      }
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count());
    sink += y[0];
  }
  std::sort(times.begin(), times.end());
  { std::vector<float> y2(y.size());
    for (int l = 0; l < L; ++l) for (int h = 0; h < H; ++h) { const float* k = K.data() + (l * H + h) * T * D; const float* v = V.data() + (l * H + h) * T * D;
      for (int r = 0; r < rows; ++r) { specula::attend(q.data() + (r * H + h) * D, k, v, T, D, scale, mask.data() + r * T, scores.data(), y.data() + (r * H + h) * D);
        specula::attend2(q.data() + (r * H + h) * D, k, v, T, D, scale, mask.data() + r * T, scores.data(), y2.data() + (r * H + h) * D);
        if (!TIMING_ONLY && memcmp(y.data() + (r * H + h) * D, y2.data() + (r * H + h) * D, D * 4)) { printf("BITS DIFFER l%d h%d r%d\n", l, h, r); return 1; } } } }
  printf("rows %ld: median %.1f us (%.1f us per row), min %.1f  [%g]\n", rows, times[100], times[100] / rows, times[0], sink);
}
