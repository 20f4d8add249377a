// EMBER_HOST_DEVICE marks the few core functions that CUDA kernels call as
// well as host code (Philox and the values drawn from it: core/random.h,
// core/ops/random_kernels.h, core/ops/dropout_kernels.h), so every backend
// runs one definition: __host__ __device__ under nvcc, nothing for the host
// compilers. Such a function may call only functions marked the same way.
#pragma once

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__
#else
#define EMBER_HOST_DEVICE
#endif
