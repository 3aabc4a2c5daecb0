// Device selection, after CTranslate2's primitives<Device>: one declaration per operation, a CPU and a
// CUDA definition, the CUDA one compiled only when the build enables it (SPECULA_HAS_CUDA). Asking for
// CUDA where there is none is an Error that says why ("no CUDA device: ..."), never a crash.
// Plain C++: includes no CUDA header.
#pragma once

#include <string>

namespace specula {

enum class Device { cpu, cuda };

// "cpu" or "cuda" (the --device option); throws Error naming the value otherwise.
Device parse_device(const std::string& text);
const char* device_name(Device device);

// True when this binary was built with the CUDA kernels (-DSPECULA_CUDA=ON).
bool built_with_cuda();

// Number of usable CUDA devices; 0 when the build has no CUDA, the driver is missing or too old, or no
// GPU is present. Never throws.
int cuda_device_count_or_zero();

// Why no CUDA device can be used ("" when one can): the CUDA runtime's own message, or
// "this build has no CUDA support (configure with -DSPECULA_CUDA=ON)".
std::string cuda_unavailable_reason();

// Throws Error "no CUDA device: <reason>" unless a CUDA device can be used.
void require_cuda_device();

// Throws for Device::cuda without a usable device; no-op for Device::cpu.
void require_device(Device device);

}  // namespace specula
