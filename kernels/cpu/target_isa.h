// The attribute of kernels compiled a second time for AVX2 (twice the SSE2
// baseline's vector width), next to their baseline version; callers pick one
// at run time with cpu_has_avx2() (core/cpu_features.h). Never -march: the
// binaries run on any x86-64 CPU (DESIGN.md, machine notes).
// EMBER_TARGET_AVX512BW marks kernels for AVX-512 F and BW (64-byte vectors,
// byte and 16-bit shuffles), picked by their callers' own run-time check;
// EMBER_TARGET_AVX512_BF16 adds VL and BF16 (the bf16 conversion instructions);
// EMBER_TARGET_F16C is AVX2 with the f16 conversion instructions.
// Users: kernels/cpu/reduction_driver.h, binary_loop.h, optimizer.cpp,
// vector_gelu.cpp, copy_tiled.cpp, convert_run.h, convert_avx512.cpp and
// convert_f16c.cpp.
#pragma once

#if defined(__x86_64__)
#define EMBER_TARGET_AVX2 __attribute__((target("avx2")))
#define EMBER_TARGET_AVX512BW __attribute__((target("avx512f,avx512bw")))
#define EMBER_TARGET_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define EMBER_TARGET_F16C __attribute__((target("avx2,f16c")))
#else
#define EMBER_TARGET_AVX2
#define EMBER_TARGET_AVX512BW
#define EMBER_TARGET_AVX512_BF16
#define EMBER_TARGET_F16C
#endif
