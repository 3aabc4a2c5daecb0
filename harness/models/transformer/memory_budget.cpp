#include "harness/models/transformer/memory_budget.h"

#include <cstdio>

#include "harness/models/transformer/transformer_config.h"
#include "kernels/shared/error.h"
#include "kernels/shared/host_memory.h"

namespace specula {

ModelMemoryPlan plan_model_memory(const TransformerConfig& c) {
  ModelMemoryPlan plan;
  plan.parameters = c.parameter_count();
  plan.parameter_bytes = plan.parameters * 4;
  // Each block's RotaryEmbedding holds cos and sin [max_seq_len, head_dim / 2] in fp32.
  plan.buffer_bytes = int64_t{c.n_layers} * 2 * c.max_seq_len * (c.head_dim() / 2) * 4;
  plan.kv_cache_bytes = int64_t{2} * c.n_layers * c.kv_heads() * c.max_seq_len * c.head_dim() * 4;
  return plan;
}

void check_model_fits(const ModelMemoryPlan& plan, const std::string& model, int64_t available) {
  if (available < 0) available = mem_available_bytes();
  if (available < 0 || plan.total() <= available) return;
  fail(model, ": the model needs ", format_bytes(plan.total()), " (", plan.parameters,
       " parameters x 4 bytes in float32 = ", format_bytes(plan.parameter_bytes), ", RoPE tables ",
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
