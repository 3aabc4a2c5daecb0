// How much memory a model may take, checked before it is allocated: what loading a transformer needs, the
// kernel's MemAvailable estimate, and byte counts people can read. Torch-free; `transformer:` and `hf:` share it.
#pragma once

#include <cstdint>
#include <string>

#include "kernels/shared/host_memory.h"  // mem_available_bytes

namespace specula {

struct TransformerConfig;

// What loading a transformer allocates at its peak: its parameters as held (matrices at `matrix_bytes` an element,
// norm weights and biases in float32), the float32 matrices that live only while the model is built (a 16-bit
// model is built one block at a time: one block's matrices, or the untied head, in float32), what the loader
// reads the weights into (`source_bytes`: a transformer checkpoint's archive, read whole; an hf folder's files
// are mapped, 0), the RoPE tables and one session's preallocated KV cache. Loaders convert and check weights in
// chunks of at most kLoadChunkElements, whose temporaries are not counted.
struct ModelMemoryPlan {
  int64_t parameters = 0;
  int64_t parameter_bytes = 0;  // as held
  int64_t build_bytes = 0;      // float32 matrices alive only while the model is built (0 at float32)
  int64_t source_bytes = 0;     // the weights as read, beside the model (set by the loader)
  int64_t buffer_bytes = 0;     // RoPE cos/sin tables
  int64_t kv_cache_bytes = 0;   // one session's KV cache
  int64_t total() const { return parameter_bytes + build_bytes + source_bytes + buffer_bytes + kv_cache_bytes; }
};
constexpr int64_t kLoadChunkElements = int64_t{1} << 20;
// matrix_bytes: 4 (float32) or 2 (float16, bfloat16).
ModelMemoryPlan plan_model_memory(const TransformerConfig& config, int matrix_bytes = 4);

// Throws Error naming `model` and every part of the plan when it needs more than `available` bytes (-1: the
// MemAvailable estimate; no check where that is unknown).
void check_model_fits(const ModelMemoryPlan& plan, const std::string& model, int64_t available = -1);

// "512 B", "3.4 KiB", "1.25 GiB".
std::string format_bytes(int64_t bytes);

}  // namespace specula
