// The composite activations of nn::functional (see activation.h). Each is a
// few element-wise passes; where a branch is not taken for an element, its
// input is clamped so that it stays finite, because autograd differentiates
// both branches of a `where` and 0 * inf would be NaN.
#include "nn/functional/activation.h"

#include <vector>

#include "autograd/custom_function.h"
#include "autograd/function.h"

namespace ember::nn::functional {

namespace {

void check_floating(const Tensor& input, std::string_view op) {
  EMBER_CHECK(input.defined(), "{}: undefined input", op);
  EMBER_CHECK(is_floating(input.dtype()), "{}: expected a floating point input, got {}", op, input.dtype());
}

// f16 and bf16 inputs are computed in f32 and rounded once, as PyTorch's
// kernels compute in f32: in f16, e^x overflows past x = 11.1, and softplus
// of 12 came out inf.
template <class Fn>
Tensor in_f32(const Tensor& input, Fn&& fn) {
  if (input.dtype() == DType::f16 || input.dtype() == DType::bf16) return fn(input.to(DType::f32)).to(input.dtype());
  return fn(input);
}

// e^x - 1 for x <= 0 without exp(x) - 1's cancellation near 0 (ember has no
// expm1 kernel): tanh(x/2) (e^x + 1) on [-1, 0]. Below -1 that form's
// derivative cancels (1 - tanh^2 as tanh rounds to -1: ELU's gradient at -20
// came out negative), and exp(x) - 1 is exact enough there. Each branch reads
// its input clamped to its own side.
Tensor expm1_nonpositive(const Tensor& x) {
  const Tensor near = clamp(x, -1.0, 0.0), far = clamp_max(x, -1.0);
  return where(lt(x, -1.0), exp(far) - 1.0, tanh(near * 0.5) * (exp(near) + 1.0));
}

// leaky_relu and hardtanh are nodes of their own, as PyTorch's
// leaky_relu_backward and hardtanh_backward are: their gradient reads the
// input only through a mask, and under create_graph it keeps the input's edge
// with a zero second derivative (autograd::zero_through). As `where`
// composites, a gradient penalty on a LeakyReLU critic left the biases before
// the activation with no .grad, where PyTorch gives zeros and Adam still moves
// them.
struct LeakyRelu : autograd::Function<LeakyRelu> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& input, double negative_slope) {
    ctx.save_for_backward({input});
    ctx.save_data("negative_slope", negative_slope);
    return where(gt(input, 0), input, input * negative_slope);
  }
  // input > 0 ? g : g * slope, so a NaN input takes the slope, as PyTorch's.
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    const Tensor input = ctx.saved_tensors()[0];
    Tensor grad = where(gt(input, 0), grads[0], grads[0] * ctx.saved_data<double>("negative_slope"));
    if (should_record({&input})) grad = grad + autograd::zero_through(input);
    return {grad, Tensor()};
  }
};

// clamp passes the gradient at its bounds (PyTorch 1.13's clamp did too);
// hardtanh passes it strictly between them (a NaN passes it, as PyTorch's).
struct Hardtanh : autograd::Function<Hardtanh> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& input, double min_val, double max_val) {
    ctx.save_for_backward({input});
    ctx.save_data("min_val", min_val);
    ctx.save_data("max_val", max_val);
    return clamp(input, min_val, max_val);
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    const Tensor input = ctx.saved_tensors()[0];
    const Tensor outside = logical_or(le(input, ctx.saved_data<double>("min_val")),
                                      ge(input, ctx.saved_data<double>("max_val")));
    Tensor grad = where(logical_not(outside), grads[0], 0.0);
    if (should_record({&input})) grad = grad + autograd::zero_through(input);
    return {grad, Tensor(), Tensor()};
  }
};

Tensor checked_hardtanh(const Tensor& input, double min_val, double max_val, std::string_view op) {
  check_floating(input, op);
  EMBER_CHECK(min_val <= max_val, "{}: min_val {} must not exceed max_val {}", op, min_val, max_val);
  return Hardtanh::apply(input, min_val, max_val);
}

}  // namespace

Tensor leaky_relu(const Tensor& input, double negative_slope) {
  check_floating(input, "leaky_relu");
  return LeakyRelu::apply(input, negative_slope);
}

// The branch is chosen as PyTorch's is (x <= 0), so a NaN's gradient is 1;
// the other branch reads 0 in its place.
Tensor elu(const Tensor& input, double alpha) {
  check_floating(input, "elu");
  return in_f32(input, [alpha](const Tensor& x) {
    const Tensor negative = le(x, 0);
    return where(negative, expm1_nonpositive(where(negative, x, 0.0)) * alpha, x);
  });
}

Tensor softplus(const Tensor& input, double beta, double threshold) {
  check_floating(input, "softplus");
  EMBER_CHECK(beta != 0, "softplus: beta must be nonzero, got {}", beta);
  return in_f32(input, [beta, threshold](const Tensor& x) {
    Tensor scaled = x * beta;
    Tensor smooth = log1p(exp(clamp_max(scaled, threshold))) / beta;
    return where(gt(scaled, threshold), x, smooth);
  });
}

Tensor hardtanh(const Tensor& input, double min_val, double max_val) {
  return checked_hardtanh(input, min_val, max_val, "hardtanh");
}

Tensor relu6(const Tensor& input) { return checked_hardtanh(input, 0.0, 6.0, "relu6"); }

Tensor mish(const Tensor& input) {
  check_floating(input, "mish");
  return in_f32(input, [](const Tensor& x) { return x * tanh(softplus(x)); });
}

// In two smooth branches, -log1p(e^-x) for x >= 0 and x - log1p(e^x) below,
// each reading its input clamped to its own side so that the branch not
// taken stays finite. PyTorch's min(x, 0) - log1p(e^-|x|) has kinks at 0
// whose pieces differentiate to 0 there: its gradient is right (1/2) only
// through the tie split of min, and its second derivative came out 0 where
// it is -sigmoid'(0) = -1/4 (binary_cross_entropy_with_logits' too, which
// is built on this).
Tensor logsigmoid(const Tensor& input) {
  check_floating(input, "logsigmoid");
  return in_f32(input, [](const Tensor& x) {
    Tensor positive = clamp_min(x, 0), negative = clamp_max(x, 0);
    return where(ge(x, 0), -log1p(exp(-positive)), negative - log1p(exp(negative)));
  });
}

}  // namespace ember::nn::functional
