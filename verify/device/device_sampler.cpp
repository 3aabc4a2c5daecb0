#include "verify/device/device_sampler.h"

#include <memory>
#include <vector>

#include "kernels/cuda_device.h"
#include "kernels/shared/error.h"

#if defined(SPECULA_HAS_CUDA)
#include "kernels/cuda_check.h"
#endif

namespace specula {

#if defined(SPECULA_HAS_CUDA)
namespace {

// A device buffer that frees itself; every allocation and copy is checked.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : n_(n) {
    if (n_) cuda_check(cudaMalloc(reinterpret_cast<void**>(&ptr_), n_ * sizeof(T)), "cudaMalloc");
  }
  DeviceArray(const T* host, size_t n) : DeviceArray(n) {
    if (n_) cuda_check(cudaMemcpy(ptr_, host, n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  ~DeviceArray() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  void copy_to(T* host) const {
    if (n_) cuda_check(cudaMemcpy(host, ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

template <typename T>
const T* device_or_null(const std::vector<T>& host, std::unique_ptr<DeviceArray<T>>& holder) {
  if (host.empty()) return nullptr;
  holder = std::make_unique<DeviceArray<T>>(host.data(), host.size());
  return holder->get();
}

}  // namespace

void run_fused_sampler_on_device(const SamplerBatch& batch, const float* logits, float* probs, int32_t* tokens) {
  require_cuda_device();
  const size_t bv = static_cast<size_t>(batch.batch) * batch.vocab;
  DeviceArray<float> d_logits(logits, bv), d_probs(bv);
  DeviceArray<SamplerRowParams> d_rows(batch.rows.data(), batch.rows.size());
  DeviceArray<int32_t> d_tokens(batch.batch), d_status(batch.batch);
  std::unique_ptr<DeviceArray<uint32_t>> allowed, banned, prompt;
  std::unique_ptr<DeviceArray<int32_t>> counts;
  std::unique_ptr<DeviceArray<float>> bias;
  SamplerKernelParams p;
  p.logits = d_logits.get();
  p.rows = d_rows.get();
  p.allowed_bitmap = device_or_null(batch.allowed, allowed);
  p.banned_bitmap = device_or_null(batch.banned, banned);
  p.prompt_bitmap = device_or_null(batch.prompt, prompt);
  p.output_counts = device_or_null(batch.output_counts, counts);
  p.logit_bias = device_or_null(batch.logit_bias, bias);
  p.probs = d_probs.get();
  p.tokens = d_tokens.get();
  p.status = d_status.get();
  p.batch = batch.batch;
  p.vocab = batch.vocab;
  launch_fused_sampler(p);
  cuda_check(cudaDeviceSynchronize(), "fused sampler");
  std::vector<int32_t> status(batch.batch);
  d_status.copy_to(status.data());
  check_sampler_status(status.data(), batch.batch);
  d_probs.copy_to(probs);
  d_tokens.copy_to(tokens);
}

#else

void run_fused_sampler_on_device(const SamplerBatch&, const float*, float*, int32_t*) { require_cuda_device(); }

#endif

}  // namespace specula
