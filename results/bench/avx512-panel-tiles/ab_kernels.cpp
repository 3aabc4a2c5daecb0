// Interleaved A/B of the old and new AVX-512 panel kernels in one process: per round, each variant runs every
// matrix of a 27M-shaped model once per row count, order alternating (ABBA); medians of per-round ratios.
// The new kernel reads x step-major (the transposition is timed with it); OLD_STEP_MAJOR=1 says the old one
// does too (an old kernel of commit 8b439ec or later). ROWS=1,2,... picks the row counts.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include <cstdint>
namespace specula_old { enum class WeightDtype : uint8_t { float32, float16, bfloat16 }; enum class WeightLayout : uint8_t { row_major, panels };
 struct WeightView { const void* data; WeightDtype dtype; WeightLayout layout; };
 namespace skinny_isa { void skinny_linear_avx512(const float*, long, long, WeightView, const float*, long, float*, long, long); } }
namespace specula_new { enum class WeightDtype : uint8_t { float32, float16, bfloat16 }; enum class WeightLayout : uint8_t { row_major, panels };
 struct WeightView { const void* data; WeightDtype dtype; WeightLayout layout; };
 namespace skinny_isa { void skinny_linear_avx512(const float*, long, long, WeightView, const float*, long, float*, long, long); } }
int main(int argc, char** argv) {
  const char* dt = argc > 1 ? argv[1] : "bfloat16";
  int dcode = !strcmp(dt, "float32") ? 0 : !strcmp(dt, "float16") ? 1 : 2;
  size_t eb = dcode == 0 ? 4 : 2;
  const int64_t shapes[4][2] = {{1536, 512}, {512, 512}, {3072, 512}, {512, 1536}};
  const int mats = 32;
  std::vector<std::vector<char>> store(mats);
  std::mt19937 rng(1);
  int64_t total = 0;
  for (int m = 0; m < mats; ++m) { int64_t n = shapes[m % 4][0] * shapes[m % 4][1]; total += n; store[m].resize(n * eb);
    for (size_t i = 0; i < store[m].size(); i += 2) { uint16_t v = 0x3c00 ^ (rng() & 0x03ff); memcpy(&store[m][i], &v, 2); } }
  std::vector<float> x(16 * 3072, 0.01f), xt(16 * 3072), y(16 * 3072);
  const bool old_step_major = getenv("OLD_STEP_MAJOR") && !strcmp(getenv("OLD_STEP_MAJOR"), "1");
  std::vector<int> rowsets = {1, 2, 3, 4, 5, 8, 15};
  if (getenv("ROWS")) { rowsets.clear(); char* e = getenv("ROWS"); for (char* t = strtok(e, ","); t; t = strtok(nullptr, ",")) rowsets.push_back(atoi(t)); }
  auto run = [&](int which, int rows) {
    auto a = std::chrono::steady_clock::now();
    for (int m = 0; m < mats; ++m) {
      long out = shapes[m % 4][0], in = shapes[m % 4][1];
      if (which == 0) {
        const bool transpose = old_step_major && rows > 1;
        if (transpose) for (long r = 0; r < rows; ++r) for (long i = 0; i < in; ++i) xt[i * rows + r] = x[r * in + i];
        specula_old::skinny_isa::skinny_linear_avx512(transpose ? xt.data() : x.data(), rows, in, {store[m].data(), (specula_old::WeightDtype)dcode, specula_old::WeightLayout::panels}, nullptr, out, y.data(), 0, out); }
      else {  // the new kernel reads x step-major: the transposition skinny_linear does is timed with it
        if (rows > 1) for (long r = 0; r < rows; ++r) for (long i = 0; i < in; ++i) xt[i * rows + r] = x[r * in + i];
        specula_new::skinny_isa::skinny_linear_avx512(rows > 1 ? xt.data() : x.data(), rows, in, {store[m].data(), (specula_new::WeightDtype)dcode, specula_new::WeightLayout::panels}, nullptr, out, y.data(), 0, out); }
    }
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - a).count();
  };
  int rounds = argc > 2 ? atoi(argv[2]) : 20;
  for (int rows : rowsets) {
    std::vector<double> ratio, to, tn;
    for (int k = 0; k < rounds; ++k) {
      double o1, n1, n2, o2;
      if (k % 2 == 0) { o1 = run(0, rows); n1 = run(1, rows); n2 = run(1, rows); o2 = run(0, rows); }
      else { n1 = run(1, rows); o1 = run(0, rows); o2 = run(0, rows); n2 = run(1, rows); }
      ratio.push_back((n1 + n2) / (o1 + o2)); to.push_back((o1 + o2) / 2); tn.push_back((n1 + n2) / 2);
    }
    std::sort(ratio.begin(), ratio.end()); std::sort(to.begin(), to.end()); std::sort(tn.begin(), tn.end());
    printf("%s rows %2d: old %7.0f us new %7.0f us  new/old median %.3f (IQR %.3f-%.3f)  new %.1f GFLOP/s %.1f GB/s\n", dt, rows, to[rounds/2], tn[rounds/2], ratio[rounds/2], ratio[rounds/4], ratio[3*rounds/4], 2.0*rows*total/tn[rounds/2]/1e3, (double)total*eb/tn[rounds/2]/1e3);
  }
}
