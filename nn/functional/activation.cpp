// The composite activations of nn::functional (see activation.h). Each is a
// few element-wise passes; where a branch is not taken for an element, its
// input is clamped so that it stays finite, because autograd differentiates
// both branches of a `where` and 0 * inf would be NaN.
#include "nn/functional/activation.h"


namespace ember::nn::functional {

namespace {

void check_floating(const Tensor& input, std::string_view op) {
  EMBER_CHECK(input.defined(), "{}: undefined input", op);
  EMBER_CHECK(is_floating(input.dtype()), "{}: expected a floating point input, got {}", op, input.dtype());
}

// e^x - 1 without the cancellation of exp(x) - 1 near 0 (ember has no expm1
// kernel): tanh(x/2) (e^x + 1) is accurate to rounding for every x <= 0.
Tensor expm1_nonpositive(const Tensor& x) { return tanh(x * 0.5) * (exp(x) + 1.0); }

}  // namespace

Tensor leaky_relu(const Tensor& input, double negative_slope) {
  check_floating(input, "leaky_relu");
  return where(gt(input, 0), input, input * negative_slope);
}

Tensor elu(const Tensor& input, double alpha) {
  check_floating(input, "elu");
  return where(gt(input, 0), input, expm1_nonpositive(clamp_max(input, 0)) * alpha);
}

Tensor softplus(const Tensor& input, double beta, double threshold) {
  check_floating(input, "softplus");
  EMBER_CHECK(beta != 0, "softplus: beta must be nonzero, got {}", beta);
  Tensor scaled = input * beta;
  Tensor smooth = log1p(exp(clamp_max(scaled, threshold))) / beta;
  return where(gt(scaled, threshold), input, smooth);
}

Tensor hardtanh(const Tensor& input, double min_val, double max_val) {
  check_floating(input, "hardtanh");
  EMBER_CHECK(min_val <= max_val, "hardtanh: min_val {} must not exceed max_val {}", min_val, max_val);
  // clamp passes the gradient at its bounds (PyTorch's clamp does too);
  // hardtanh passes it strictly inside only, so the clamped values are
  // constants and the inside is the input itself.
  Tensor inside = logical_and(gt(input, min_val), lt(input, max_val));
  return where(inside, input, clamp(input, min_val, max_val).detach());
}

Tensor relu6(const Tensor& input) { return hardtanh(input, 0.0, 6.0); }

Tensor mish(const Tensor& input) {
  check_floating(input, "mish");
  return input * tanh(softplus(input));
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
  Tensor positive = clamp_min(input, 0), negative = clamp_max(input, 0);
  return where(ge(input, 0), -log1p(exp(-positive)), negative - log1p(exp(negative)));
}

}  // namespace ember::nn::functional
