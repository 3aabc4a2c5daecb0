// One macro lets the same inline math compile for the CPU (plain C++) and for CUDA (nvcc).
#pragma once

#if defined(__CUDACC__)
#define SPECULA_HD __host__ __device__ __forceinline__
#else
#define SPECULA_HD inline
#endif
