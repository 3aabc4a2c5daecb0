// The few-row linear kernel for avx512: skinny_linear_tiles.h and skinny_linear_panel_tiles.h compiled with
// -march=x86-64-v4 (set per file in harness/CMakeLists.txt). Row-major weights: tiles of 8 weight rows x 3
// input rows of 16-float vectors (24 of the 32 vector registers hold sums: more independent multiply-add chains
// than 4 x 4 keeps in flight). Panels: one 16-float vector per panel, several panels per tile (panel_columns
// says how many for each row count), tiles of up to 8 rows from 5 rows on.
#include "harness/models/transformer/skinny_linear_panel_tiles.h"

namespace specula::skinny_isa {

void skinny_linear_avx512(const float* x, int64_t rows, int64_t in, WeightView w, const float* bias, int64_t out,
                          float* y, int64_t out_begin, int64_t out_end) {
  skinny_any<16, 8, 3, 8>(x, rows, in, w, bias, out, y, out_begin, out_end);
}

// Whether this kernel reads x step-major on panel weights: skinny_linear.cpp hands x over accordingly.
extern const bool avx512_panels_step_major = kStepMajorX<16>;

}  // namespace specula::skinny_isa
