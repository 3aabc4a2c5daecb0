#include "harness/bench/torch_verify_baseline.h"

#include "harness/bench/torch_bench_device.h"
#include "kernels/shared/error.h"

namespace specula::bench {
namespace {

struct Verified {
  torch::Tensor accepted;  // [B] int64
  torch::Tensor token;     // [B] int64
};

// p [B, K + 1, V], q [B, K, V], drafts [B, K] int64, u [B, K]: Leviathan et al.'s rule for the whole batch.
Verified verify(const torch::Tensor& p, const torch::Tensor& q, const torch::Tensor& drafts, const torch::Tensor& u) {
  const int64_t K = drafts.size(1);
  const torch::Tensor index = drafts.unsqueeze(-1);
  const torch::Tensor p_d = p.narrow(1, 0, K).gather(2, index).squeeze(-1);
  const torch::Tensor q_d = q.gather(2, index).squeeze(-1);
  // Accept draft i while every draft up to i passed u < p/q (u * q < p avoids a division by q = 0).
  const torch::Tensor passed = (u * q_d < p_d).to(torch::kLong);
  const torch::Tensor accepted = passed.cumprod(1).sum(1);  // [B]: the first rejection's index, or K
  // The row the emitted token comes from: residual (p - q)+ at the rejection, p_{K+1} after K acceptances.
  const torch::Tensor row = accepted.view({-1, 1, 1}).expand({-1, 1, p.size(2)});
  const torch::Tensor p_row = p.gather(1, row).squeeze(1);
  const torch::Tensor q_padded = torch::cat({q, torch::zeros_like(q.narrow(1, 0, 1))}, 1);
  const torch::Tensor q_row = q_padded.gather(1, row).squeeze(1);
  torch::Tensor weights = (p_row - q_row).clamp_min(0.0);
  // An empty residual (p <= q everywhere): draw from p, as the CPU verifier does.
  const torch::Tensor empty = weights.sum(1, true) <= 0;
  weights = torch::where(empty, p_row, weights);
  return {accepted, weights.multinomial(1).squeeze(1)};
}

}  // namespace

double time_torch_chain_verify(int32_t vocab, int32_t batch, int32_t draft, const std::string& device, int iterations) {
  if (vocab < 1 || batch < 1 || draft < 1 || iterations < 1)
    fail("LibTorch verify baseline: vocab, batch, draft and iterations must be >= 1");
  const torch::Device d = torch_bench_device(device, "LibTorch verify baseline");
  torch::NoGradGuard no_grad;
  torch::manual_seed(20260102);
  const torch::Tensor p = (torch::randn({batch, draft + 1, vocab}) * 0.5).exp();
  const torch::Tensor q = (torch::randn({batch, draft, vocab}) * 0.5).exp();
  const torch::Tensor p_norm = (p / p.sum(2, true)).to(d), q_norm = (q / q.sum(2, true)).to(d);
  const torch::Tensor drafts = q_norm.view({-1, vocab}).multinomial(1).view({batch, draft});
  const auto once = [&] { return verify(p_norm, q_norm, drafts, torch::rand({batch, draft}, p_norm.options())); };
  return mean_us_per_batch(once, d, iterations);
}

TorchChainResult torch_chain_verify(const std::vector<float>& p, const std::vector<float>& q,
                                    const std::vector<int64_t>& drafts, const std::vector<float>& uniforms,
                                    int32_t vocab, int32_t draft) {
  const int64_t batch = static_cast<int64_t>(drafts.size()) / draft;
  if (vocab < 1 || draft < 1 || batch * draft != static_cast<int64_t>(drafts.size()) ||
      p.size() != static_cast<size_t>(batch * (draft + 1) * vocab) ||
      q.size() != static_cast<size_t>(batch * draft * vocab) || uniforms.size() != drafts.size())
    fail("LibTorch verify baseline: p, q, drafts and uniforms must be [B, K + 1, V], [B, K, V], [B, K], [B, K]");
  torch::NoGradGuard no_grad;
  const auto tensor = [](const auto& v, std::vector<int64_t> shape, torch::ScalarType type) {
    using T = typename std::decay_t<decltype(v)>::value_type;
    return torch::from_blob(const_cast<T*>(v.data()), shape, type).clone();
  };
  const Verified r =
      verify(tensor(p, {batch, draft + 1, vocab}, torch::kFloat), tensor(q, {batch, draft, vocab}, torch::kFloat),
             tensor(drafts, {batch, draft}, torch::kLong), tensor(uniforms, {batch, draft}, torch::kFloat));
  TorchChainResult out;
  out.accepted.assign(r.accepted.data_ptr<int64_t>(), r.accepted.data_ptr<int64_t>() + batch);
  out.token.assign(r.token.data_ptr<int64_t>(), r.token.data_ptr<int64_t>() + batch);
  return out;
}

}  // namespace specula::bench
