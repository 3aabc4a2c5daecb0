#include "harness/models/transformer/memory_budget.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "harness/models/transformer/transformer_config.h"
#include "kernels/shared/error.h"
#include "kernels/shared/host_memory.h"

namespace specula {

ModelMemoryPlan plan_model_memory(const TransformerConfig& c, int matrix_bytes) {
  if (matrix_bytes != 4 && matrix_bytes != 2) fail("plan_model_memory: matrix_bytes ", matrix_bytes, " is not 4 or 2");
  ModelMemoryPlan plan;
  plan.parameters = c.parameter_count();
  const int64_t d = c.d_model, V = c.vocab_size, ff = c.d_ff;
  const int64_t qkv = static_cast<int64_t>(c.n_heads + 2 * c.kv_heads()) * c.head_dim();
  const int64_t vectors = int64_t{c.n_layers} * (2 * d + (c.qkv_bias ? qkv : 0)) + d;  // norms, biases
  plan.parameter_bytes = (plan.parameters - vectors) * matrix_bytes + vectors * 4;
  if (matrix_bytes < 4) {
    // The narrowed copies are the parameters themselves (counted as held); only the float32 originals are extra.
    const int64_t block = d * qkv + d * d + 2 * d * ff + ff * d;
    plan.build_bytes = std::max(block, c.tie_embeddings ? 0 : V * d) * 4;
  }
  // Each block's RotaryEmbedding holds cos and sin [max_seq_len, head_dim / 2] in fp32.
  plan.buffer_bytes = int64_t{c.n_layers} * 2 * c.max_seq_len * (c.head_dim() / 2) * 4;
  plan.kv_cache_bytes = int64_t{2} * c.n_layers * c.kv_heads() * c.max_seq_len * c.head_dim() * 4;
  return plan;
}

void check_model_fits(const ModelMemoryPlan& plan, const std::string& model, int64_t available) {
  if (available < 0) available = mem_available_bytes();
  if (available < 0 || plan.total() <= available) return;
  std::string parts =
      std::to_string(plan.parameters) + " parameters = " + format_bytes(plan.parameter_bytes) + " as held";
  if (plan.build_bytes > 0) parts += ", " + format_bytes(plan.build_bytes) + " more while it is built";
  if (plan.source_bytes > 0) parts += ", the weights file read whole " + format_bytes(plan.source_bytes);
  fail(model, ": the model needs ", format_bytes(plan.total()), " (", parts, ", RoPE tables ",
       format_bytes(plan.buffer_bytes), ", one session's KV cache ", format_bytes(plan.kv_cache_bytes), ") but only ",
       format_bytes(available), " is available (MemAvailable)");
}

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
  return buf;
}

}  // namespace specula
