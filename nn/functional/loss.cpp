// Loss functions of nn::functional. cross_entropy forwards to core's fused op;
// the others are composites of differentiable core ops, so their gradients
// need no code of their own. Tests: tests/nn/test_loss.cpp.
#include "nn/functional/loss.h"

#include <limits>
#include <vector>

#include "autograd/custom_function.h"
#include "core/autocast_ops.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "nn/functional/activation.h"

namespace ember::nn::functional {

namespace {

Tensor reduce(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::none: return loss;
    case Reduction::sum: return sum(loss);
    case Reduction::mean: return mean(loss);
  }
  return loss;
}

// Losses run in f32 under autocast (Note [Autocast] in core/README.md).
constexpr AutocastKind kF32 = AutocastKind::f32;

Tensor f32(const Tensor& t) { return autocast_input(t, kF32); }

void check_same_shape(const Tensor& input, const Tensor& target, std::string_view op) {
  EMBER_CHECK(input.defined() && target.defined(), "{}: undefined input or target", op);
  EMBER_CHECK(input.shape() == target.shape(), "{}: input of shape {} and target of shape {} must have the same shape",
              op, input.shape(), target.shape());
  EMBER_CHECK(is_floating(input.dtype()), "{}: expected a floating point input, got {}", op, input.dtype());
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options) {
  return ember::cross_entropy(input, target, options);
}

// loss_i = -w_{t_i} x_{i, t_i} (0 where t_i == ignore_index); the mean divides by sum_i w_{t_i}.
Tensor nll_loss(const Tensor& input, const Tensor& target, const NllLossOptions& options) {
  if (autocast_wants(kF32, {&input, &options.weight})) [[unlikely]] {
    NllLossOptions cast_options = options;
    cast_options.weight = f32(options.weight);
    return nll_loss(f32(input), target, cast_options);
  }
  EMBER_CHECK(input.defined() && target.defined(), "nll_loss: undefined input or target");
  EMBER_CHECK(is_floating(input.dtype()), "nll_loss: expected floating point log-probabilities, got {}",
              input.dtype());
  EMBER_CHECK(input.dim() >= 1, "nll_loss: expected input [C], [N, C] or [N, C, d1, ...], got a 0-d tensor");
  EMBER_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32,
              "nll_loss: expected class-index targets of dtype int64 or int32, got {}", target.dtype());
  const int class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.shape()[class_dim];
  Shape row_shape;
  Dims classes_last;
  for (int d = 0; d < input.dim(); ++d)
    if (d != class_dim) row_shape.push_back(input.shape()[d]), classes_last.push_back(d);
  classes_last.push_back(class_dim);
  EMBER_CHECK(target.shape() == row_shape, "nll_loss: expected targets of shape {} for input {}, got {}", row_shape,
              input.shape(), target.shape());
  if (options.weight.defined())
    EMBER_CHECK(options.weight.dim() == 1 && options.weight.size(0) == classes &&
                    options.weight.dtype() == input.dtype() && options.weight.device() == input.device(),
                "nll_loss: expected weight [{}] of dtype {} on {} (one per class, the input's dtype), got {} of {} on {}",
                classes, input.dtype(), input.device(), options.weight.shape(), options.weight.dtype(),
                options.weight.device());
  Tensor flat_target = target.to(DType::i64).reshape({row_shape.numel()});
  bool every_target_ignored = true;
  for (int64_t value : flat_target.to_vector<int64_t>()) {
    EMBER_CHECK(value == options.ignore_index || (value >= 0 && value < classes),
                "nll_loss: target {} is out of bounds for {} classes (ignore_index is {})", value, classes,
                options.ignore_index);
    every_target_ignored = every_target_ignored && value == options.ignore_index;
  }
  Tensor rows = input.permute(classes_last).reshape({row_shape.numel(), classes});
  Tensor counted = ne(flat_target, options.ignore_index);
  Tensor safe_target = where(counted, flat_target, 0);  // an index gather can read for ignored rows
  // An ignored row reads class 0 and must add nothing, even where that is
  // -inf or NaN (a masked class under log_softmax): 0 * -inf made the loss NaN.
  Tensor picked = where(counted, gather(rows, 1, safe_target.unsqueeze(1)).squeeze(1), 0);
  Tensor target_weight = counted.to(input.dtype());
  if (options.weight.defined()) target_weight = target_weight * index_select(options.weight, 0, safe_target);
  Tensor loss = -(picked * target_weight);
  switch (options.reduction) {
    case Reduction::none: return loss.reshape(row_shape);
    case Reduction::sum: return sum(loss);
    case Reduction::mean:
      // Every target ignored: NaN, PyTorch's 0 / 0, but with zero gradients as
      // its backward gives (dividing by the zero weight would send 0 * inf =
      // NaN back, and poison a gradient accumulated over micro-batches).
      if (every_target_ignored) return sum(loss) + std::numeric_limits<double>::quiet_NaN();
      return sum(loss) / sum(target_weight);
  }
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast_wants(kF32, {&input, &target})) [[unlikely]]
    return mse_loss(f32(input), f32(target), reduction);
  check_same_shape(input, target, "mse_loss");
  Tensor difference = input - target;
  return reduce(difference * difference, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  if (autocast_wants(kF32, {&input, &target})) [[unlikely]]
    return l1_loss(f32(input), f32(target), reduction);
  check_same_shape(input, target, "l1_loss");
  return reduce(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  if (autocast_wants(kF32, {&input, &target})) [[unlikely]]
    return smooth_l1_loss(f32(input), f32(target), reduction, beta);
  check_same_shape(input, target, "smooth_l1_loss");
  EMBER_CHECK(beta >= 0, "smooth_l1_loss: beta must be non-negative, got {}", beta);
  if (beta == 0) return l1_loss(input, target, reduction);
  Tensor difference = input - target, magnitude = abs(difference);
  // Both branches are differentiated: the square is of the difference clamped
  // to the quadratic zone, so an infinite difference's gradient is +-1, not
  // 0 * inf = NaN from the branch not taken.
  Tensor inside = clamp(difference, -beta, beta);
  Tensor loss = where(lt(magnitude, beta), inside * inside * (0.5 / beta), magnitude - 0.5 * beta);
  return reduce(loss, reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  if (autocast_wants(kF32, {&input, &target})) [[unlikely]]
    return huber_loss(f32(input), f32(target), reduction, delta);
  check_same_shape(input, target, "huber_loss");
  EMBER_CHECK(delta > 0, "huber_loss: delta must be positive, got {}", delta);
  Tensor difference = input - target, magnitude = abs(difference);
  Tensor inside = clamp(difference, -delta, delta);  // as in smooth_l1_loss: finite in both branches
  Tensor loss = where(lt(magnitude, delta), inside * inside * 0.5, (magnitude - 0.5 * delta) * delta);
  return reduce(loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& options) {
  if (autocast_wants(kF32, {&input, &target})) [[unlikely]]
    return kl_div(f32(input), f32(target), options);
  check_same_shape(input, target, "kl_div");
  Tensor loss;
  if (options.log_target) {
    loss = exp(target) * (target - input);
  } else {
    // PyTorch's xlogy(t, t) - t x: a zero target adds 0. The log reads 1
    // there, so that its gradient stays finite (PyTorch's target gradient is
    // NaN at 0); a negative target still gives NaN, as PyTorch's.
    Tensor log_target = log(where(ne(target, 0), target, 1.0));
    loss = target * (log_target - input);
  }
  switch (options.reduction) {
    case KlDivReduction::none: return loss;
    case KlDivReduction::sum: return sum(loss);
    case KlDivReduction::mean: return mean(loss);
    case KlDivReduction::batchmean:
      return input.dim() == 0 ? sum(loss) : sum(loss) / static_cast<double>(input.size(0));
  }
  return loss;
}

namespace {

// -(t log x + (1 - t) log(1 - x)), each log clamped at -100, with PyTorch's
// gradients: w (x - t) / max(x (1 - x), 1e-12) for the input and
// log(1 - x) - log(x) for the target. As a composite, the gradient of a
// clamped log at x = 0 or 1 was 0 * inf = NaN: a sigmoid saturated to 1.0
// in f32 (any logit past 17) poisoned the step.
struct BinaryCrossEntropy : autograd::Function<BinaryCrossEntropy> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& input, const Tensor& target) {
    ctx.save_for_backward({input, target});
    return -(target * clamp_min(log(input), -100.0) + (1.0 - target) * clamp_min(log1p(-input), -100.0));
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& grads) {
    const std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &input = saved[0], &target = saved[1], &grad = grads[0];
    Tensor grad_input, grad_target;
    // PyTorch's EPSILON is the float nearest 1e-12.
    constexpr double kEpsilon = double(1e-12f);
    if (ctx.needs_input_grad(0)) grad_input = grad * (input - target) / clamp_min(input * (1.0 - input), kEpsilon);
    if (ctx.needs_input_grad(1)) grad_target = grad * (log1p(-input) - log(input));
    return {grad_input, grad_target};
  }
};

}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceOptions& options) {
  // PyTorch's CPU autocast runs it in f32; CUDA's refuses it.
  const DeviceType device = input.defined() ? input.device().type : DeviceType::cpu;
  EMBER_CHECK(device == DeviceType::cpu || !is_autocast_enabled(device),
              "binary_cross_entropy: unsafe under CUDA autocast, where probabilities are rounded to a low "
              "precision dtype; take binary_cross_entropy_with_logits of the logits instead (it fuses the sigmoid)");
  if (autocast_wants(kF32, {&input, &target, &options.weight})) [[unlikely]] {
    BceOptions cast_options = options;
    cast_options.weight = f32(options.weight);
    return binary_cross_entropy(f32(input), f32(target), cast_options);
  }
  check_same_shape(input, target, "binary_cross_entropy");
  // NaN is outside too, as PyTorch's check counts it.
  const int64_t outside = sum(logical_not(logical_and(ge(input, 0), le(input, 1)))).item<int64_t>();
  EMBER_CHECK(outside == 0, "binary_cross_entropy: every element of the input must be a probability in [0, 1]; "
              "{} of the {} elements of the {} {} input are not", outside, input.numel(), input.shape(), input.dtype());
  Tensor loss = BinaryCrossEntropy::apply(input, target);
  if (options.weight.defined()) loss = loss * options.weight;
  EMBER_CHECK(loss.shape() == input.shape(), "binary_cross_entropy: weight {} does not broadcast to the input {}",
              options.weight.shape(), input.shape());
  return reduce(loss, options.reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& options) {
  if (autocast_wants(kF32, {&input, &target, &options.weight, &options.pos_weight})) [[unlikely]] {
    BceWithLogitsOptions cast_options = options;
    cast_options.weight = f32(options.weight), cast_options.pos_weight = f32(options.pos_weight);
    return binary_cross_entropy_with_logits(f32(input), f32(target), cast_options);
  }
  check_same_shape(input, target, "binary_cross_entropy_with_logits");
  Tensor softplus_negative = -logsigmoid(input);  // log(1 + e^-x)
  Tensor loss;
  if (options.pos_weight.defined()) {
    Tensor log_weight = (options.pos_weight - 1.0) * target + 1.0;
    loss = (1.0 - target) * input + log_weight * softplus_negative;
  } else {
    loss = (1.0 - target) * input + softplus_negative;
  }
  if (options.weight.defined()) loss = loss * options.weight;
  EMBER_CHECK(loss.shape() == input.shape(),
              "binary_cross_entropy_with_logits: weight {} or pos_weight {} does not broadcast to the input {}",
              options.weight.defined() ? options.weight.shape() : Shape{},
              options.pos_weight.defined() ? options.pos_weight.shape() : Shape{}, input.shape());
  return reduce(loss, options.reduction);
}

}  // namespace ember::nn::functional
