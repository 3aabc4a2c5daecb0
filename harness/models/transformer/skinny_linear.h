// y = x W^T + b for a few rows x: the linear layers of a decoding step (1 row) and of a verification step
// (K + 1 rows, or a token tree). Torch-free.
//
// Why not the BLAS gemm LibTorch calls: at a handful of rows a gemm packs the whole weight matrix into a
// scratch buffer on every call (OpenBLAS sgemm_incopy: ~40% of a decoding step on the small bundled target),
// so its cost grows with the rows while the weight stream should dominate. Decoding a transformer is bound by
// reading the weights once per step; that is the regime where verifying K + 1 rows costs about one row and
// speculation pays (Leviathan et al. 2023, §3.3). This kernel reads each weight once from memory and uses it
// for every input row while it sits in cache.
//
// Two layouts (WeightLayout below). Inference models keep their matrices in panels of 16 outputs
// (skinny_linear_panel_tiles.h: each output one sequential sum over `in`, input values broadcast against 16
// outputs at once); row-major matrices (training, tests, matrices whose output count is not a multiple of 16)
// take 16-lane dot products (skinny_linear_tiles.h). In either, an output's summation order depends only on
// `in`: a token's outputs do not depend on the rows computed beside it or on how columns are split.
//
// Weights are read as stored: fp32, fp16 or bf16. 16-bit weights are widened to fp32 in registers (exact) and
// accumulated in fp32, so they halve the bytes a step streams and give the same bits as the fp32 kernel on
// the widened matrix. The kernel is compiled for AVX-512, AVX2 + FMA + F16C and the x86-64 baseline from one
// source and picked at first use; the two FMA variants give identical results, the baseline rounds each
// product before adding it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace specula {

// How a weight matrix is stored in memory.
enum class WeightDtype : uint8_t { float32, float16, bfloat16 };
size_t weight_dtype_bytes(WeightDtype dtype);
const char* weight_dtype_name(WeightDtype dtype);  // "float32" | "float16" | "bfloat16"

// How a matrix's elements are ordered in memory.
//  - row_major: [out, in], as torch::nn::Linear stores it.
//  - panels: [out / 16, in, 16], panels of kPanelOutputs outputs: element (o, i) at ((o / 16) * in + i) * 16 +
//    o % 16 (out a multiple of 16; weight_panels.h packs a matrix into it). Each step along `in` reads one
//    contiguous 16-output vector, which the kernel multiplies by a broadcast input value: one sequential fp32
//    sum per output and no lane reduction, so 15 rows cost far less than 15 dot products against the same
//    bytes.
enum class WeightLayout : uint8_t { row_major, panels };
constexpr int64_t kPanelOutputs = 16;

// A matrix of `out` x `in` values in its stored dtype and layout.
struct WeightView {
  const void* data = nullptr;
  WeightDtype dtype = WeightDtype::float32;
  WeightLayout layout = WeightLayout::row_major;
};

// Rows [0, rows) of x [rows, in] (row-major) times w [out, in], plus bias [out] when not null, for the output
// columns [out_begin, out_end); y is [rows, out] row-major. With panel weights, out, out_begin and out_end
// must be multiples of kPanelOutputs (checked).
void skinny_linear(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out, float* y,
                   int64_t out_begin, int64_t out_end);
inline void skinny_linear(const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out,
                          float* y, int64_t out_begin, int64_t out_end) {
  skinny_linear(x, rows, in, WeightView{w, WeightDtype::float32}, bias, out, y, out_begin, out_end);
}

// The variants, for tests and benchmarks. skinny_linear uses the best one the CPU supports, or the one named
// by the environment variable SPECULA_SKINNY_ISA (baseline | avx2 | avx512), read once: how AVX2-only figures
// are measured on an AVX-512 machine.
enum class SkinnyIsa { baseline, avx2, avx512 };
bool skinny_linear_supported(SkinnyIsa isa);
const char* skinny_isa_name(SkinnyIsa isa);
SkinnyIsa skinny_linear_isa();  // the variant skinny_linear runs
void skinny_linear_with(SkinnyIsa isa, const float* x, int64_t rows, int64_t in, WeightView w, const float* bias,
                        int64_t out, float* y, int64_t out_begin, int64_t out_end);
inline void skinny_linear_with(SkinnyIsa isa, const float* x, int64_t rows, int64_t in, const float* w,
                               const float* bias, int64_t out, float* y, int64_t out_begin, int64_t out_end) {
  skinny_linear_with(isa, x, rows, in, WeightView{w, WeightDtype::float32}, bias, out, y, out_begin, out_end);
}

// The layout inference models keep their matrices in: panels, or row_major when the environment variable
// SPECULA_WEIGHT_LAYOUT says so (read once): how the two layouts are compared end to end.
WeightLayout decoding_weight_layout();
const char* weight_layout_name(WeightLayout layout);  // "panels" | "row_major"

// Above this many rows LibTorch's gemm wins (its packing is amortised over the rows).
constexpr int64_t kSkinnyLinearMaxRows = 32;

}  // namespace specula
