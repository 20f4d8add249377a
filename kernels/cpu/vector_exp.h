// A vectorised exp for the softmax kernels (kernels/cpu/softmax.cpp); see vector_exp.cpp.
#pragma once

#include <cstdint>

namespace ember::cpu {

// y[i] = exp(x[i] - shift) for i < n, with exactly 0 for -inf; returns the sum of y.
float exp_shifted_sum(const float* x, float* y, int64_t n, float shift);

}  // namespace ember::cpu
