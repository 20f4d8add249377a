// The kernel interface of the element-wise family: one Op per operation, keyed
// by dtype. Entry points (core/ops/elementwise.cpp, views.cpp) validate, promote,
// allocate the output and build the ElementwiseLoop; kernels only compute.
//
// Operand order in the loop is always (out, inputs...). Unless noted, every
// operand has the key dtype: the entry point converts inputs first.
#pragma once

#include "core/dispatch.h"
#include "core/elementwise_loop.h"
#include "core/grad_hook.h"
#include "core/scalar.h"

namespace ember {

using ElementwiseKernel = void(const ElementwiseLoop&);

// out = in, converting: keyed by the output dtype; the input may have any dtype.
extern Op<ElementwiseKernel> copy_op;
// out = value.
extern Op<void(const ElementwiseLoop&, const Scalar&)> fill_op;

// Binary arithmetic: (out, a, b), all of the key dtype.
extern Op<ElementwiseKernel> add_op, sub_op, mul_op, div_op, maximum_op, minimum_op, pow_op;
// The division family: (out, a, b), of the key dtype (floating or integer; an integer b is never 0).
extern Op<ElementwiseKernel> fmod_op, remainder_op, floor_divide_op;

// Comparisons and logic: (out: bool, a, b) keyed by the inputs' common dtype.
extern Op<ElementwiseKernel> eq_op, ne_op, lt_op, le_op, gt_op, ge_op, logical_and_op, logical_or_op;
// (out: bool, a) keyed by a's dtype.
extern Op<ElementwiseKernel> logical_not_op, isnan_op, isinf_op;

// Unary math: (out, a), both of the key dtype (floating for the transcendental ones).
extern Op<ElementwiseKernel> neg_op, abs_op, exp_op, log_op, log1p_op, sqrt_op, rsqrt_op, sin_op, cos_op,
    tanh_op, erf_op, sigmoid_op, relu_op, gelu_op, gelu_tanh_op, silu_op;
// Rounding: (out, a), floating; sign: (out, a), floating or integer.
extern Op<ElementwiseKernel> floor_op, ceil_op, round_op, trunc_op, sign_op;
// Activation gradients: (out, grad, input), all of the key dtype (floating).
extern Op<ElementwiseKernel> threshold_backward_op, gelu_backward_op, gelu_tanh_backward_op, silu_backward_op;
// (out, a) with a scalar parameter: out = a ** exponent.
extern Op<void(const ElementwiseLoop&, const Scalar&)> pow_scalar_op;
// (out, a): out = min(max(a, low), high); a null bound is absent.
extern Op<void(const ElementwiseLoop&, const Scalar* low, const Scalar* high)> clamp_op;
// (out, condition: bool, a, b) keyed by the value dtype.
extern Op<ElementwiseKernel> where_op;
// (out, input, tensor1, tensor2), all of the key dtype: out = input + value * tensor1 * tensor2.
extern Op<void(const ElementwiseLoop&, const Scalar& value)> addcmul_op;

// Gradient slots of the differentiable element-wise ops, filled by
// autograd/functions/elementwise.cpp. pow_scalar's params: the exponent
// (Scalar); clamp's: ClampParams; addcmul's: the value (Scalar).
extern GradSlot add_grad, sub_grad, mul_grad, div_grad, neg_grad, abs_grad, exp_grad, log_grad, log1p_grad,
    sqrt_grad, rsqrt_grad, sin_grad, cos_grad, tanh_grad, erf_grad, sigmoid_grad, relu_grad, gelu_grad, gelu_tanh_grad,
    silu_grad, pow_scalar_grad, pow_grad, maximum_grad, minimum_grad, clamp_grad, where_grad, addcmul_grad, to_grad,
    floor_grad, ceil_grad, round_grad, trunc_grad, sign_grad, fmod_grad, remainder_grad, floor_divide_grad;
struct ClampParams {
  const Scalar* low;
  const Scalar* high;
};

}  // namespace ember
