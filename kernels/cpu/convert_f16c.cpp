// f32 to f16 and back with F16C's conversion instructions, eight elements at
// a time: the casts of fp16 autocast and of DDP's fp16 comm hook, and the
// kernels that widen f16 runs through convert_run (element-wise unary and
// backward kernels, add/sub/mul/div, the shm backend's reductions).
// Called by convert_run (convert_run.h) where cpu_has_f16c(); tests:
// tests/core/test_convert.cpp, bit for bit against Half::from_float and
// Half::to_float.
//
// The instructions round to nearest even and handle denormals on both sides
// as Half's scalar code does; they differ only on nans, whose payload they
// carry (and, widening, make quiet) where Half gives f16's quiet nan 0x7e00
// with the sign, and widens a nan's bits unchanged. A block of eight with a
// nan in it therefore takes the scalar conversions instead.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/convert_run.h"

namespace ember::cpu {

EMBER_TARGET_F16C void narrow_to_f16_f16c(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(in + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) [[unlikely]] {
      convert_loop(in + i, out + i, 8);
      continue;
    }
    const __m128i narrowed = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    std::memcpy(static_cast<void*>(out + i), &narrowed, sizeof(narrowed));
  }
  convert_loop(in + i, out + i, n - i);
}

EMBER_TARGET_F16C void widen_from_f16_f16c(const Half* in, float* out, int64_t n) {
  const __m128i magnitude = _mm_set1_epi16(0x7fff), infinity = _mm_set1_epi16(0x7c00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h;
    std::memcpy(&h, in + i, sizeof(h));
    // A nan's magnitude is above infinity's (as signed 16-bit numbers too: both below 0x8000).
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, magnitude), infinity)) != 0) [[unlikely]] {
      convert_loop(in + i, out + i, 8);
      continue;
    }
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  convert_loop(in + i, out + i, n - i);
}

}  // namespace ember::cpu
