#include "harness/models/transformer/skinny_linear.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/shared/error.h"

namespace specula {
namespace skinny_isa {
// One per file, each compiled for its ISA (skinny_linear_<isa>.cpp), with whether it reads x step-major on panel
// weights (reads_step_major below; the AVX-512 one does); otherwise x is as skinny_linear takes it.
void skinny_linear_baseline(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out,
                            float* y, int64_t out_begin, int64_t out_end);
extern const bool baseline_panels_step_major;
#if defined(SPECULA_SKINNY_MULTI_ISA)
void skinny_linear_avx2(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out,
                        float* y, int64_t out_begin, int64_t out_end);
void skinny_linear_avx512(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out,
                          float* y, int64_t out_begin, int64_t out_end);
extern const bool avx2_panels_step_major, avx512_panels_step_major;
#endif
}  // namespace skinny_isa

namespace {

using Kernel = void (*)(const float*, int64_t, int64_t, WeightView, const float*, int64_t, float*, int64_t, int64_t);

Kernel kernel_for(SkinnyIsa isa) {
  switch (isa) {
#if defined(SPECULA_SKINNY_MULTI_ISA)
    case SkinnyIsa::avx512:
      return skinny_isa::skinny_linear_avx512;
    case SkinnyIsa::avx2:
      return skinny_isa::skinny_linear_avx2;
#endif
    default:
      return skinny_isa::skinny_linear_baseline;
  }
}

SkinnyIsa chosen_isa() {
  if (const char* forced = std::getenv("SPECULA_SKINNY_ISA"); forced && *forced) {
    for (SkinnyIsa isa : {SkinnyIsa::avx512, SkinnyIsa::avx2, SkinnyIsa::baseline})
      if (std::strcmp(forced, skinny_isa_name(isa)) == 0) {
        if (!skinny_linear_supported(isa)) fail("SPECULA_SKINNY_ISA=", forced, ": this CPU does not support it");
        return isa;
      }
    fail("SPECULA_SKINNY_ISA=", forced, ": expected baseline, avx2 or avx512");
  }
  for (SkinnyIsa isa : {SkinnyIsa::avx512, SkinnyIsa::avx2})
    if (skinny_linear_supported(isa)) return isa;
  return SkinnyIsa::baseline;
}

// Panels hold 16 outputs each: a column range must start and end on a panel's edge.
void check_columns(WeightView w, int64_t out, int64_t out_begin, int64_t out_end) {
  if (w.layout != WeightLayout::panels) return;
  if (out % kPanelOutputs != 0 || out_begin % kPanelOutputs != 0 || out_end % kPanelOutputs != 0)
    fail("skinny_linear: panel weights need out, out_begin and out_end divisible by ", kPanelOutputs, ", got ", out,
         ", ", out_begin, " and ", out_end);
}

// Whether the isa's kernel reads x step-major, x[i * rows + r], on w (the AVX-512 panel kernel:
// skinny_linear_panel_tiles.h, kStepMajorX, one pointer for a tile's rows instead of one each, which spill), as
// the kernel file itself says. Copying x is rows x in floats against rows x in x out multiply-adds.
bool reads_step_major(SkinnyIsa isa, WeightView w) {
  if (w.layout != WeightLayout::panels) return false;
  switch (isa) {
#if defined(SPECULA_SKINNY_MULTI_ISA)
    case SkinnyIsa::avx512:
      return skinny_isa::avx512_panels_step_major;
    case SkinnyIsa::avx2:
      return skinny_isa::avx2_panels_step_major;
#endif
    default:
      return skinny_isa::baseline_panels_step_major;
  }
}

const float* step_major(const float* x, int64_t rows, int64_t in) {
  if (rows == 1) return x;  // the same layout
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(rows * in));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < in; ++i) scratch[i * rows + r] = x[r * in + i];
  return scratch.data();
}

// x as the isa's kernel reads it for w's layout.
const float* kernel_input(SkinnyIsa isa, const float* x, int64_t rows, int64_t in, WeightView w) {
  return reads_step_major(isa, w) ? step_major(x, rows, in) : x;
}

}  // namespace

size_t weight_dtype_bytes(WeightDtype dtype) { return dtype == WeightDtype::float32 ? 4 : 2; }

const char* weight_dtype_name(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::float32:
      return "float32";
    case WeightDtype::float16:
      return "float16";
    case WeightDtype::bfloat16:
      return "bfloat16";
  }
  return "?";
}

const char* skinny_isa_name(SkinnyIsa isa) {
  switch (isa) {
    case SkinnyIsa::avx512:
      return "avx512";
    case SkinnyIsa::avx2:
      return "avx2";
    case SkinnyIsa::baseline:
      return "baseline";
  }
  return "?";
}

bool skinny_linear_supported(SkinnyIsa isa) {
#if defined(SPECULA_SKINNY_MULTI_ISA)
  __builtin_cpu_init();
  switch (isa) {
    // The ISA levels the kernel files are compiled for (-march=x86-64-v4 / -v3), checked as such.
    case SkinnyIsa::avx512:
      return __builtin_cpu_supports("x86-64-v4");
    case SkinnyIsa::avx2:
      return __builtin_cpu_supports("x86-64-v3");
    case SkinnyIsa::baseline:
      return true;
  }
  return false;
#else
  return isa == SkinnyIsa::baseline;
#endif
}

const char* weight_layout_name(WeightLayout layout) { return layout == WeightLayout::panels ? "panels" : "row_major"; }

WeightLayout decoding_weight_layout() {
  static const WeightLayout layout = [] {
    const char* forced = std::getenv("SPECULA_WEIGHT_LAYOUT");
    if (!forced || !*forced) return WeightLayout::panels;
    for (WeightLayout l : {WeightLayout::panels, WeightLayout::row_major})
      if (std::strcmp(forced, weight_layout_name(l)) == 0) return l;
    fail("SPECULA_WEIGHT_LAYOUT=", forced, ": expected panels or row_major");
  }();
  return layout;
}

SkinnyIsa skinny_linear_isa() {
  static const SkinnyIsa isa = chosen_isa();
  return isa;
}

void skinny_linear_with(SkinnyIsa isa, const float* x, int64_t rows, int64_t in, WeightView w, const float* bias,
                        int64_t out, float* y, int64_t out_begin, int64_t out_end) {
  if (!skinny_linear_supported(isa)) fail("skinny_linear: this CPU lacks the instruction set asked for");
  check_columns(w, out, out_begin, out_end);
  kernel_for(isa)(kernel_input(isa, x, rows, in, w), rows, in, w, bias, out, y, out_begin, out_end);
}

void skinny_linear(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out, float* y,
                   int64_t out_begin, int64_t out_end) {
  static const Kernel kernel = kernel_for(skinny_linear_isa());
  check_columns(w, out, out_begin, out_end);
  kernel(kernel_input(skinny_linear_isa(), x, rows, in, w), rows, in, w, bias, out, y, out_begin, out_end);
}

}  // namespace specula
