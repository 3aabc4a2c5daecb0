// One macro lets the same inline math compile for the CPU (plain C++) and for CUDA (nvcc).
#pragma once

#if defined(__CUDACC__)
#define SPECULA_HD __host__ __device__ __forceinline__
#else
#define SPECULA_HD inline
#endif

// Loops over the kVec elements of a vector hold calls with loops of their own; unrolled, the vector stays
// in registers (a loop over it would index it dynamically and put it in local memory).
#if defined(__CUDA_ARCH__)
#define SPECULA_UNROLL _Pragma("unroll")
#else
#define SPECULA_UNROLL
#endif
