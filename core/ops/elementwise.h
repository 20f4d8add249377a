// Element-wise ops with NumPy broadcasting and PyTorch type promotion.
// Entry points: core/ops/elementwise.cpp; kernels: kernels/{reference,cpu}/elementwise*.cpp.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace ember {

// The dtype of an op on these tensors (torch.result_type): promote_types over
// the tensors with dims; a 0-d tensor takes part only when its category (bool,
// integer, floating) is above theirs. So f32[n] * f64 0-d is f32, i32[n] * f64
// 0-d is f64, and two 0-d tensors promote as usual. Every binary op below
// uses it; a Scalar is a 0-d tensor of promote_with_scalar's dtype.
DType result_type(std::initializer_list<const Tensor*> tensors);

// Arithmetic. Integer division `div` is true division (result floating), as in PyTorch.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor rdiv(const Tensor& a, const Scalar& b);  // b / a
// input + value * tensor1 * tensor2 in one pass (torch.addcmul): the three
// tensors broadcast and promote together; value is converted to their dtype.
Tensor addcmul(const Tensor& input, const Tensor& tensor1, const Tensor& tensor2, const Scalar& value = 1);

// In place: `a` keeps its dtype (the result must be castable to it, as PyTorch requires).
Tensor& add_(Tensor& a, const Tensor& b);
Tensor& sub_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& div_(Tensor& a, const Tensor& b);
Tensor& add_(Tensor& a, const Scalar& b);
Tensor& sub_(Tensor& a, const Scalar& b);
Tensor& mul_(Tensor& a, const Scalar& b);
Tensor& div_(Tensor& a, const Scalar& b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator-(const Tensor& a);

// Unary math. Integer inputs to floating functions (exp, sqrt, ...) give f32.
Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor log1p(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor sin(const Tensor& a);
Tensor cos(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor erf(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);
enum class GeluApproximation { none, tanh };
Tensor gelu(const Tensor& a, GeluApproximation approximate = GeluApproximation::none);
Tensor silu(const Tensor& a);
// The activations' gradients in one pass each, for autograd's formulas: 0
// where input <= 0, else grad (relu; its output works as well as its input;
// a nan input passes grad, as PyTorch's threshold_backward), grad *
// gelu'(input), grad * silu'(input). grad and input have one shape and a
// floating dtype. Not themselves differentiable (backward of backward).
Tensor threshold_backward(const Tensor& grad, const Tensor& input);
Tensor gelu_backward(const Tensor& grad, const Tensor& input, GeluApproximation approximate = GeluApproximation::none);
Tensor silu_backward(const Tensor& grad, const Tensor& input);
Tensor pow(const Tensor& a, const Scalar& exponent);
Tensor pow(const Tensor& a, const Tensor& exponent);

// Rounding to a whole number, in the input's dtype: round takes halves to the
// even neighbour, as PyTorch's. Integer tensors come back unchanged (a copy);
// bool is refused. The gradient is 0 everywhere, as PyTorch's.
Tensor floor(const Tensor& a);
Tensor ceil(const Tensor& a);
Tensor round(const Tensor& a);
Tensor trunc(const Tensor& a);
// -1, 0 or 1 in the input's dtype; 0 for nan and for -0, as PyTorch's; a bool
// tensor comes back unchanged. The gradient is 0 everywhere.
Tensor sign(const Tensor& a);

// The division family, promoting as arithmetic does (bool refused): fmod is
// the remainder of truncated division (the sign of a, C's fmod), remainder
// that of floor division (the sign of b, Python's %), floor_divide is
// floor(a / b) (Python's //). An integer divisor of 0 is an error, as in
// PyTorch; a floating one gives nan (fmod, remainder) or +-inf. Gradients as
// PyTorch's: remainder's db = -g floor_divide(a, b), fmod's db =
// -g trunc(a / b), da = g; floor_divide's are 0 (PyTorch refuses its backward).
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, const Scalar& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, const Scalar& b);

Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor clamp(const Tensor& a, const Scalar& min, const Scalar& max);
Tensor clamp_min(const Tensor& a, const Scalar& min);
Tensor clamp_max(const Tensor& a, const Scalar& max);
// condition ? a : b, broadcasting all three; condition must be bool.
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& condition, const Tensor& a, const Scalar& b);

// Comparisons return bool.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);
Tensor isnan(const Tensor& a);
Tensor isinf(const Tensor& a);

}  // namespace ember
