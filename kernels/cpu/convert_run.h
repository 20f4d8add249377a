// Converting a dense run of elements to another type, as copy does and as the
// kernels that compute 16-bit floats in f32 do (widen a run into a buffer,
// narrow the result back). A run from or to bf16/f16 takes a loop compiled for
// AVX2 where the CPU has it: narrowing f32 to bf16 (rounding to nearest even,
// nan kept quiet) runs 2.5x faster than at the SSE2 baseline, and it is what
// autocast does to every weight and activation it casts. Same results either
// way: the loop is the same code. f32 to bf16 has its own AVX-512 loops
// (convert_avx512.cpp) where the CPU has AVX-512, with the BF16 conversion
// instruction where it has that too: the compiled AVX2 loop ran at 0.62x a
// plain copy's bytes per second (bench_copy). f32 to f16 and back take
// F16C's conversions (convert_f16c.cpp): the compiled loop of Half's
// branching conversions ran at about 1 GB/s. Users: copy.cpp, elementwise_unary.cpp,
// elementwise_backward.cpp, binary_loop.h, indexing.cpp, the shm backend's
// reductions (distributed/backends/shm_kernels.cpp); tests: their
// reference comparisons and tests/core/test_convert.cpp.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "core/convert.h"
#include "core/cpu_features.h"
#include "kernels/cpu/target_isa.h"

namespace ember::cpu {

// f32 to bf16, bit for bit as BFloat16::round: in AVX-512 F and BW (call
// only where cpu_has_avx512bw()), and with AVX-512 BF16's conversion (only
// where cpu_has_avx512_bf16()).
void narrow_to_bf16_avx512(const float* in, BFloat16* out, int64_t n);
void narrow_to_bf16_avx512_bf16(const float* in, BFloat16* out, int64_t n);
// f32 to f16 and back, bit for bit as Half's conversions, with F16C's
// instructions (call only where cpu_has_f16c()): convert_f16c.cpp.
void narrow_to_f16_f16c(const float* in, Half* out, int64_t n);
void widen_from_f16_f16c(const Half* in, float* out, int64_t n);

template <class To, class From>
[[gnu::always_inline]] inline void convert_loop(const From* in, To* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = convert<To>(in[i]);
}

template <class To, class From>
void convert_run_baseline(const From* in, To* out, int64_t n) {
  convert_loop(in, out, n);
}

template <class To, class From>
EMBER_TARGET_AVX2 void convert_run_avx2(const From* in, To* out, int64_t n) {
  convert_loop(in, out, n);
}

// The unsigned integer of T's size: kernels that move stored values without
// arithmetic (fill, same-dtype copies, selects) move these bits, which
// vectorises where copying the 16-bit float structs does not.
template <class T>
using StoredBits = std::conditional_t<sizeof(T) == 1, uint8_t,
                                      std::conditional_t<sizeof(T) == 2, uint16_t,
                                                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

template <class T>
inline constexpr bool is_16_bit_float = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// out[i] = convert<To>(in[i]) for i < n.
template <class To, class From>
void convert_run(const From* in, To* out, int64_t n) {
  if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
    if (cpu_has_avx512_bf16()) return narrow_to_bf16_avx512_bf16(in, out, n);
    if (cpu_has_avx512bw()) return narrow_to_bf16_avx512(in, out, n);
  }
  if constexpr (std::is_same_v<To, Half> && std::is_same_v<From, float>) {
    if (cpu_has_f16c()) return narrow_to_f16_f16c(in, out, n);
  }
  if constexpr (std::is_same_v<To, float> && std::is_same_v<From, Half>) {
    if (cpu_has_f16c()) return widen_from_f16_f16c(in, out, n);
  }
  if constexpr (is_16_bit_float<To> || is_16_bit_float<From>) {
    if (cpu_has_avx2()) return convert_run_avx2(in, out, n);
    return convert_run_baseline(in, out, n);
  } else {
    convert_loop(in, out, n);
  }
}

}  // namespace ember::cpu
