// y = x W^T + b for a few rows x: the linear layers of a decoding step (1 row) and of a verification step
// (K + 1 rows, or a token tree). Torch-free.
//
// Why not the BLAS gemm LibTorch calls: at a handful of rows a gemm packs the whole weight matrix into a
// scratch buffer on every call (OpenBLAS sgemm_incopy: ~40% of a decoding step on the bundled target), so
// its cost grows with the rows while the weight stream should dominate. Decoding a transformer is bound by
// reading the weights once per step; that is the regime where verifying K + 1 rows costs about one row and
// speculation pays (Leviathan et al. 2023, §3.3). This kernel reads each weight row once from memory and
// takes its dot product with every input row while the row sits in L1.
//
// Each output element is one 16-lane dot product whose summation order depends only on `in`: a token gets
// bit-identical outputs whether it is computed alone or among other rows, so a 1-token decoding step and a
// (K + 1)-token verification step agree exactly on the logits they share. The kernel is compiled for
// AVX-512, AVX2 + FMA and the x86-64 baseline (tiles sized to each register file) and picked at first use;
// the two FMA variants give identical results, the baseline rounds each product before adding it.
#pragma once

#include <cstdint>

namespace specula {

// Rows [0, rows) of x [rows, in] (row-major) times w [out, in] (row-major, as torch::nn::Linear stores it),
// plus bias [out] when not null, for the output columns [out_begin, out_end); y is [rows, out] row-major.
void skinny_linear(const float* x, int64_t rows, int64_t in, const float* w, const float* bias, int64_t out,
                   float* y, int64_t out_begin, int64_t out_end);

// The variants, for tests and benchmarks: skinny_linear uses the best one the CPU supports.
enum class SkinnyIsa { baseline, avx2, avx512 };
bool skinny_linear_supported(SkinnyIsa isa);
void skinny_linear_with(SkinnyIsa isa, const float* x, int64_t rows, int64_t in, const float* w, const float* bias,
                        int64_t out, float* y, int64_t out_begin, int64_t out_end);

// Above this many rows LibTorch's gemm wins (its packing is amortised over the rows).
constexpr int64_t kSkinnyLinearMaxRows = 32;

}  // namespace specula
