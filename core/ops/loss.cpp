// Entry point of cross-entropy: validate input, target and options, move the
// class dim last so kernels see dense rows [rows, classes], dispatch, and turn
// a class index out of range (found by the kernel) into an error naming it.
// Kernels: kernels/{reference,cpu}/loss.cpp; gradient: autograd/functions/loss.cpp.
// Tests: tests/core/test_loss.cpp, tests/nn/test_loss.cpp.
#include "core/ops/loss.h"

#include "core/autocast_ops.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/loss_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const CrossEntropyProblem&)> cross_entropy_op("cross_entropy");
Op<void(const CrossEntropyBackwardProblem&)> cross_entropy_backward_op("cross_entropy_backward");
GradSlot cross_entropy_grad("cross_entropy");

namespace {

// The validated operands, laid out as the kernels read them.
struct CrossEntropyPlan {
  CrossEntropyProblem problem;
  Tensor input;   // [rows, classes], contiguous
  Tensor target;  // [rows] indices or [rows, classes] probabilities, contiguous
  Tensor weight;  // [classes], contiguous, or undefined
  Shape row_shape;      // the shape of the unreduced loss: the input's without the class dim
  Shape permuted_shape;  // the input's shape with the class dim last
};

// [N, C, d1, ...] -> [N, d1, ..., C]: the permutation that puts the classes last.
Dims classes_last(int ndim) {
  Dims order;
  if (ndim == 1) return Dims{0};
  order.push_back(0);
  for (int d = 2; d < ndim; ++d) order.push_back(d);
  order.push_back(1);
  return order;
}

CrossEntropyPlan plan_cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options,
                                    std::string_view op) {
  EMBER_CHECK(input.defined() && target.defined(), "{}: undefined input or target", op);
  EMBER_CHECK(is_floating(input.dtype()), "{}: expected a floating point input, got {}", op, input.dtype());
  EMBER_CHECK(input.dim() >= 1, "{}: expected input [C], [N, C] or [N, C, d1, ...], got a 0-d tensor", op);
  EMBER_CHECK(target.device() == input.device(), "{}: input on {} but target on {}", op, input.device(),
              target.device());
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.shape()[class_dim];
  EMBER_CHECK(classes > 0, "{}: input of shape {} has no classes", op, input.shape());
  EMBER_CHECK(options.label_smoothing >= 0 && options.label_smoothing <= 1,
              "{}: label_smoothing must be in [0, 1], got {}", op, options.label_smoothing);
  CrossEntropyPlan plan;
  for (int d = 0; d < input.dim(); ++d)
    if (d != class_dim) plan.row_shape.push_back(input.shape()[d]);
  const bool probabilities = is_floating(target.dtype());
  if (probabilities) {
    EMBER_CHECK(target.shape() == input.shape() && target.dtype() == input.dtype(),
                "{}: probability targets must match the input: expected shape {} and dtype {}, got {} of {}", op,
                input.shape(), input.dtype(), target.shape(), target.dtype());
    // As PyTorch's: it was taken and ignored.
    EMBER_CHECK(options.ignore_index < 0, "{}: ignore_index ({}) is not supported for probability targets", op,
                options.ignore_index);
  } else {
    EMBER_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32,
                "{}: expected class-index targets of dtype int64 or int32, or floating probabilities, got {}", op,
                target.dtype());
    EMBER_CHECK(target.shape() == plan.row_shape,
                "{}: expected class-index targets of shape {} for input {}, got {}", op, plan.row_shape,
                input.shape(), target.shape());
  }
  if (options.weight.defined()) {
    const Tensor& w = options.weight;
    EMBER_CHECK(w.dim() == 1 && w.size(0) == classes && w.dtype() == input.dtype() && w.device() == input.device(),
                "{}: expected weight [{}] of dtype {} on {} (one per class, the input's dtype), got {} of {} on {}",
                op, classes, input.dtype(), input.device(), w.shape(), w.dtype(), w.device());
    plan.weight = contiguous(w);
  }
  const Dims order = classes_last(input.dim());
  plan.input = contiguous(input.permute(order));
  plan.permuted_shape = plan.input.shape();
  plan.target = contiguous(probabilities ? target.permute(order) : target);
  CrossEntropyProblem& p = plan.problem;
  p.rows = plan.row_shape.numel(), p.classes = classes;
  p.probabilities = probabilities, p.target_dtype = target.dtype();
  p.ignore_index = options.ignore_index, p.label_smoothing = options.label_smoothing;
  p.reduction = options.reduction;
  p.input = plan.input.data_ptr(), p.target = plan.target.data_ptr();
  p.weight = plan.weight.defined() ? plan.weight.data_ptr() : nullptr;
  return plan;
}

}  // namespace

CrossEntropyResult cross_entropy_forward(const Tensor& input, const Tensor& target,
                                         const CrossEntropyOptions& options) {
  CrossEntropyPlan plan = plan_cross_entropy(input, target, options, "cross_entropy");
  const TensorOptions statistics{.dtype = accumulation_dtype(input.dtype()), .device = input.device()};
  CrossEntropyResult result;
  result.loss = make_tensor(options.reduction == Reduction::none ? plan.row_shape : Shape{}, input.dtype(),
                            input.device());
  result.row_max = make_tensor(plan.row_shape, statistics.dtype, statistics.device);
  result.log_sum = make_tensor(plan.row_shape, statistics.dtype, statistics.device);
  result.total_weight = make_tensor({}, statistics.dtype, statistics.device);
  InvalidTarget invalid;
  CrossEntropyProblem& p = plan.problem;
  p.loss = result.loss.data_ptr(), p.row_max = result.row_max.data_ptr(), p.log_sum = result.log_sum.data_ptr();
  p.total_weight = result.total_weight.data_ptr(), p.invalid = &invalid;
  cross_entropy_op(input.device().type, input.dtype(), p);
  if (invalid.row >= 0) throw_invalid_target(p.classes, options.ignore_index, invalid);
  return result;
}

void throw_invalid_target(int64_t classes, int64_t ignore_index, const InvalidTarget& invalid) {
  detail::throw_error(
      fmt::format("cross_entropy: target {} is out of bounds for {} classes (target element {}; ignore_index is {})",
                  invalid.value, classes, invalid.row, ignore_index));
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  constexpr AutocastKind f32 = AutocastKind::f32;  // losses run in f32 (Note [Autocast])
  if (autocast_wants(f32, {&input, &target, &options.weight})) [[unlikely]] {
    CrossEntropyOptions cast_options = options;
    cast_options.weight = autocast_input(options.weight, f32);
    return cross_entropy(autocast_input(input, f32), autocast_input(target, f32), cast_options);
  }
  // The fused gradient is the input's only: a target or weight requiring grad
  // got none, without a word (PyTorch refuses the weight and differentiates
  // probability targets).
  if (grad_mode_enabled()) {
    EMBER_CHECK(!target.defined() || !target.requires_grad(),
                "cross_entropy: the target requires grad, and the gradient flows to the input only; detach the "
                "target, or write the loss as -(target * log_softmax(input, 1)).sum(1).mean() to train it");
    EMBER_CHECK(!options.weight.defined() || !options.weight.requires_grad(),
                "cross_entropy: the loss is not differentiable with respect to weight (as PyTorch's); detach it");
  }
  CrossEntropyResult result = cross_entropy_forward(input, target, options);
  CrossEntropyParams params{target, options, result.row_max, result.log_sum, result.total_weight};
  return with_grad(cross_entropy_grad, result.loss, {&input}, &params);
}

Tensor cross_entropy_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                              const CrossEntropyOptions& options, const Tensor& row_max, const Tensor& log_sum,
                              const Tensor& total_weight) {
  CrossEntropyPlan plan = plan_cross_entropy(input, target, options, "cross_entropy_backward");
  const Shape loss_shape = options.reduction == Reduction::none ? plan.row_shape : Shape{};
  EMBER_CHECK(grad_output.defined() && grad_output.shape() == loss_shape && grad_output.dtype() == input.dtype(),
              "cross_entropy_backward: expected grad_output of shape {} and dtype {}, got {} of {}", loss_shape,
              input.dtype(), grad_output.defined() ? grad_output.shape() : Shape{},
              grad_output.defined() ? grad_output.dtype() : input.dtype());
  const DType statistics = accumulation_dtype(input.dtype());
  auto is_row_statistic = [&](const Tensor& t) {
    return t.defined() && t.shape() == plan.row_shape && t.dtype() == statistics;
  };
  EMBER_CHECK(is_row_statistic(row_max) && is_row_statistic(log_sum) && total_weight.defined() &&
                  total_weight.numel() == 1 && total_weight.dtype() == statistics,
              "cross_entropy_backward: expected the forward's row_max and log_sum {} and total_weight of dtype {}",
              plan.row_shape, statistics);
  Tensor dense_grad = contiguous(grad_output), dense_max = contiguous(row_max), dense_log_sum = contiguous(log_sum);
  Tensor grad_input = make_tensor(plan.permuted_shape, input.dtype(), input.device());
  CrossEntropyBackwardProblem b{plan.problem};
  b.forward.row_max = dense_max.data_ptr(), b.forward.log_sum = dense_log_sum.data_ptr();
  b.forward.total_weight = total_weight.data_ptr();
  b.grad_output = dense_grad.data_ptr(), b.grad_input = grad_input.data_ptr();
  if (grad_input.numel() > 0) cross_entropy_backward_op(input.device().type, input.dtype(), b);
  if (input.dim() <= 2) return grad_input;
  // [N, d1, ..., C] back to [N, C, d1, ...]: the inverse of classes_last.
  Dims inverse{0, input.dim() - 1};
  for (int d = 1; d < input.dim() - 1; ++d) inverse.push_back(d);
  return grad_input.permute(inverse);
}

}  // namespace ember
