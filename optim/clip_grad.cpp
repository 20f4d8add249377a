// clip_grad_norm_ and clip_grad_value_ (optim/clip_grad.h), in PyTorch's
// order of operations: per-gradient norms, their norm, and the clip
// coefficient computed as tensors in the gradients' dtype.
#include "optim/clip_grad.h"

#include <cmath>

#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"

namespace ember::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& param : params)
    if (param.defined() && param.grad().defined()) grads.push_back(param.grad());
  if (grads.empty()) return scalar_tensor(0.0, {.dtype = DType::f32});

  DType dtype = grads[0].dtype();
  for (const Tensor& grad : grads) dtype = promote_types(dtype, grad.dtype());
  std::vector<Tensor> norms;
  const bool infinity_norm = std::isinf(norm_type) && norm_type > 0;
  for (const Tensor& grad : grads) norms.push_back(norm(grad, infinity_norm ? INFINITY : norm_type).to(dtype));
  Tensor total_norm;
  if (infinity_norm)
    total_norm = norms.size() == 1 ? norms[0] : max(stack(norms));
  else
    total_norm = norm(stack(norms), norm_type);

  if (error_if_nonfinite) {
    const double value = total_norm.item<double>();
    EMBER_CHECK(std::isfinite(value),
                "clip_grad_norm_: the total norm of order {} of the gradients is {}, so they cannot be clipped "
                "(pass error_if_nonfinite = false to clip anyway)",
                norm_type, value);
  }
  const Tensor clip_coefficient = clamp_max(rdiv(add(total_norm, 1e-6), max_norm), 1.0);
  for (Tensor& grad : grads) mul_(grad, clip_coefficient.to(grad.dtype()));
  return total_norm;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  NoGradGuard no_grad;
  for (const Tensor& param : params) {
    if (!param.defined() || !param.grad().defined()) continue;
    Tensor grad = param.grad();
    grad.copy_(clamp(grad, -clip_value, clip_value));
  }
}

}  // namespace ember::optim
