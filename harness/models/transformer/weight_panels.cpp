#include "harness/models/transformer/weight_panels.h"

#include <cstring>
#include <vector>

#include "harness/models/transformer/skinny_linear.h"
#include "kernels/shared/error.h"

namespace specula {
namespace {

constexpr int64_t P = kPanelOutputs;

// Row-major element (j, i) of a 16-row block <-> panel element i * 16 + j, one block at a time.
template <typename T>
void reorder(T* data, int64_t out, int64_t in, bool pack) {
  std::vector<T> block(static_cast<size_t>(P * in));
  for (int64_t o = 0; o < out; o += P) {
    T* base = data + o * in;
    std::memcpy(block.data(), base, block.size() * sizeof(T));
    for (int64_t j = 0; j < P; ++j)
      for (int64_t i = 0; i < in; ++i) {
        if (pack)
          base[i * P + j] = block[j * in + i];
        else
          base[j * in + i] = block[i * P + j];
      }
  }
}

void reorder_any(void* data, int64_t out, int64_t in, size_t element_bytes, bool pack) {
  if (out % P != 0 || out < 0 || in < 0)
    fail("weight panels: a [", out, ", ", in, "] matrix does not split into panels of ", P, " outputs");
  if (element_bytes == 4) return reorder(static_cast<uint32_t*>(data), out, in, pack);
  if (element_bytes == 2) return reorder(static_cast<uint16_t*>(data), out, in, pack);
  fail("weight panels: elements of ", element_bytes, " bytes (expected 2 or 4)");
}

}  // namespace

void pack_into_panels(void* data, int64_t out, int64_t in, size_t element_bytes) {
  reorder_any(data, out, in, element_bytes, true);
}

void unpack_from_panels(void* data, int64_t out, int64_t in, size_t element_bytes) {
  reorder_any(data, out, in, element_bytes, false);
}

}  // namespace specula
