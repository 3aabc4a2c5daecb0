// Device selection, after CTranslate2's primitives<Device>: one declaration per operation, a CPU and a
// CUDA definition, the CUDA one compiled only when the build enables it (SPECULA_HAS_CUDA). Asking for
// CUDA where there is none is an Error that says why ("no CUDA device: ..."), never a crash.
// Plain C++: includes no CUDA header.
#pragma once

#include <string>

namespace specula {

// cpu: the reference code paths. cuda: the CUDA kernels on a GPU. cuda_host: the same kernels' row code and
// the same batched driver path, with CPU memory standing in for the GPU's and each CUDA block emulated by
// fibers (kernels/emulated_kernels.h), so that path runs and is tested on machines without a GPU.
enum class Device { cpu, cuda, cuda_host };

// "cpu" | "cuda" | "cuda-host" (the --device option; harness/config/device_options.h parses it).
const char* device_name(Device device);

// True when this binary was built with the CUDA kernels (-DSPECULA_CUDA=ON).
bool built_with_cuda();

// Number of usable CUDA devices; 0 when the build has no CUDA, the driver is missing or too old, or no
// GPU is present. Never throws.
int cuda_device_count_or_zero();

// Device 0's name ("NVIDIA H200"); "" without a usable device. Never throws.
std::string cuda_device_name();

// Why no CUDA device can be used ("" when one can): the CUDA runtime's own message, or
// "this build has no CUDA support (configure with -DSPECULA_CUDA=ON)".
std::string cuda_unavailable_reason();

// Whether the current CUDA device can launch thread-block clusters (compute capability 9.0 or newer), asked
// once per device. False without a usable device. Never throws.
bool cuda_device_has_clusters();

// Throws Error "no CUDA device: <reason>" unless a CUDA device can be used.
void require_cuda_device();

// Throws for Device::cuda without a usable device; no-op for the others.
void require_device(Device device);

}  // namespace specula
