// A measured prototype, not part of the build: an output-lane ("broadcast") few-row kernel for AVX2 on fp32
// weights packed in panels of 16 outputs, Wp[panel][i][16], against skinny_linear (16-lane dot products on the
// row-major matrix) over the 32 matrices of target-27m (random fp32 values, 109 MB), interleaved, medians of 21
// rounds. Each output is one sequential fp32 sum over i (one FMA chain per output), so a row's outputs never
// depend on the rows beside it, but the summation order differs from skinny_linear's (other bits).
// Build and run from the repository root (see README.md beside this file).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "harness/models/transformer/skinny_linear.h"
using namespace specula;

// rows RB (<=6) of x against one panel: y[r][o0..o0+16)
template <int RB>
static inline void panel_block(const float* __restrict x, int64_t in, const float* __restrict wp, float* __restrict y,
                               int64_t out, const char* pf, int64_t pf_lines_per_iter) {
  __m256 acc[RB][2];
  for (int r = 0; r < RB; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < in; ++i) {
    if (pf_lines_per_iter && (i & 1) == 0) __builtin_prefetch(pf + 64 * (i >> 1));
    const __m256 w0 = _mm256_load_ps(wp + i * 16), w1 = _mm256_load_ps(wp + i * 16 + 8);
    for (int r = 0; r < RB; ++r) {
      const __m256 xv = _mm256_broadcast_ss(x + r * in + i);
      acc[r][0] = _mm256_fmadd_ps(xv, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(xv, w1, acc[r][1]);
    }
  }
  for (int r = 0; r < RB; ++r) {
    _mm256_storeu_ps(y + r * out, acc[r][0]);
    _mm256_storeu_ps(y + r * out + 8, acc[r][1]);
  }
}

static void ol_linear(const float* x, int64_t rows, int64_t in, const float* wp, int64_t out, float* y) {
  const int64_t panels = out / 16;
  for (int64_t p = 0; p < panels; ++p) {
    const float* panel = wp + p * in * 16;
    const char* next = reinterpret_cast<const char*>(panel + in * 16);  // next panel (in*64 bytes = in lines)
    int64_t r = 0;
    bool first = true;
    // The next panel (in lines of 64 B): one line every second i covers its first half during the first row
    // block and its second half during the next block (or during the first, when there is only one).
    for (; r + 6 <= rows; r += 6) {
      panel_block<6>(x + r * in, in, panel, y + r * out + p * 16, out, first ? next : next + 32 * in, p + 1 < panels);
      first = false;
    }
    const int64_t left = rows - r;
    const char* pf = first ? next : next + 32 * in;
    const int64_t on = p + 1 < panels;
    switch (left) {
      case 1:
        panel_block<1>(x + r * in, in, panel, y + r * out + p * 16, out, pf, on);
        break;
      case 2:
        panel_block<2>(x + r * in, in, panel, y + r * out + p * 16, out, pf, on);
        break;
      case 3:
        panel_block<3>(x + r * in, in, panel, y + r * out + p * 16, out, pf, on);
        break;
      case 4:
        panel_block<4>(x + r * in, in, panel, y + r * out + p * 16, out, pf, on);
        break;
      case 5:
        panel_block<5>(x + r * in, in, panel, y + r * out + p * 16, out, pf, on);
        break;
      default:
        break;
    }
  }
}

int main(int argc, char** argv) {
  struct Shape {
    int64_t out, in;
  };
  std::vector<Shape> shapes;
  for (int l = 0; l < 8; ++l) {
    shapes.push_back({1536, 512});
    shapes.push_back({512, 512});
    shapes.push_back({3072, 512});
    shapes.push_back({512, 1536});
  }
  std::mt19937 g(1);
  std::normal_distribution<float> n;
  std::vector<float*> w, wp;
  double flops1 = 0;
  for (auto s : shapes) {
    float* a = (float*)aligned_alloc(64, s.out * s.in * 4);
    float* b = (float*)aligned_alloc(64, s.out * s.in * 4);
    for (int64_t k = 0; k < s.out * s.in; ++k) a[k] = n(g);
    for (int64_t p = 0; p < s.out / 16; ++p)
      for (int64_t i = 0; i < s.in; ++i)
        for (int j = 0; j < 16; ++j) b[(p * s.in + i) * 16 + j] = a[(p * 16 + j) * s.in + i];
    w.push_back(a);
    wp.push_back(b);
    flops1 += 2.0 * s.out * s.in;
  }
  std::vector<float> x(32 * 1536), y(32 * 3072), y2(32 * 3072);
  for (auto& v : x) v = n(g);
  // check: close to the 16-lane kernel
  double maxrel = 0;
  for (int rows : {1, 7, 15}) {
    skinny_linear(x.data(), rows, 1536, w[3], nullptr, 512, y.data(), 0, 512);
    ol_linear(x.data(), rows, 1536, wp[3], 512, y2.data());
    for (int k = 0; k < rows * 512; ++k)
      maxrel = std::max(maxrel, (double)std::abs(y[k] - y2[k]) / (std::abs(y[k]) + 1));
  }
  printf("max |diff|/(|y|+1) vs 16-lane kernel: %.2e\n", maxrel);
  const int rl[] = {1, 4, 8, 15, 16};
  std::vector<double> t[2][5];
  for (int it = 0; it < 21; ++it)
    for (int k = 0; k < 5; ++k)
      for (int v = 0; v < 2; ++v) {
        const int vv = (v + it) % 2, rows = rl[k];
        auto t0 = std::chrono::steady_clock::now();
        for (size_t m = 0; m < shapes.size(); ++m) {
          if (vv == 0)
            skinny_linear(x.data(), rows, shapes[m].in, w[m], nullptr, shapes[m].out, y.data(), 0, shapes[m].out);
          else
            ol_linear(x.data(), rows, shapes[m].in, wp[m], shapes[m].out, y.data());
        }
        t[vv][k].push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
  for (int v = 0; v < 2; ++v) {
    printf(v ? "output-lane:" : "16-lane:   ");
    double base = 0;
    for (int k = 0; k < 5; ++k) {
      auto s = t[v][k];
      std::sort(s.begin(), s.end());
      double m = s[s.size() / 2];
      if (!k) base = m;
      printf("  r%d %6.0f (%.2f)", rl[k], m, m / base);
    }
    printf("\n");
  }
}
