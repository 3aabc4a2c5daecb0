// The few-row linear kernel for avx2: skinny_linear_tiles.h and skinny_linear_panel_tiles.h compiled with
// -march=x86-64-v3 (set per file in harness/CMakeLists.txt), tiles of 8-float vectors sized to the ISA's
// register file: 4 x 3 on row-major weights, 6 rows of 2 vectors on panels (12 of the 16 registers hold sums).
#include "harness/models/transformer/skinny_linear_panel_tiles.h"

namespace specula::skinny_isa {

void skinny_linear_avx2(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out,
                        float* y, int64_t out_begin, int64_t out_end) {
  skinny_any<8, 4, 3, 6>(x, rows, in, w, bias, out, y, out_begin, out_end);
}

// Whether this kernel reads x step-major on panel weights: skinny_linear.cpp hands x over accordingly.
extern const bool avx2_panels_step_major = kStepMajorX<8>;

}  // namespace specula::skinny_isa
