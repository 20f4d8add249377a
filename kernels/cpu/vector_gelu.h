// GELU (erf form) and its gradient on float and bf16 runs with AVX2+FMA, for
// the activation kernels (elementwise_unary.cpp, elementwise_backward.cpp);
// see vector_gelu.cpp. Where these are unavailable the kernels use Eigen's rows.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace ember::cpu {

// Whether this CPU runs the functions below (AVX2 and FMA).
bool vector_gelu_available();
// out[i] = x[i] Phi(x[i]), Phi the standard normal CDF; out may equal x.
void gelu_run(const float* x, float* out, int64_t n);
// out[i] = grad[i] (Phi(x[i]) + x[i] phi(x[i])), phi the normal density; out may equal grad or x.
void gelu_backward_run(const float* grad, const float* x, float* out, int64_t n);
// The same on bf16 runs: computed in f32 exactly as above and rounded to
// nearest even as BFloat16 rounds, so the results equal the float runs' then
// narrowed, without the passes that widen and narrow through buffers.
void gelu_run(const BFloat16* x, BFloat16* out, int64_t n);
void gelu_backward_run(const BFloat16* grad, const BFloat16* x, BFloat16* out, int64_t n);

}  // namespace ember::cpu
