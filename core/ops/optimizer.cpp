// Entry points of the fused optimizer updates (core/ops/optimizer.h): check
// that every operand matches the parameter, make the grad contiguous, run the
// kernel, and bump the versions of everything written. Also the unscaling pass
// of loss scaling, which checks its gradient and flag the same way.
#include "core/ops/optimizer.h"

#include <initializer_list>

#include "core/grad_hook.h"
#include "core/ops/elementwise.h"
#include "core/ops/optimizer_kernels.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const Tensor&, const Tensor&, const Tensor&, const SgdUpdate&)> sgd_update_op("sgd_update");
Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const AdamUpdate&)> adam_update_op(
    "adam_update");
Op<void(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const RmspropUpdate&)>
    rmsprop_update_op("rmsprop_update");
Op<void(const Tensor&, const Tensor&, const Tensor&, const AdagradUpdate&)> adagrad_update_op("adagrad_update");
Op<void(const Tensor&, const Tensor&, const Tensor&, const LionUpdate&)> lion_update_op("lion_update");
Op<void(const Tensor&, const Tensor&, double)> unscale_and_check_op("unscale_and_check");

namespace {

struct Operand {
  const char* name;
  const Tensor* tensor;
  bool required;
};

// Checks the operands against the parameter and returns the grad as a contiguous tensor.
Tensor check_operands(const char* op, const Tensor& param, const Tensor& grad, std::initializer_list<Operand> state) {
  EMBER_CHECK(param.defined(), "{}: the parameter is undefined", op);
  EMBER_CHECK(is_floating(param.dtype()), "{}: the parameter must be floating point, got {}", op, param.dtype());
  EMBER_CHECK(param.is_contiguous(), "{}: the parameter must be contiguous (shape {}, strides {})", op, param.shape(),
              param.strides().str());
  EMBER_CHECK(grad.defined(), "{}: the gradient is undefined", op);
  EMBER_CHECK(grad.shape() == param.shape(), "{}: gradient shape {} does not match parameter shape {}", op,
              grad.shape(), param.shape());
  EMBER_CHECK(grad.dtype() == param.dtype(), "{}: gradient dtype {} does not match parameter dtype {}", op,
              grad.dtype(), param.dtype());
  EMBER_CHECK(grad.device() == param.device(), "{}: gradient on {} but parameter on {}", op, grad.device(),
              param.device());
  for (const Operand& operand : state) {
    const Tensor& t = *operand.tensor;
    if (!operand.required) {
      EMBER_CHECK(!t.defined(), "{}: {} is given but these options do not use it", op, operand.name);
      continue;
    }
    EMBER_CHECK(t.defined(), "{}: {} is undefined but these options need it", op, operand.name);
    EMBER_CHECK(t.shape() == param.shape(), "{}: {} shape {} does not match parameter shape {}", op, operand.name,
                t.shape(), param.shape());
    EMBER_CHECK(t.dtype() == param.dtype(), "{}: {} dtype {} does not match parameter dtype {}", op, operand.name,
                t.dtype(), param.dtype());
    EMBER_CHECK(t.device() == param.device(), "{}: {} on {} but parameter on {}", op, operand.name, t.device(),
                param.device());
    EMBER_CHECK(t.is_contiguous(), "{}: {} must be contiguous", op, operand.name);
    EMBER_CHECK(t.storage() != param.storage(), "{}: {} shares memory with the parameter", op, operand.name);
  }
  return grad.contiguous();
}

void bump_versions(std::initializer_list<const Tensor*> written) {
  for (const Tensor* t : written)
    if (t->defined()) t->bump_version();
}

// In float16 a squared gradient below about 5e-3 underflows, so a second
// moment can be 0 where the step's numerator is not: the update divides by
// eps alone and moves those elements 10^4 to 10^5 times too far. PyTorch
// gives inf there; this says why, on the step that did it.
void check_second_moment(const char* op, const char* moment, const Tensor& second, const Tensor& numerator) {
  if (second.dtype() != DType::f16 || second.numel() == 0) return;
  const int64_t stuck = sum(logical_and(eq(second, 0), ne(numerator, 0))).item<int64_t>();
  EMBER_CHECK(stuck == 0,
              "{}: {} of {} float16 elements underflowed to 0 in {} where the step's numerator is not, so this step "
              "divided by eps alone and moved them about lr / eps times too far; keep the parameters in float32 and "
              "run the forward under autocast (or use a float32 copy of the parameters for the optimizer)",
              op, stuck, second.numel(), moment);
}

}  // namespace

void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& hyper) {
  Tensor dense_grad =
      check_operands("sgd_update_", param, grad, {{"momentum_buffer", &momentum_buffer, hyper.momentum != 0}});
  if (param.numel() > 0) sgd_update_op(param.device().type, param.dtype(), param, dense_grad, momentum_buffer, hyper);
  bump_versions({&param, &momentum_buffer});
}

void adam_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& max_exp_avg_sq, const AdamUpdate& hyper) {
  EMBER_CHECK(hyper.step >= 1, "adam_update_: step must be at least 1, got {}", hyper.step);
  Tensor dense_grad = check_operands("adam_update_", param, grad,
                                     {{"exp_avg", &exp_avg, true},
                                      {"exp_avg_sq", &exp_avg_sq, true},
                                      {"max_exp_avg_sq", &max_exp_avg_sq, hyper.amsgrad}});
  if (param.numel() > 0)
    adam_update_op(param.device().type, param.dtype(), param, dense_grad, exp_avg, exp_avg_sq, max_exp_avg_sq, hyper);
  bump_versions({&param, &exp_avg, &exp_avg_sq, &max_exp_avg_sq});
  check_second_moment("adam_update_", hyper.amsgrad ? "max_exp_avg_sq" : "exp_avg_sq",
                      hyper.amsgrad ? max_exp_avg_sq : exp_avg_sq, exp_avg);
}

void rmsprop_update_(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                     const Tensor& momentum_buffer, const RmspropUpdate& hyper) {
  Tensor dense_grad = check_operands("rmsprop_update_", param, grad,
                                     {{"square_avg", &square_avg, true},
                                      {"grad_avg", &grad_avg, hyper.centered},
                                      {"momentum_buffer", &momentum_buffer, hyper.momentum > 0}});
  if (param.numel() > 0)
    rmsprop_update_op(param.device().type, param.dtype(), param, dense_grad, square_avg, grad_avg, momentum_buffer,
                      hyper);
  bump_versions({&param, &square_avg, &grad_avg, &momentum_buffer});
}

void adagrad_update_(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradUpdate& hyper) {
  EMBER_CHECK(hyper.step >= 1, "adagrad_update_: step must be at least 1, got {}", hyper.step);
  Tensor dense_grad = check_operands("adagrad_update_", param, grad, {{"sum", &sum, true}});
  if (param.numel() > 0) adagrad_update_op(param.device().type, param.dtype(), param, dense_grad, sum, hyper);
  bump_versions({&param, &sum});
  check_second_moment("adagrad_update_", "sum", sum, dense_grad);
}

void lion_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const LionUpdate& hyper) {
  Tensor dense_grad = check_operands("lion_update_", param, grad, {{"exp_avg", &exp_avg, true}});
  if (param.numel() > 0) lion_update_op(param.device().type, param.dtype(), param, dense_grad, exp_avg, hyper);
  bump_versions({&param, &exp_avg});
}

void unscale_and_check_(const Tensor& grad, const Tensor& found_inf, double inv_scale) {
  EMBER_CHECK(grad.defined(), "unscale_and_check_: the gradient is undefined");
  EMBER_CHECK(is_floating(grad.dtype()), "unscale_and_check_: the gradient must be floating point, got {}",
              grad.dtype());
  EMBER_CHECK(found_inf.defined(), "unscale_and_check_: found_inf is undefined");
  EMBER_CHECK(found_inf.numel() == 1 && found_inf.dtype() == DType::f32,
              "unscale_and_check_: found_inf must be a one-element float32 tensor, got shape {} of {}",
              found_inf.shape(), found_inf.dtype());
  EMBER_CHECK(found_inf.device() == grad.device(), "unscale_and_check_: found_inf on {} but the gradient (shape {}) on {}",
              found_inf.device(), grad.shape(), grad.device());
  EMBER_CHECK(found_inf.storage() != grad.storage(), "unscale_and_check_: found_inf shares memory with the gradient");
  if (grad.numel() > 0) {
    if (grad.is_contiguous()) {
      unscale_and_check_op(grad.device().type, grad.dtype(), grad, found_inf, inv_scale);
    } else {
      Tensor dense = grad.contiguous();
      unscale_and_check_op(grad.device().type, grad.dtype(), dense, found_inf, inv_scale);
      NoGradGuard no_grad;  // gradients are data here, not part of a graph
      copy_(grad, dense);
    }
  }
  bump_versions({&grad, &found_inf});
}

}  // namespace ember
