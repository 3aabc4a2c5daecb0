// Uniforms from kernels/shared/philox.h computed on the GPU, for the CPU/GPU parity test of the generator:
// out[i] = philox_uniform(seed, stream, first_offset + i). Plain C++ header.
#pragma once

#include <cstdint>

#include "kernels/shared/error.h"

struct CUstream_st;

namespace specula {

struct PhiloxFillParams {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t first_offset = 0;
  int64_t count = 0;      // number of uniforms, >= 1
  double* out = nullptr;  // [count] device memory

  void check() const {  // throws Error naming the bad field
    if (count < 1) fail("philox fill: count must be >= 1, got ", count);
    if (count > (int64_t(1) << 40)) fail("philox fill: count must be <= 2^40, got ", count);
    if (!out) fail("philox fill: out [count] is null");
  }
};

// Enqueues the fill on `stream`; throws Error ("no CUDA device: ..." without one).
void launch_philox_fill(const PhiloxFillParams& p, CUstream_st* stream = nullptr);

}  // namespace specula
