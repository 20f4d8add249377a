// Cephes' expf on eight floats with AVX2+FMA, inlined into the AVX2 kernels
// that need an exp: the softmax's (vector_exp.cpp) and GELU's gradient
// (vector_gelu.cpp). Arguments above kExpHigh are clamped to it; below kExpLow
// the result is exactly 0 (so -inf gives 0); nan stays nan; other results are
// within ~2 ulp of expf. Callers check cpu_has_avx2() && cpu_has_fma().
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>

namespace ember::cpu {

// exp(x) = 2^n * exp(r), n = round(x / ln 2), |r| <= ln 2 / 2.
inline constexpr float kExpHigh = 88.0f, kExpLow = -87.3365447504f;
inline constexpr float kExpLog2e = 1.44269504088896341f, kExpLn2High = 0.693359375f, kExpLn2Low = -2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 v) {
  const __m256 low = _mm256_set1_ps(kExpLow);
  __m256 underflow = _mm256_cmp_ps(v, low, _CMP_LT_OQ), is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  __m256 clamped = _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(kExpHigh)), low);
  __m256i n_int = _mm256_cvtps_epi32(_mm256_mul_ps(clamped, _mm256_set1_ps(kExpLog2e)));  // rounds to nearest
  __m256 n_float = _mm256_cvtepi32_ps(n_int);
  __m256 r = _mm256_fnmadd_ps(n_float, _mm256_set1_ps(kExpLn2Low),
                              _mm256_fnmadd_ps(n_float, _mm256_set1_ps(kExpLn2High), clamped));
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int k = 1; k < 6; ++k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[k]));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n_int, _mm256_set1_epi32(127)), 23));
  __m256 result = _mm256_andnot_ps(underflow, _mm256_mul_ps(p, scale));
  return _mm256_blendv_ps(result, v, is_nan);
}

}  // namespace ember::cpu
#endif
