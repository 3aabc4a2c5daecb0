// Reorders a row-major [out, in] weight matrix into panels of kPanelOutputs outputs ([out / 16, in, 16],
// WeightLayout::panels in skinny_linear.h) and back, in place. Torch-free.
//
// Panel p holds rows [16 p, 16 p + 16) of the row-major matrix, which occupy the same bytes, so each panel is
// reordered through a scratch copy of itself alone: packing a model takes no second copy of its weights.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specula {

// data: out * in elements of `element_bytes` (2 or 4) each; out must be a multiple of kPanelOutputs.
void pack_into_panels(void* data, int64_t out, int64_t in, size_t element_bytes);
void unpack_from_panels(void* data, int64_t out, int64_t in, size_t element_bytes);

}  // namespace specula
