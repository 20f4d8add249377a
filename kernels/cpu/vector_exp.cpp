// y = exp(x - shift) over a float array, and the sum of y, in SIMD registers:
// the exp inside softmax (kernels/cpu/softmax.cpp; tests: test_softmax.cpp).
// Compilers do not vectorise std::exp, and Eigen's SSE2 exp measured slower here
// than a scalar loop, so this is Cephes' expf written with intrinsics: SSE2 (the
// x86-64 baseline) and an AVX2+FMA copy (exp_avx2.h) picked at run time. -inf maps to exactly
// 0, nan stays nan; other results are within ~2 ulp of expf.
#include "kernels/cpu/vector_exp.h"

#include "core/cpu_features.h"
#include "kernels/cpu/exp_avx2.h"

#include <cmath>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define EMBER_X86_SIMD 1
#endif

namespace ember::cpu {
namespace {

float exp_shifted_sum_scalar(const float* x, float* y, int64_t n, float shift) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = std::exp(x[i] - shift);
    sum += y[i];
  }
  return sum;
}

#ifdef EMBER_X86_SIMD
float exp_shifted_sum_sse2(const float* x, float* y, int64_t n, float shift) {
  const __m128 high = _mm_set1_ps(kExpHigh), low = _mm_set1_ps(kExpLow), log2e = _mm_set1_ps(kExpLog2e);
  const __m128 ln2_high = _mm_set1_ps(kExpLn2High), ln2_low = _mm_set1_ps(kExpLn2Low), one = _mm_set1_ps(1.0f);
  const __m128 s = _mm_set1_ps(shift);
  __m128 sum = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_sub_ps(_mm_loadu_ps(x + i), s);
    __m128 underflow = _mm_cmplt_ps(v, low), is_nan = _mm_cmpunord_ps(v, v);
    __m128 clamped = _mm_max_ps(_mm_min_ps(v, high), low);
    __m128i n_int = _mm_cvtps_epi32(_mm_mul_ps(clamped, log2e));  // rounds to nearest
    __m128 n_float = _mm_cvtepi32_ps(n_int);
    __m128 r = _mm_sub_ps(_mm_sub_ps(clamped, _mm_mul_ps(n_float, ln2_high)), _mm_mul_ps(n_float, ln2_low));
    __m128 p = _mm_set1_ps(kExpPoly[0]);
    for (int k = 1; k < 6; ++k) p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(kExpPoly[k]));
    p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, _mm_mul_ps(r, r)), r), one);
    __m128 scale = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n_int, _mm_set1_epi32(127)), 23));
    __m128 result = _mm_andnot_ps(underflow, _mm_mul_ps(p, scale));
    result = _mm_or_ps(_mm_and_ps(is_nan, v), _mm_andnot_ps(is_nan, result));
    _mm_storeu_ps(y + i, result);
    sum = _mm_add_ps(sum, result);
  }
  float lanes[4];
  _mm_storeu_ps(lanes, sum);
  return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]) + exp_shifted_sum_scalar(x + i, y + i, n - i, shift);
}

__attribute__((target("avx2,fma"))) float exp_shifted_sum_avx2(const float* x, float* y, int64_t n, float shift) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 sum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 result = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), s));
    _mm256_storeu_ps(y + i, result);
    sum = _mm256_add_ps(sum, result);
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  float total = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  return total + exp_shifted_sum_sse2(x + i, y + i, n - i, shift);
}
#endif

using ExpSumFn = float (*)(const float*, float*, int64_t, float);

ExpSumFn pick_exp_shifted_sum() {
#ifdef EMBER_X86_SIMD
  if (cpu_has_avx2() && cpu_has_fma()) return &exp_shifted_sum_avx2;
  return &exp_shifted_sum_sse2;
#else
  return &exp_shifted_sum_scalar;
#endif
}

}  // namespace

float exp_shifted_sum(const float* x, float* y, int64_t n, float shift) {
  static const ExpSumFn fn = pick_exp_shifted_sum();
  return fn(x, y, n, shift);
}

}  // namespace ember::cpu
