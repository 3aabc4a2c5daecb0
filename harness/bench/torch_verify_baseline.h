// The baseline beside `specula bench verify --device cuda`'s chain cases (kernels/cuda_bench.h): token-wise
// rejection sampling of a batch of K-token chains done by LibTorch's tensor operations, as a verifier written in
// PyTorch does it (vLLM's rejection sampler): gather p(d) and q(d), accept while u < p/q (a cumulative product
// finds the first rejection), the residual norm((p - q)+) of the rejected row (or p_{K+1} after K acceptances)
// gathered per row, multinomial. Torch-free header: the `specula` executable reaches it through the LibTorch
// module's entries.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specula::bench {

// Mean microseconds per batch of the LibTorch chain verifier on [batch, K + 1, vocab] random p rows and
// [batch, K, vocab] q rows with drafts drawn from q, on `device` ("cuda" or "cpu"): 3 untimed batches, then
// `iterations` back to back and one synchronisation (favours the baseline, as time_torch_sampler). Throws Error
// when the device is unusable.
double time_torch_chain_verify(int32_t vocab, int32_t batch, int32_t draft, const std::string& device, int iterations);

// One batch of the LibTorch chain verifier on host arrays (the CPU): p [B, K + 1, V], q [B, K, V], drafts [B, K],
// uniforms [B, K]. Returns, per row, the accepted count and the emitted token after them (the correction, or the
// bonus token when all K were accepted). What the tests compare with the rule.
struct TorchChainResult {
  std::vector<int64_t> accepted;
  std::vector<int64_t> token;
};
TorchChainResult torch_chain_verify(const std::vector<float>& p, const std::vector<float>& q,
                                    const std::vector<int64_t>& drafts, const std::vector<float>& uniforms,
                                    int32_t vocab, int32_t draft);

}  // namespace specula::bench
