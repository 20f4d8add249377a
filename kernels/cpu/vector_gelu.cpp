// GELU and its gradient with AVX2+FMA intrinsics (vector_gelu.h). Eigen picks
// its SIMD width when compiled, so at the x86-64 baseline it evaluates erf and
// exp four floats at a time, and its SSE2 exp is slow: GELU's gradient cost
// 5 ns an element there, a seventh of a GPT training step on this machine.
// Here erf is Eigen's own rational approximation (generic_fast_erf_float, the
// same coefficients, so the same accuracy) and exp is Cephes' (exp_avx2.h),
// eight floats at a time; a tail shorter than eight goes through a padded
// vector, so every element is computed the same way. bf16 runs are widened
// and rounded in registers (load8, store8): in a GPT step under bf16 autocast
// the buffered conversions were about a quarter of GELU's time. Oracle: the reference
// kernels (std::erf, std::exp) in tests/core/test_unary.cpp and the op table.
#include "kernels/cpu/vector_gelu.h"

#include <algorithm>
#include <numbers>

#include "core/cpu_features.h"
#include "kernels/cpu/exp_avx2.h"

namespace ember::cpu {

#if defined(__x86_64__)
namespace {

#define EMBER_TARGET_AVX2_FMA __attribute__((target("avx2,fma")))

// erf on [-4, 4] (outside it erf is +-1 in f32) as p(x) / q(x); nan stays nan.
EMBER_TARGET_AVX2_FMA inline __m256 erf_avx2(__m256 a) {
  // min/max return their second operand for a nan one: x first keeps it nan.
  const __m256 x = _mm256_max_ps(_mm256_set1_ps(-4.0f), _mm256_min_ps(_mm256_set1_ps(4.0f), a));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_fmadd_ps(x2, _mm256_set1_ps(-2.72614225801306e-10f), _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(x2, p, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(x, p);
  __m256 q = _mm256_fmadd_ps(x2, _mm256_set1_ps(-1.45660718464996e-05f), _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(x2, q, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2
EMBER_TARGET_AVX2_FMA inline __m256 normal_cdf_avx2(__m256 x) {
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 erf = erf_avx2(_mm256_mul_ps(x, _mm256_set1_ps(float(std::numbers::sqrt2 / 2))));
  return _mm256_fmadd_ps(half, erf, half);
}

EMBER_TARGET_AVX2_FMA inline __m256 gelu_avx2(__m256 x) { return _mm256_mul_ps(x, normal_cdf_avx2(x)); }

// g (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
EMBER_TARGET_AVX2_FMA inline __m256 gelu_backward_avx2(__m256 g, __m256 x) {
  const __m256 exponent = _mm256_mul_ps(_mm256_set1_ps(-0.5f), _mm256_mul_ps(x, x));
  const __m256 density =
      _mm256_mul_ps(exp_avx2(exponent), _mm256_set1_ps(float(std::numbers::inv_sqrtpi / std::numbers::sqrt2)));
  return _mm256_mul_ps(g, _mm256_fmadd_ps(x, density, normal_cdf_avx2(x)));
}

// Eight floats from floats, or widened from bf16 (its bits are a float's top half).
EMBER_TARGET_AVX2_FMA inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
EMBER_TARGET_AVX2_FMA inline __m256 load8(const BFloat16* p) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}

// Eight floats stored as floats, or rounded to bf16 as BFloat16::round does:
// to nearest even, a NaN kept quiet.
EMBER_TARGET_AVX2_FMA inline void store8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
EMBER_TARGET_AVX2_FMA inline void store8(BFloat16* p, __m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(bits, 16);
  const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  const __m256i narrow = _mm256_blendv_epi8(rounded, quiet, nan);
  // packus interleaves the two 128-bit lanes' halves: the permute puts lane 1's after lane 0's.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(narrow, narrow), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
}

template <class T>
EMBER_TARGET_AVX2_FMA void gelu_avx2_run(const T* x, T* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, gelu_avx2(load8(x + i)));
  if (i == n) return;
  T tail[8] = {};
  std::copy(x + i, x + n, tail);
  store8(tail, gelu_avx2(load8(tail)));
  std::copy(tail, tail + (n - i), out + i);
}

template <class T>
EMBER_TARGET_AVX2_FMA void gelu_backward_avx2_run(const T* grad, const T* x, T* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, gelu_backward_avx2(load8(grad + i), load8(x + i)));
  if (i == n) return;
  T grad_tail[8] = {}, x_tail[8] = {};
  std::copy(grad + i, grad + n, grad_tail);
  std::copy(x + i, x + n, x_tail);
  store8(grad_tail, gelu_backward_avx2(load8(grad_tail), load8(x_tail)));
  std::copy(grad_tail, grad_tail + (n - i), out + i);
}

}  // namespace

bool vector_gelu_available() {
  static const bool available = cpu_has_avx2() && cpu_has_fma();
  return available;
}
void gelu_run(const float* x, float* out, int64_t n) { gelu_avx2_run(x, out, n); }
void gelu_backward_run(const float* grad, const float* x, float* out, int64_t n) {
  gelu_backward_avx2_run(grad, x, out, n);
}
void gelu_run(const BFloat16* x, BFloat16* out, int64_t n) { gelu_avx2_run(x, out, n); }
void gelu_backward_run(const BFloat16* grad, const BFloat16* x, BFloat16* out, int64_t n) {
  gelu_backward_avx2_run(grad, x, out, n);
}
#else
bool vector_gelu_available() { return false; }
void gelu_run(const float*, float*, int64_t) {}
void gelu_backward_run(const float*, const float*, float*, int64_t) {}
void gelu_run(const BFloat16*, BFloat16*, int64_t) {}
void gelu_backward_run(const BFloat16*, const BFloat16*, BFloat16*, int64_t) {}
#endif

}  // namespace ember::cpu
