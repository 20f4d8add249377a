// Narrowing f32 to bf16 in AVX-512, the cast autocast runs on every weight and
// input it lowers. Called by convert_run (convert_run.h) where
// cpu_has_avx512bw(); tests: tests/core/test_convert.cpp, bit for bit against
// BFloat16::round.
//
// Two versions, both giving BFloat16::round's bits. Without AVX-512 BF16, the
// rounding in integer lanes (add 0x7fff plus the kept part's lowest bit: to
// nearest even; nans made quiet). With it, vcvtne2ps2bf16, which rounds the
// same way but treats input denormals as zero (0x00012345 gives 0x0000 where
// BFloat16::round gives 0x0001; checked on this Zen 4): a block of 32 with a
// denormal in it takes the integer rounding instead. Measured on 1M elements
// in L3 (a scratch loop beside memcpy): integer lanes 54 GB/s, the
// instruction with the check 102 GB/s, memcpy 98 GB/s.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/convert_run.h"

namespace ember::cpu {
namespace {

// Sixteen 32-bit lanes as a GCC/Clang vector, so the arithmetic is written
// with operators: the intrinsics for shifts and narrowing take an undefined
// source operand that g++ 12 reports as maybe-uninitialized under -Werror.
using Lanes = uint32_t __attribute__((vector_size(64)));
using NarrowLanes = uint16_t __attribute__((vector_size(32)));

// The bf16 bits of sixteen floats' bits `u`, each as BFloat16::round gives
// them, in the low half of each lane.
EMBER_TARGET_AVX512BW inline Lanes round_to_bf16(Lanes u) {
  const Lanes high = u >> 16;
  const Lanes rounded = (u + 0x7fffu + (high & 1u)) >> 16;
  const Lanes nan = (Lanes)((u & 0x7fffffffu) > 0x7f800000u);  // all ones where u is a nan
  return (rounded & ~nan) | ((high | 0x40u) & nan);
}

EMBER_TARGET_AVX512BW inline void store_rounded(const float* in, BFloat16* out) {
  Lanes u;
  std::memcpy(&u, in, sizeof(u));
  const NarrowLanes narrowed = __builtin_convertvector(round_to_bf16(u), NarrowLanes);  // every lane < 2^16
  std::memcpy(static_cast<void*>(out), &narrowed, sizeof(narrowed));
}

// The last 1-15 elements under a lane mask: masked lanes are neither read nor written.
EMBER_TARGET_AVX512BW inline void store_rounded_tail(const float* in, BFloat16* out, int64_t n) {
  const __mmask16 lanes = __mmask16((1u << n) - 1);
  const Lanes u = (Lanes)_mm512_maskz_loadu_epi32(lanes, in);
  _mm512_mask_cvtepi32_storeu_epi16(out, lanes, (__m512i)round_to_bf16(u));
}

// Lanes of `u` holding a denormal: exponent bits zero, mantissa bits not.
EMBER_TARGET_AVX512_BF16 inline __mmask16 denormal_lanes(__m512i u) {
  const __mmask16 zero_exponent = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_test_epi32_mask(zero_exponent, u, _mm512_set1_epi32(0x007fffff));
}

}  // namespace

EMBER_TARGET_AVX512BW void narrow_to_bf16_avx512(const float* in, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) store_rounded(in + i, out + i);
  if (i < n) store_rounded_tail(in + i, out + i, n - i);
}

EMBER_TARGET_AVX512_BF16 void narrow_to_bf16_avx512_bf16(const float* in, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i low = _mm512_loadu_si512(in + i);
    const __m512i high = _mm512_loadu_si512(in + i + 16);
    if (_kortestz_mask16_u8(denormal_lanes(low), denormal_lanes(high))) [[likely]] {
      const __m512bh narrowed = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(high), _mm512_castsi512_ps(low));
      std::memcpy(static_cast<void*>(out + i), &narrowed, sizeof(narrowed));
    } else {
      store_rounded(in + i, out + i);
      store_rounded(in + i + 16, out + i + 16);
    }
  }
  if (i + 16 <= n) {
    store_rounded(in + i, out + i);
    i += 16;
  }
  if (i < n) store_rounded_tail(in + i, out + i, n - i);
}

}  // namespace ember::cpu
