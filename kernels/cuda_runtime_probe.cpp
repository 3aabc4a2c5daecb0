// The CUDA runtime half of device selection; compiled only with -DSPECULA_CUDA=ON (links CUDA::cudart).
#include <cuda_runtime_api.h>

#include <mutex>
#include <string>

#include "kernels/cuda_device.h"

namespace specula {

bool cuda_device_has_clusters() {
  static std::mutex mutex;
  static int known[64] = {};  // 0 unknown, 1 no, 2 yes
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
    cudaGetLastError();  // clear it: the launch that follows reports the device's state itself
    return false;
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (known[device] == 0) {
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess;
    if (!ok) cudaGetLastError();
    known[device] = ok && major >= 9 ? 2 : 1;
  }
  return known[device] == 2;
}

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
