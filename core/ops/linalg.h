// Matrix products. f32 and bf16 (f32 accumulation) run on oneDNN with cached
// primitives; f16 computes in f32; f64 and integers use a blocked CPU loop.
// Entry points: core/ops/linalg.cpp; kernels: kernels/{reference,cpu}/matmul.cpp.
#pragma once

#include <string_view>

#include "core/tensor.h"

namespace ember {

// NumPy matmul: 1-d operands are promoted and the added dim removed; batch dims
// broadcast. [..., n, k] x [..., k, m] -> [..., n, m]
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);   // [n, k] x [k, m] -> [n, m]
Tensor bmm(const Tensor& a, const Tensor& b);  // [B, n, k] x [B, k, m] -> [B, n, m]
// beta * input + alpha * (a @ b); input broadcasts to [n, m].
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);

// The internal precision of f32 products on backends that have a faster one,
// torch.set_float32_matmul_precision: "highest" (the default: f32 throughout)
// or "high" (TF32 tensor cores on CUDA, 10 mantissa bits per operand). The
// CPU always computes in f32.
void set_float32_matmul_precision(std::string_view precision);
std::string_view float32_matmul_precision();

}  // namespace ember
