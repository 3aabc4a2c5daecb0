// Every CUDA call's status is checked: a failure becomes an Error naming the call and the runtime's
// message. Internal to the CUDA sources (includes the CUDA runtime header).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/shared/error.h"

namespace specula {

inline void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(what, ": ", cudaGetErrorName(status), ": ", cudaGetErrorString(status));
}

}  // namespace specula
