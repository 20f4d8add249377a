// The attribute of kernels compiled a second time for AVX2 (twice the SSE2
// baseline's vector width), next to their baseline version; callers pick one
// at run time with cpu_has_avx2() (core/cpu_features.h). Never -march: the
// binaries run on any x86-64 CPU (DESIGN.md, machine notes).
// Users: kernels/cpu/reduction_driver.h, optimizer.cpp.
#pragma once

#if defined(__x86_64__)
#define EMBER_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define EMBER_TARGET_AVX2
#endif
