// The few-row kernel alone on the 27M target's matrices (8 layers of qkv 1536x512, out 512x512, gate_up
// 3072x512, down 512x1536, and the 256x512 head), packed in panels, from one 2 MB-aligned MADV_HUGEPAGE buffer
// (HugePageBuffer, as inference models keep them) against the same bytes on 4 KB pages (MADV_NOHUGEPAGE).
// In one process, the two alternating ABBA per round, so that a change in the machine's rate falls on both;
// prints each copy's median sweep time and the median and quartiles of the per-round ratio (huge / small).
//
// Build (from the repository root, after ./setup.sh):
//   g++ -O2 -std=c++17 -I. results/bench/huge-pages-avx2/kernel_ab.cpp build/harness/libspecula_transformer.a \
//       -o /tmp/kernel_ab
// Run: /tmp/kernel_ab DTYPE(float32|float16|bfloat16) ROWS [ROUNDS]
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "harness/models/transformer/huge_page_buffer.h"
#include "harness/models/transformer/skinny_linear.h"
#include "harness/models/transformer/weight_panels.h"

using namespace specula;

namespace {

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return std::fprintf(stderr, "usage: kernel_ab DTYPE ROWS [ROUNDS]\n"), 2;
  const std::string dtype_name = argv[1];
  const int64_t rows = std::atoll(argv[2]);
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 200;
  WeightDtype dtype = WeightDtype::float32;
  if (dtype_name == "float16") dtype = WeightDtype::float16;
  if (dtype_name == "bfloat16") dtype = WeightDtype::bfloat16;
  const size_t elem = weight_dtype_bytes(dtype);

  std::vector<std::pair<int64_t, int64_t>> shapes;  // (out, in), in the order a step reads them
  for (int layer = 0; layer < 8; ++layer)
    for (auto s : {std::pair<int64_t, int64_t>{1536, 512}, {512, 512}, {3072, 512}, {512, 1536}}) shapes.push_back(s);
  shapes.push_back({256, 512});
  std::vector<size_t> offsets;
  size_t total = 0;
  for (auto [out, in] : shapes) {
    offsets.push_back(total);
    total += (static_cast<size_t>(out * in) * elem + 63) / 64 * 64;
  }

  HugePageBuffer huge(total);
  const long long before = process_huge_page_bytes();
  const size_t small_size = (total + 4095) / 4096 * 4096;
  void* small = mmap(nullptr, small_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (small == MAP_FAILED || madvise(small, small_size, MADV_NOHUGEPAGE) != 0) return std::perror("mmap"), 1;

  // Random weights written in the stored dtype (bf16: the top half of a float in [-0.5, 0.5); fp16: a half in
  // +-[0.5, 1) from the float's sign and top mantissa bits), then packed. The values do not change the time.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (size_t m = 0; m < shapes.size(); ++m) {
    const auto [out, in] = shapes[m];
    char* at = static_cast<char*>(huge.data()) + offsets[m];
    for (int64_t i = 0; i < out * in; ++i) {
      const float v = u(rng);
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      if (dtype == WeightDtype::float32) std::memcpy(at + i * 4, &v, 4);
      if (dtype == WeightDtype::bfloat16) {
        const uint16_t b = static_cast<uint16_t>(bits >> 16);
        std::memcpy(at + i * 2, &b, 2);
      }
      if (dtype == WeightDtype::float16) {
        const uint16_t h = static_cast<uint16_t>(0x3800 | (bits >> 13 & 0x3ff) | (bits >> 16 & 0x8000));  // +-[0.5, 1)
        std::memcpy(at + i * 2, &h, 2);
      }
    }
    pack_into_panels(at, out, in, elem);
  }
  std::memcpy(small, huge.data(), total);
  const long long granted = process_huge_page_bytes() - before;

  std::vector<float> x(static_cast<size_t>(rows) * 3072), y(static_cast<size_t>(rows) * 3072);
  for (float& v : x) v = u(rng);
  auto sweep = [&](const void* base) {
    const double t0 = now_us();
    for (size_t m = 0; m < shapes.size(); ++m) {
      const auto [out, in] = shapes[m];
      const WeightView w{static_cast<const char*>(base) + offsets[m], dtype, WeightLayout::panels};
      skinny_linear(x.data(), rows, in, w, nullptr, out, y.data(), 0, out);
    }
    return now_us() - t0;
  };
  // Same bits from both copies (the same bytes), checked once.
  sweep(huge.data());
  const std::vector<float> from_huge = y;
  sweep(small);
  if (from_huge != y) return std::fprintf(stderr, "outputs differ\n"), 1;

  std::vector<double> th, ts, ratio;
  for (int r = 0; r < rounds; ++r) {
    double h, s;
    if (r % 2 == 0) {
      h = sweep(huge.data());
      s = sweep(small);
    } else {
      s = sweep(small);
      h = sweep(huge.data());
    }
    th.push_back(h);
    ts.push_back(s);
    ratio.push_back(h / s);
  }
  std::printf("%-8s rows %2lld: %.1f MB, huge pages granted %.1f MB (advised %d); huge %.0f us, small %.0f us; "
              "huge/small median %.3f [q25 %.3f, q75 %.3f], %d rounds, kernel %s\n",
              dtype_name.c_str(), static_cast<long long>(rows), static_cast<double>(total) / 1e6,
              static_cast<double>(granted) / 1e6, huge.huge_pages_advised() ? 1 : 0, quantile(th, 0.5),
              quantile(ts, 0.5), quantile(ratio, 0.5), quantile(ratio, 0.25), quantile(ratio, 0.75), rounds,
              skinny_isa_name(skinny_linear_isa()));
  munmap(small, small_size);
  return 0;
}
