// The few-row linear kernel of decoding and verification steps (skinny_linear.h): every instruction-set
// variant against a float64 reference, the row-invariance the generation loop relies on (a token's outputs do
// not depend on the rows computed beside it), and apply_linear's choice between it and LibTorch.
//
// Tolerance: a float32 dot product of n terms summed in any order is within gamma_{n+1} * sum |x_i w_i| of the
// exact value, gamma_m = m u / (1 - m u), u = 2^-24 (Higham, Accuracy and Stability of Numerical Algorithms,
// 2nd ed., §3.1; the +1 covers the bias). That bound is rigorous, so a pass leaves no room for a wrong index
// or a dropped term, which move an output by the size of a term.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "harness/models/transformer/skinny_linear.h"
#include "harness/models/transformer/transformer_model.h"
#include "harness/models/transformer/weight_panels.h"

namespace specula {
namespace {

std::vector<SkinnyIsa> supported_isas() {
  std::vector<SkinnyIsa> isas;
  for (SkinnyIsa isa : {SkinnyIsa::baseline, SkinnyIsa::avx2, SkinnyIsa::avx512})
    if (skinny_linear_supported(isa)) isas.push_back(isa);
  return isas;
}

std::vector<float> normal_floats(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

// How far out[r][o] is from the exact x_r . w_o + b_o, in units of its rigorous rounding bound.
double worst_error_over_bound(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                              const std::vector<float>& y, int64_t rows, int64_t in, int64_t out) {
  const double u = std::ldexp(1.0, -24), m = static_cast<double>(in + 1);
  const double gamma = m * u / (1.0 - m * u);
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double exact = b[o], magnitude = std::fabs(b[o]);
      for (int64_t i = 0; i < in; ++i) {
        const double t = static_cast<double>(x[r * in + i]) * w[o * in + i];
        exact += t;
        magnitude += std::fabs(t);
      }
      worst = std::max(worst, std::fabs(y[r * out + o] - exact) / (gamma * magnitude));
    }
  return worst;
}

// Every ISA variant on one case: within the rounding bound, each row alone gives the bits it gets among the
// others, output columns split at `cut` give the same bits, and the FMA variants agree bit for bit.
void check_every_variant(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                         WeightView view, int64_t rows, int64_t in, int64_t out, int64_t cut) {
  std::vector<float> first_fma;  // the first FMA variant's output: the others must match it bit for bit
  for (SkinnyIsa isa : supported_isas()) {
    CAPTURE(in, out, rows, static_cast<int>(isa));
    std::vector<float> y(rows * out), alone(out), sliced(rows * out);
    skinny_linear_with(isa, x.data(), rows, in, view, b.data(), out, y.data(), 0, out);
    CHECK(worst_error_over_bound(x, w, b, y, rows, in, out) <= 1.0);
    for (int64_t r = 0; r < rows; ++r) {
      skinny_linear_with(isa, x.data() + r * in, 1, in, view, b.data(), out, alone.data(), 0, out);
      CHECK(std::memcmp(alone.data(), y.data() + r * out, sizeof(float) * out) == 0);
    }
    skinny_linear_with(isa, x.data(), rows, in, view, b.data(), out, sliced.data(), 0, cut);
    skinny_linear_with(isa, x.data(), rows, in, view, b.data(), out, sliced.data(), cut, out);
    CHECK(std::memcmp(sliced.data(), y.data(), sizeof(float) * y.size()) == 0);
    if (isa != SkinnyIsa::baseline) {
      if (first_fma.empty())
        first_fma = y;
      else
        CHECK(std::memcmp(first_fma.data(), y.data(), sizeof(float) * y.size()) == 0);
    }
  }
}

TEST_CASE("skinny_linear: every variant within the rounding bound, row-invariant and slice-invariant",
          "[transformer]") {
  std::mt19937 rng(2026);
  REQUIRE(supported_isas().front() == SkinnyIsa::baseline);
  for (int64_t in : {1, 7, 16, 33, 256, 300})
    for (int64_t out : {1, 3, 5, 64, 67})
      for (int64_t rows : {1, 2, 3, 4, 5, 7, 13}) {
        const auto x = normal_floats(rows * in, rng), w = normal_floats(out * in, rng), b = normal_floats(out, rng);
        check_every_variant(x, w, b, WeightView{w.data(), WeightDtype::float32}, rows, in, out, out / 3);
      }
}

TEST_CASE("skinny_linear: the bound catches a dropped term", "[transformer]") {
  // Negative control: the same check on an output that misses one product fails by far.
  std::mt19937 rng(7);
  const int64_t rows = 3, in = 256, out = 8;
  const auto x = normal_floats(rows * in, rng), w = normal_floats(out * in, rng), b = normal_floats(out, rng);
  std::vector<float> y(rows * out);
  skinny_linear(x.data(), rows, in, w.data(), b.data(), out, y.data(), 0, out);
  REQUIRE(worst_error_over_bound(x, w, b, y, rows, in, out) <= 1.0);
  int64_t largest = 0;  // the largest product of row 1 and weight row 5: dropping it is a clear bug
  for (int64_t i = 1; i < in; ++i)
    if (std::fabs(x[in + i] * w[5 * in + i]) > std::fabs(x[in + largest] * w[5 * in + largest])) largest = i;
  y[out + 5] -= x[in + largest] * w[5 * in + largest];
  CHECK(worst_error_over_bound(x, w, b, y, rows, in, out) > 100.0);
}

// A copy of a row-major [out, in] matrix in panels of 16 outputs (weight_panels.h).
template <typename T>
std::vector<T> packed(std::vector<T> w, int64_t out, int64_t in) {
  pack_into_panels(w.data(), out, in, sizeof(T));
  return w;
}

TEST_CASE("skinny_linear on panels: every variant within the rounding bound, row- and slice-invariant",
          "[transformer]") {
  if (!skinny_linear_supported(SkinnyIsa::avx512))
    WARN("this CPU has no AVX-512: the AVX-512 kernel (its tiles, step-major input, fetches) is not exercised here");
  // The bound is the same as on row-major weights (one sequential sum per output is one order among all).
  std::mt19937 rng(2027);
  // 128 and 288 outputs: one and two rows take several panels per tile (AVX2: groups of 4 and 2 panels,
  // AVX-512 fp32: 8 and 4; AVX-512 also 4 for 3-4 rows and 3 from 5 rows on, in tiles of up to 8 rows), then
  // single panels; 288 split at 96 puts a whole group after a mid-matrix start on every ISA, then a remainder.
  for (int64_t in : {1, 7, 16, 33, 256, 300})
    for (int64_t out : {16, 48, 64, 128, 288})
      for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 15, 32}) {
        const auto x = normal_floats(rows * in, rng), w = normal_floats(out * in, rng), b = normal_floats(out, rng);
        const auto wp = packed(w, out, in);
        check_every_variant(x, w, b, WeightView{wp.data(), WeightDtype::float32, WeightLayout::panels}, rows, in, out,
                            out / 3 / kPanelOutputs * kPanelOutputs);  // a split on a panel's edge
      }
}

TEST_CASE("skinny_linear on panels: the bound catches an unpacked matrix and a swapped output", "[transformer]") {
  // Negative controls: the row-major bytes read as panels, and two outputs of a panel exchanged, fail by far.
  std::mt19937 rng(8);
  const int64_t rows = 3, in = 64, out = 32;
  const auto x = normal_floats(rows * in, rng), w = normal_floats(out * in, rng), b = normal_floats(out, rng);
  auto wp = packed(w, out, in);
  std::vector<float> y(rows * out);
  skinny_linear(x.data(), rows, in, WeightView{wp.data(), WeightDtype::float32, WeightLayout::panels}, b.data(), out,
                y.data(), 0, out);
  REQUIRE(worst_error_over_bound(x, w, b, y, rows, in, out) <= 1.0);
  skinny_linear(x.data(), rows, in, WeightView{w.data(), WeightDtype::float32, WeightLayout::panels}, b.data(), out,
                y.data(), 0, out);
  CHECK(worst_error_over_bound(x, w, b, y, rows, in, out) > 100.0);
  for (int64_t i = 0; i < in; ++i) std::swap(wp[i * kPanelOutputs + 3], wp[i * kPanelOutputs + 4]);
  skinny_linear(x.data(), rows, in, WeightView{wp.data(), WeightDtype::float32, WeightLayout::panels}, b.data(), out,
                y.data(), 0, out);
  CHECK(worst_error_over_bound(x, w, b, y, rows, in, out) > 100.0);
}

TEST_CASE("weight panels: packing and unpacking restore every element; ranges must align to panels", "[transformer]") {
  std::mt19937 rng(9);
  const int64_t out = 48, in = 13;
  const auto w = normal_floats(out * in, rng);
  auto p = packed(w, out, in);
  CHECK(p != w);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      CHECK(p[((o / kPanelOutputs) * in + i) * kPanelOutputs + o % kPanelOutputs] == w[o * in + i]);
  unpack_from_panels(p.data(), out, in, sizeof(float));
  CHECK(p == w);
  std::vector<uint16_t> h(out * in);
  for (size_t k = 0; k < h.size(); ++k) h[k] = static_cast<uint16_t>(k);
  auto hp = packed(h, out, in);
  unpack_from_panels(hp.data(), out, in, sizeof(uint16_t));
  CHECK(hp == h);
  std::vector<float> odd(40 * in);
  CHECK_THROWS_WITH(pack_into_panels(odd.data(), 40, in, sizeof(float)),
                    Catch::Contains("[40, 13] matrix does not split into panels of 16"));
  std::vector<float> x(in), y(out);
  CHECK_THROWS_WITH(skinny_linear(x.data(), 1, in, WeightView{p.data(), WeightDtype::float32, WeightLayout::panels},
                                  nullptr, out, y.data(), 8, out),
                    Catch::Contains("divisible by 16"));
}

TEST_CASE("skinny_linear on panels: a 16-bit matrix gives the fp32 kernel's bits on its widened copy",
          "[transformer]") {
  torch::manual_seed(12);
  for (torch::ScalarType dtype : {torch::kFloat16, torch::kBFloat16})
    for (int64_t in : {16, 40, 256})
      for (int64_t rows : {1, 2, 3, 4, 5, 8, 9, 15})
        for (int64_t out : {48, 160, 288}) {  // 160 and 288: groups of 2-8 panels, then single panels
          // (AVX-512 runs one 16-bit row on 4 panels per tile, not fp32's 8, and fetches ahead differently for
          // 1-4 rows: the same sums)
          const torch::Tensor w32 = torch::randn({out, in}) / std::sqrt(static_cast<double>(in));
          torch::Tensor w16 = w32.to(dtype).contiguous(), widened = w16.to(torch::kFloat32).contiguous();
          pack_into_panels(w16.data_ptr(), out, in, 2);
          pack_into_panels(widened.data_ptr(), out, in, 4);
          const torch::Tensor x = torch::randn({rows, in}), b = torch::randn({out});
          const WeightView v16{w16.data_ptr(), dtype == torch::kFloat16 ? WeightDtype::float16 : WeightDtype::bfloat16,
                               WeightLayout::panels};
          const WeightView v32{widened.data_ptr(), WeightDtype::float32, WeightLayout::panels};
          for (SkinnyIsa isa : supported_isas()) {
            CAPTURE(static_cast<int>(dtype), in, rows, out, static_cast<int>(isa));
            std::vector<float> y16(rows * out), y32(rows * out), sliced(rows * out);
            skinny_linear_with(isa, x.data_ptr<float>(), rows, in, v16, b.data_ptr<float>(), out, y16.data(), 0, out);
            skinny_linear_with(isa, x.data_ptr<float>(), rows, in, v32, b.data_ptr<float>(), out, y32.data(), 0, out);
            CHECK(std::memcmp(y16.data(), y32.data(), sizeof(float) * y16.size()) == 0);
            const int64_t cut = out / 3 / kPanelOutputs * kPanelOutputs;  // a split on a panel's edge
            skinny_linear_with(isa, x.data_ptr<float>(), rows, in, v16, b.data_ptr<float>(), out, sliced.data(), 0,
                               cut);
            skinny_linear_with(isa, x.data_ptr<float>(), rows, in, v16, b.data_ptr<float>(), out, sliced.data(), cut,
                               out);
            CHECK(std::memcmp(sliced.data(), y16.data(), sizeof(float) * y16.size()) == 0);
          }
        }
}

// Every finite value of a 16-bit format, as a [count, 16] matrix of its bit patterns (row-major), and the same
// values widened by LibTorch (an independent conversion).
struct AllValues {
  torch::Tensor stored, widened;
};
AllValues all_finite_values(torch::ScalarType dtype) {
  std::vector<int16_t> bits;
  for (int32_t b = 0; b < 65536; ++b) {
    const uint16_t u = static_cast<uint16_t>(b);
    const bool finite = dtype == torch::kFloat16 ? (u & 0x7c00u) != 0x7c00u : (u & 0x7f80u) != 0x7f80u;
    if (finite) bits.push_back(static_cast<int16_t>(u));
  }
  while (bits.size() % 16) bits.push_back(0);
  const torch::Tensor raw = torch::tensor(bits, torch::kInt16).view({-1, 16});
  const torch::Tensor stored = raw.view(dtype).contiguous();  // reinterpret the bits
  return {stored, stored.to(torch::kFloat32).contiguous()};
}

TEST_CASE("skinny_linear: fp16 and bf16 weights are widened exactly, for every finite value and ISA", "[transformer]") {
  // Input rows = the 16 unit vectors: y[r][o] = w[o][r] + 15 zero products, i.e. exactly the widened weight.
  std::vector<float> eye(16 * 16, 0.0f);
  for (int i = 0; i < 16; ++i) eye[i * 16 + i] = 1.0f;
  for (torch::ScalarType dtype : {torch::kFloat16, torch::kBFloat16}) {
    const AllValues v = all_finite_values(dtype);
    const int64_t out = v.stored.size(0);
    const WeightView w{v.stored.data_ptr(), dtype == torch::kFloat16 ? WeightDtype::float16 : WeightDtype::bfloat16};
    const float* expected = v.widened.data_ptr<float>();
    for (SkinnyIsa isa : supported_isas()) {
      CAPTURE(static_cast<int>(dtype), static_cast<int>(isa));
      std::vector<float> y(16 * out);
      skinny_linear_with(isa, eye.data(), 16, 16, w, nullptr, out, y.data(), 0, out);
      int64_t wrong = 0;
      for (int64_t o = 0; o < out; ++o)
        for (int64_t r = 0; r < 16; ++r) wrong += y[r * out + o] != expected[o * 16 + r];  // -0 == +0 is fine
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("skinny_linear: a 16-bit matrix gives the fp32 kernel's bits on its widened copy", "[transformer]") {
  // The exactness claim of 16-bit serving: the product of x and a bf16/fp16 matrix is the product with the
  // float32 matrix holding the same values, bit for bit, whatever the rows, slices and ISA; and the negative
  // control: the unrounded float32 matrix gives other bits (the check sees a 16-bit rounding).
  torch::manual_seed(11);
  for (torch::ScalarType dtype : {torch::kFloat16, torch::kBFloat16})
    for (int64_t in : {16, 40, 256})
      for (int64_t rows : {1, 3, 9}) {
        const int64_t out = 37;
        const torch::Tensor w32 = torch::randn({out, in}) / std::sqrt(static_cast<double>(in));
        const torch::Tensor w16 = w32.to(dtype).contiguous(), widened = w16.to(torch::kFloat32).contiguous();
        const torch::Tensor x = torch::randn({rows, in}), b = torch::randn({out});
        const WeightView view{w16.data_ptr(), dtype == torch::kFloat16 ? WeightDtype::float16 : WeightDtype::bfloat16};
        for (SkinnyIsa isa : supported_isas()) {
          CAPTURE(static_cast<int>(dtype), in, rows, out, static_cast<int>(isa));
          std::vector<float> y16(rows * out), y32(rows * out), unrounded(rows * out), alone(out);
          skinny_linear_with(isa, x.data_ptr<float>(), rows, in, view, b.data_ptr<float>(), out, y16.data(), 0, out);
          skinny_linear_with(isa, x.data_ptr<float>(), rows, in, widened.data_ptr<float>(), b.data_ptr<float>(), out,
                             y32.data(), 0, out);
          skinny_linear_with(isa, x.data_ptr<float>(), rows, in, w32.data_ptr<float>(), b.data_ptr<float>(), out,
                             unrounded.data(), 0, out);
          CHECK(std::memcmp(y16.data(), y32.data(), sizeof(float) * y16.size()) == 0);
          CHECK(std::memcmp(unrounded.data(), y32.data(), sizeof(float) * y32.size()) != 0);
          skinny_linear_with(isa, x.data_ptr<float>() + (rows - 1) * in, 1, in, view, b.data_ptr<float>(), out,
                             alone.data(), 0, out);
          CHECK(std::memcmp(alone.data(), y16.data() + (rows - 1) * out, sizeof(float) * out) == 0);
        }
      }
}

TEST_CASE("apply_linear: the kernel at inference for a few rows, LibTorch otherwise", "[transformer]") {
  torch::manual_seed(3);
  torch::nn::Linear layer(torch::nn::LinearOptions(96, 40).bias(true));
  for (int64_t rows : {int64_t{1}, int64_t{5}, kSkinnyLinearMaxRows, kSkinnyLinearMaxRows + 1}) {
    CAPTURE(rows);
    const torch::Tensor x = torch::randn({1, rows, 96});
    torch::Tensor reference;
    {
      torch::NoGradGuard no_grad;
      reference = torch::nn::functional::linear(x.to(torch::kFloat64), layer->weight.to(torch::kFloat64),
                                                layer->bias.to(torch::kFloat64));
    }
    c10::InferenceMode inference;
    const torch::Tensor y = apply_linear(layer, x);
    CHECK(y.sizes() == torch::IntArrayRef({1, rows, 40}));
    CHECK((y.to(torch::kFloat64) - reference).abs().max().item<double>() < 1e-4);
  }
  // Training keeps LibTorch's autograd.
  const torch::Tensor x = torch::randn({2, 3, 96});
  const torch::Tensor y = apply_linear(layer, x);
  CHECK(y.requires_grad());
  // A strided input (a transposed view) is read correctly.
  c10::InferenceMode inference;
  const torch::Tensor xt = torch::randn({96, 4}).t();
  CHECK(torch::allclose(apply_linear(layer, xt), torch::nn::functional::linear(xt, layer->weight, layer->bias), 1e-5,
                        1e-5));
}

}  // namespace
}  // namespace specula
