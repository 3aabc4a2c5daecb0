// The CUDA runtime half of device selection; compiled only with -DSPECULA_CUDA=ON (links CUDA::cudart).
#include <cuda_runtime_api.h>

#include <string>

namespace specula {
namespace detail {

int cuda_probe(std::string* reason, std::string* name) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    // e.g. "CUDA driver version is insufficient for CUDA runtime version" on a machine without a GPU.
    *reason = cudaGetErrorString(status);
    cudaGetLastError();  // clear the sticky error so later calls see a clean state
    return 0;
  }
  if (count == 0) *reason = "the CUDA runtime reports 0 devices";
  cudaDeviceProp prop{};
  if (count > 0 && cudaGetDeviceProperties(&prop, 0) == cudaSuccess) *name = prop.name;
  return count;
}

}  // namespace detail
}  // namespace specula
