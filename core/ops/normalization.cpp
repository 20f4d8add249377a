// Entry points of the normalisation family: validate shapes and dtypes, make
// the operands contiguous, allocate the output and the saved statistics, and
// dispatch; batch_norm also updates the running statistics. Kernels:
// kernels/{reference,cpu}/normalization.cpp; gradients:
// autograd/functions/normalization.cpp. Tests: tests/core/test_normalization.cpp.
#include "core/ops/normalization.h"

#include <limits>

#include "core/autocast_ops.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/normalization_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const RowNormProblem&)> layer_norm_op("layer_norm"), rms_norm_op("rms_norm");
Op<void(const RowNormBackwardProblem&)> layer_norm_backward_op("layer_norm_backward"),
    rms_norm_backward_op("rms_norm_backward");
Op<void(const BatchNormProblem&)> batch_norm_op("batch_norm");
Op<void(const BatchNormBackwardProblem&)> batch_norm_backward_op("batch_norm_backward");
GradSlot layer_norm_grad("layer_norm"), rms_norm_grad("rms_norm"), batch_norm_grad("batch_norm");

namespace {

// Normalisations run in f32 under autocast (Note [Autocast]).
constexpr AutocastKind kF32 = AutocastKind::f32;

void* data_or_null(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? contiguous(t) : Tensor(); }

void check_floating_input(const Tensor& input, std::string_view op) {
  EMBER_CHECK(input.defined(), "{}: undefined input", op);
  EMBER_CHECK(is_floating(input.dtype()), "{}: expected a floating point input, got {}", op, input.dtype());
}

// weight/bias (when defined) must have `shape` and the input's dtype and device.
void check_parameter(const Tensor& parameter, const Tensor& input, const Shape& shape, std::string_view op,
                     std::string_view what) {
  if (!parameter.defined()) return;
  EMBER_CHECK(parameter.shape() == shape, "{}: expected {} of shape {}, got {}", op, what, shape, parameter.shape());
  EMBER_CHECK(parameter.dtype() == input.dtype() && parameter.device() == input.device(),
              "{}: expected {} of dtype {} on {} (the input's), got {} on {}", op, what, input.dtype(),
              input.device(), parameter.dtype(), parameter.device());
}

// The leading dims of `input` (one row each) once its trailing dims are
// checked against normalized_shape.
Shape leading_shape(const Tensor& input, const Shape& normalized_shape, std::string_view op) {
  const int ndim = input.dim(), normalized_ndim = normalized_shape.ndim();
  EMBER_CHECK(normalized_ndim >= 1, "{}: normalized_shape must have at least one dim, got {}", op, normalized_shape);
  bool matches = ndim >= normalized_ndim;
  for (int d = 0; matches && d < normalized_ndim; ++d)
    matches = input.shape()[ndim - normalized_ndim + d] == normalized_shape[d];
  EMBER_CHECK(matches, "{}: input of shape {} does not end with normalized_shape {}", op, input.shape(),
              normalized_shape);
  Shape leading;
  for (int d = 0; d < ndim - normalized_ndim; ++d) leading.push_back(input.shape()[d]);
  return leading;
}

NormalizationResult row_norm_forward(const Op<void(const RowNormProblem&)>& op, const Tensor& input,
                                     const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                                     double eps, bool with_mean) {
  const std::string_view name = op.name();
  check_floating_input(input, name);
  Shape leading = leading_shape(input, normalized_shape, name);
  check_parameter(weight, input, normalized_shape, name, "weight");
  check_parameter(bias, input, normalized_shape, name, "bias");
  EMBER_CHECK(eps >= 0, "{}: eps must be non-negative, got {}", name, eps);
  NormalizationResult result;
  const TensorOptions statistics{.dtype = accumulation_dtype(input.dtype()), .device = input.device()};
  result.output = make_tensor(input.shape(), input.dtype(), input.device());
  result.rstd = zeros(leading, statistics);
  if (with_mean) result.mean = zeros(leading, statistics);
  if (input.numel() == 0) return result;
  Tensor dense_input = contiguous(input), dense_weight = contiguous_or_undefined(weight);
  Tensor dense_bias = contiguous_or_undefined(bias);
  RowNormProblem p;
  p.rows = leading.numel(), p.cols = normalized_shape.numel(), p.eps = eps;
  p.input = dense_input.data_ptr(), p.weight = data_or_null(dense_weight), p.bias = data_or_null(dense_bias);
  p.output = result.output.data_ptr(), p.mean = data_or_null(result.mean), p.rstd = result.rstd.data_ptr();
  op(input.device().type, input.dtype(), p);
  return result;
}

// grad_output must match the forward's output.
void check_grad_output(const Tensor& grad_output, const Tensor& input, std::string_view op) {
  EMBER_CHECK(grad_output.defined() && grad_output.shape() == input.shape() && grad_output.dtype() == input.dtype(),
              "{}: expected grad_output of shape {} and dtype {}, got {} of {}", op, input.shape(), input.dtype(),
              grad_output.defined() ? grad_output.shape() : Shape{},
              grad_output.defined() ? grad_output.dtype() : input.dtype());
}

NormalizationGrads row_norm_backward(const Op<void(const RowNormBackwardProblem&)>& op, const Tensor& grad_output,
                                     const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, bool has_bias, bool with_mean) {
  const std::string_view name = op.name();
  check_floating_input(input, name);
  Shape leading = leading_shape(input, normalized_shape, name);
  check_parameter(weight, input, normalized_shape, name, "weight");
  check_grad_output(grad_output, input, name);
  const DType statistics = accumulation_dtype(input.dtype());
  for (const Tensor* statistic : {&mean, &rstd}) {
    if (statistic == &mean && !with_mean) continue;
    EMBER_CHECK(statistic->defined() && statistic->numel() == leading.numel() && statistic->dtype() == statistics,
                "{}: expected saved statistics of {} elements and dtype {}", name, leading.numel(), statistics);
  }
  NormalizationGrads grads;
  const TensorOptions like_input{.dtype = input.dtype(), .device = input.device()};
  grads.input = make_tensor(input.shape(), input.dtype(), input.device());
  if (weight.defined()) grads.weight = zeros(normalized_shape, like_input);
  if (has_bias) grads.bias = zeros(normalized_shape, like_input);
  if (input.numel() == 0) return grads;
  Tensor dense_grad = contiguous(grad_output), dense_input = contiguous(input);
  Tensor dense_weight = contiguous_or_undefined(weight);
  Tensor dense_mean = contiguous_or_undefined(mean), dense_rstd = contiguous(rstd);
  RowNormBackwardProblem p;
  p.rows = leading.numel(), p.cols = normalized_shape.numel();
  p.grad_output = dense_grad.data_ptr(), p.input = dense_input.data_ptr(), p.weight = data_or_null(dense_weight);
  p.mean = data_or_null(dense_mean), p.rstd = dense_rstd.data_ptr();
  p.grad_input = grads.input.data_ptr(), p.grad_weight = data_or_null(grads.weight);
  p.grad_bias = data_or_null(grads.bias);
  op(input.device().type, input.dtype(), p);
  return grads;
}

// rms_norm's eps when unset: the machine epsilon of the dtype it computes in
// (f32 for f16, bf16 and f32; f64 for f64), as PyTorch's kernels take it
// (opmath_type's, though its docstring says the input's). bf16's own 2^-7
// changed small activations' results up to 17 times, and made them depend on
// whether autocast, which computes in f32, was on.
double default_rms_norm_eps(DType dtype) {
  return dtype == DType::f64 ? std::numeric_limits<double>::epsilon()
                             : double(std::numeric_limits<float>::epsilon());
}

// The channel count and per-channel element count of a batch_norm input [N, C, *].
struct BatchShape {
  int64_t batch, channels, spatial;
};
BatchShape batch_shape(const Tensor& input, std::string_view op) {
  check_floating_input(input, op);
  EMBER_CHECK(input.dim() >= 2, "{}: expected input [N, C, *] with at least 2 dims, got {}", op, input.shape());
  BatchShape shape{input.size(0), input.size(1), 1};
  for (int d = 2; d < input.dim(); ++d) shape.spatial *= input.shape()[d];
  return shape;
}

void check_running_statistic(const Tensor& statistic, int64_t channels, std::string_view what) {
  if (!statistic.defined()) return;
  EMBER_CHECK(statistic.dim() == 1 && statistic.size(0) == channels && is_floating(statistic.dtype()),
              "batch_norm: expected {} of shape [{}] and a floating dtype, got {} of {}", what, channels,
              statistic.shape(), statistic.dtype());
}

}  // namespace

NormalizationResult layer_norm_forward(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                                       const Tensor& bias, double eps) {
  return row_norm_forward(layer_norm_op, input, normalized_shape, weight, bias, eps, /*with_mean=*/true);
}

NormalizationResult rms_norm_forward(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                                     double eps) {
  return row_norm_forward(rms_norm_op, input, normalized_shape, weight, {}, eps, /*with_mean=*/false);
}

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (autocast_wants(kF32, {&input, &weight, &bias})) [[unlikely]]
    return layer_norm(autocast_input(input, kF32), normalized_shape, autocast_input(weight, kF32),
                      autocast_input(bias, kF32), eps);
  NormalizationResult result = layer_norm_forward(input, normalized_shape, weight, bias, eps);
  NormalizationParams params{normalized_shape, result.mean, result.rstd, true};
  return with_grad(layer_norm_grad, result.output, {&input, &weight, &bias}, &params);
}

Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, std::optional<double> eps) {
  if (autocast_wants(kF32, {&input, &weight})) [[unlikely]]
    return rms_norm(autocast_input(input, kF32), normalized_shape, autocast_input(weight, kF32), eps);
  check_floating_input(input, "rms_norm");
  NormalizationResult result =
      rms_norm_forward(input, normalized_shape, weight, eps ? *eps : default_rms_norm_eps(input.dtype()));
  NormalizationParams params{normalized_shape, result.mean, result.rstd, true};
  return with_grad(rms_norm_grad, result.output, {&input, &weight}, &params);
}

NormalizationGrads layer_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                       const Tensor& weight, const Tensor& mean, const Tensor& rstd, bool has_bias) {
  return row_norm_backward(layer_norm_backward_op, grad_output, input, normalized_shape, weight, mean, rstd,
                           has_bias, /*with_mean=*/true);
}

NormalizationGrads rms_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                     const Tensor& weight, const Tensor& rstd) {
  return row_norm_backward(rms_norm_backward_op, grad_output, input, normalized_shape, weight, {}, rstd, false,
                           /*with_mean=*/false);
}

NormalizationResult batch_norm_forward(const Tensor& input, const Tensor& mean, const Tensor& var,
                                       const Tensor& weight, const Tensor& bias, bool training, double eps) {
  BatchShape shape = batch_shape(input, "batch_norm");
  check_parameter(weight, input, {shape.channels}, "batch_norm", "weight");
  check_parameter(bias, input, {shape.channels}, "batch_norm", "bias");
  EMBER_CHECK(eps >= 0, "batch_norm: eps must be non-negative, got {}", eps);
  if (training) {
    EMBER_CHECK(shape.batch * shape.spatial != 1,
                "batch_norm: expected more than 1 value per channel when training, got input of shape {}",
                input.shape());
  } else {
    EMBER_CHECK(mean.defined() && var.defined(),
                "batch_norm: running_mean and running_var must be defined in evaluation mode");
    check_running_statistic(mean, shape.channels, "running_mean");
    check_running_statistic(var, shape.channels, "running_var");
  }
  const TensorOptions statistics{.dtype = accumulation_dtype(input.dtype()), .device = input.device()};
  NormalizationResult result;
  result.output = make_tensor(input.shape(), input.dtype(), input.device());
  // A training batch with no elements has nan statistics, as PyTorch's.
  const double empty_statistic = training ? std::numeric_limits<double>::quiet_NaN() : 0.0;
  result.mean = full({shape.channels}, empty_statistic, statistics);
  result.rstd = full({shape.channels}, empty_statistic, statistics);
  if (training) result.var = full({shape.channels}, empty_statistic, statistics);
  if (input.numel() == 0) return result;
  Tensor dense_input = contiguous(input), dense_weight = contiguous_or_undefined(weight);
  Tensor dense_bias = contiguous_or_undefined(bias);
  Tensor running_mean = training ? Tensor() : contiguous(mean.to(statistics.dtype));
  Tensor running_var = training ? Tensor() : contiguous(var.to(statistics.dtype));
  BatchNormProblem p;
  p.batch = shape.batch, p.channels = shape.channels, p.spatial = shape.spatial, p.training = training, p.eps = eps;
  p.input = dense_input.data_ptr(), p.weight = data_or_null(dense_weight), p.bias = data_or_null(dense_bias);
  p.running_mean = data_or_null(running_mean), p.running_var = data_or_null(running_var);
  p.output = result.output.data_ptr(), p.mean = result.mean.data_ptr(), p.rstd = result.rstd.data_ptr();
  p.var = data_or_null(result.var);
  batch_norm_op(input.device().type, input.dtype(), p);
  return result;
}

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  // The running statistics are updated in place: they keep their own dtype.
  if (autocast_wants(kF32, {&input, &weight, &bias})) [[unlikely]]
    return batch_norm(autocast_input(input, kF32), running_mean, running_var, autocast_input(weight, kF32),
                      autocast_input(bias, kF32), training, momentum, eps);
  BatchShape shape = batch_shape(input, "batch_norm");
  check_running_statistic(running_mean, shape.channels, "running_mean");
  check_running_statistic(running_var, shape.channels, "running_var");
  NormalizationResult result = batch_norm_forward(input, running_mean, running_var, weight, bias, training, eps);
  if (training && (running_mean.defined() || running_var.defined()) && input.numel() > 0) {
    NoGradGuard no_grad;  // the running statistics are buffers, outside the graph
    const double count = double(shape.batch * shape.spatial);
    if (running_mean.defined()) {
      Tensor target = running_mean;
      target.copy_(running_mean * (1 - momentum) + result.mean * momentum);
    }
    if (running_var.defined()) {
      // The batch's variance made unbiased: var * n / (n - 1).
      Tensor target = running_var;
      target.copy_(running_var * (1 - momentum) + result.var * (momentum * count / (count - 1)));
    }
  }
  Dims unused;
  NormalizationParams params{unused, result.mean, result.rstd, training};
  return with_grad(batch_norm_grad, result.output, {&input, &weight, &bias}, &params);
}

NormalizationGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                       const Tensor& mean, const Tensor& rstd, bool training, bool has_bias) {
  BatchShape shape = batch_shape(input, "batch_norm_backward");
  check_parameter(weight, input, {shape.channels}, "batch_norm_backward", "weight");
  check_grad_output(grad_output, input, "batch_norm_backward");
  const DType statistics = accumulation_dtype(input.dtype());
  EMBER_CHECK(mean.defined() && rstd.defined() && mean.numel() == shape.channels &&
                  rstd.numel() == shape.channels && mean.dtype() == statistics && rstd.dtype() == statistics,
              "batch_norm_backward: expected saved statistics of shape [{}] and dtype {}", shape.channels,
              statistics);
  NormalizationGrads grads;
  const TensorOptions like_input{.dtype = input.dtype(), .device = input.device()};
  grads.input = make_tensor(input.shape(), input.dtype(), input.device());
  if (weight.defined()) grads.weight = zeros({shape.channels}, like_input);
  if (has_bias) grads.bias = zeros({shape.channels}, like_input);
  if (input.numel() == 0) return grads;
  Tensor dense_grad = contiguous(grad_output), dense_input = contiguous(input);
  Tensor dense_weight = contiguous_or_undefined(weight), dense_mean = contiguous(mean), dense_rstd = contiguous(rstd);
  BatchNormBackwardProblem p;
  p.batch = shape.batch, p.channels = shape.channels, p.spatial = shape.spatial, p.training = training;
  p.grad_output = dense_grad.data_ptr(), p.input = dense_input.data_ptr(), p.weight = data_or_null(dense_weight);
  p.mean = dense_mean.data_ptr(), p.rstd = dense_rstd.data_ptr();
  p.grad_input = grads.input.data_ptr(), p.grad_weight = data_or_null(grads.weight);
  p.grad_bias = data_or_null(grads.bias);
  batch_norm_backward_op(input.device().type, input.dtype(), p);
  return grads;
}

}  // namespace ember
