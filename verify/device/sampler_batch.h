// From the CPU pipeline's inputs (SamplingParams, TokenHistory, RandomKey per row) to the fused sampler's
// host arrays (kernels/sampler_kernels.h). Everything the kernel does not implement is refused here by
// name ("not supported on cuda: typical_p"), so no parameter is ever dropped silently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/sampler_kernels.h"
#include "verify/sampling/categorical.h"
#include "verify/sampling/sampling_params.h"
#include "verify/sampling/token_history.h"

namespace specula {

// A setting the fused kernel cannot apply: typical_p, tfs_z, mirostat, dynatemp (when not greedy), bad_words,
// a constraint, a token listed twice in logit_bias. The one list of them: the batch builder and the driver's
// device check (verify/device/batch_verifier.h) both refuse from it.
struct UnsupportedSetting {
  std::string parameter;  // the SamplingParams field as options and experiment keys name it ("dynatemp_range")
  std::string what;       // the refusal's words ("dynatemp", "logit_bias lists token 3 more than once")
  std::string value;      // the value that was set ("0.5"), empty where it says nothing
};
std::optional<UnsupportedSetting> unsupported_on_cuda(const SamplingParams& params);

// Throws Error "not supported on cuda: <what>" for the first unsupported setting.
void check_supported_on_cuda(const SamplingParams& params);

struct SamplerBatchRow {
  const SamplingParams* params = nullptr;
  const TokenHistory* history = nullptr;
  RandomKey key;  // the row's draw: philox_uniform(key.seed, key.stream, key.offset)
};

// Host arrays of a batch. Optional arrays are empty when no row needs them; otherwise full [B, ...]
// with the row's flag set only where the row uses them.
struct SamplerBatch {
  int32_t batch = 0;
  int32_t vocab = 0;
  std::vector<SamplerRowParams> rows;  // [B]
  std::vector<uint32_t> allowed;       // [B, W] or empty
  std::vector<uint32_t> banned;        // [B, W] or empty
  std::vector<uint32_t> prompt;        // [B, W] or empty
  std::vector<int32_t> output_counts;  // [B, V] or empty
  std::vector<float> logit_bias;       // [B, V] or empty

  // Validates every row's params (SamplingParams::validate) and its CUDA support; throws Error naming
  // the row and the parameter.
  SamplerBatch(int32_t vocab, const std::vector<SamplerBatchRow>& rows);

  // Kernel params over these host arrays, for run_fused_sampler_host.
  SamplerKernelParams host_params(const float* logits, float* probs, int32_t* tokens, int32_t* status) const;
};

}  // namespace specula
