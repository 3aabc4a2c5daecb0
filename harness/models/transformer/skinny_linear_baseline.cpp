// The few-row linear kernel for baseline: skinny_linear_tiles.h and skinny_linear_panel_tiles.h compiled with
// -march=x86-64 (set per file in harness/CMakeLists.txt), tiles of 4-float vectors sized to the ISA's register
// file: 3 x 3 on row-major weights, 3 rows of 4 vectors on panels.
#include "harness/models/transformer/skinny_linear_panel_tiles.h"

namespace specula::skinny_isa {

void skinny_linear_baseline(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out,
                            float* y, int64_t out_begin, int64_t out_end) {
  skinny_any<4, 3, 3, 3>(x, rows, in, w, bias, out, y, out_begin, out_end);
}

// Whether this kernel reads x step-major on panel weights: skinny_linear.cpp hands x over accordingly.
extern const bool baseline_panels_step_major = kStepMajorX<4>;

}  // namespace specula::skinny_isa
