// Entry points of convolution and pooling: validate, compute output sizes
// (PyTorch's formulas, floor mode), make inputs contiguous NCHW, dispatch.
// Kernels: kernels/{reference,cpu}/conv.cpp. Tests: tests/core/test_conv.cpp.
#include "core/ops/conv.h"

#include <algorithm>

#include "core/autocast_ops.h"
#include "core/grad_hook.h"
#include "core/ops/conv_kernels.h"
#include "core/ops/creation.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const Conv2dProblem&)> conv2d_op("conv2d");
Op<void(const Conv2dBackwardProblem&)> conv2d_backward_input_op("conv2d_backward_input"),
    conv2d_backward_weight_op("conv2d_backward_weight");
Op<void(const Conv2dBackwardBothProblem&)> conv2d_backward_op("conv2d_backward");
Op<void(const Pool2dProblem&)> max_pool2d_op("max_pool2d"), avg_pool2d_op("avg_pool2d");
Op<void(const MaxPoolBackwardProblem&)> max_pool2d_backward_op("max_pool2d_backward");
GradSlot conv2d_grad("conv2d"), max_pool2d_grad("max_pool2d"), avg_pool2d_grad("avg_pool2d");

namespace {

void check_floating_4d(const Tensor& input, std::string_view op) {
  EMBER_CHECK(input.defined(), "{}: undefined input", op);
  EMBER_CHECK(input.dim() == 4, "{}: expected input [N, C, H, W], got {}", op, input.shape());
  EMBER_CHECK(is_floating(input.dtype()), "{}: expected a floating point input, got {}", op, input.dtype());
}

void check_positive(const Pair& pair, std::string_view op, std::string_view what) {
  EMBER_CHECK(pair[0] > 0 && pair[1] > 0, "{}: {} must be positive, got [{}, {}]", op, what, pair[0], pair[1]);
}

void check_non_negative(const Pair& pair, std::string_view op, std::string_view what) {
  EMBER_CHECK(pair[0] >= 0 && pair[1] >= 0, "{}: {} must be non-negative, got [{}, {}]", op, what, pair[0],
              pair[1]);
}

// Floor-mode output size of a sliding window along one dim: an error naming
// `op` when the padded input or the dilated kernel does not fit in int64
// (user options may be as large as they like; the arithmetic must not wrap).
int64_t window_count(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                     std::string_view op) {
  if (kernel <= 0) return 0;  // an empty weight: the caller's check names it
  int64_t padded = 0, extent = 0;
  const bool overflow = __builtin_mul_overflow(padding, 2, &padded) || __builtin_add_overflow(padded, in, &padded) ||
                        __builtin_mul_overflow(dilation, kernel - 1, &extent);
  EMBER_CHECK(!overflow, "{}: input size {} with padding {}, kernel {} and dilation {} overflows int64", op, in,
              padding, kernel, dilation);
  const int64_t span = padded - extent - 1;  // both sides non-negative: no overflow
  return span < 0 ? 0 : span / stride + 1;
}

// A dilation along a dim where the kernel is 1 changes nothing, nor does a
// stride past the padded input along a dim with one output: the kernels get
// 1 and the padded length there instead, so that they never see the
// meaningless extreme values a caller may pass (oneDNN refuses a dilation of
// 2^63 - 1 on a 1x1 kernel), and such problems share one cached primitive.
// Not a stride of 1: oneDNN wants each stride above minus the right padding,
// which the kernel derives from the output size and is negative where the
// one window ends before the padded input does.
void drop_inert_options(Conv2dProblem& p) {
  for (int d = 0; d < 2; ++d) {
    if (p.kernel[d] == 1) p.dilation[d] = 1;
    if (p.out_size[d] == 1) p.stride[d] = std::min(p.stride[d], p.in_size[d] + 2 * p.padding[d]);
  }
}

// Validates a pooling and describes it (out_size filled, data pointers not).
Pool2dProblem plan_pool(std::string_view name, const Tensor& input, const Pool2dOptions& options) {
  check_floating_4d(input, name);
  // As PyTorch: only the batch may be empty (a window of nothing but padding has no maximum).
  EMBER_CHECK(input.size(1) > 0 && input.size(2) > 0 && input.size(3) > 0,
              "{}: expected non-empty channel and spatial dims in input [N, C, H, W], got {}", name, input.shape());
  check_positive(options.kernel_size, name, "kernel_size");
  check_non_negative(options.stride, name, "stride");
  check_non_negative(options.padding, name, "padding");
  Pair stride = options.stride[0] == 0 && options.stride[1] == 0 ? options.kernel_size : options.stride;
  check_positive(stride, name, "stride");
  for (int d = 0; d < 2; ++d)
    EMBER_CHECK(options.padding[d] <= options.kernel_size[d] / 2,
                "{}: padding [{}, {}] must be at most half of kernel_size [{}, {}]", name, options.padding[0],
                options.padding[1], options.kernel_size[0], options.kernel_size[1]);
  Pool2dProblem p;
  p.batch = input.size(0), p.channels = input.size(1);
  p.in_size = {input.size(2), input.size(3)};
  p.kernel = options.kernel_size, p.stride = stride, p.padding = options.padding;
  p.count_include_pad = options.count_include_pad;
  for (int d = 0; d < 2; ++d) p.out_size[d] = window_count(p.in_size[d], p.kernel[d], stride[d], p.padding[d], 1, name);
  EMBER_CHECK(p.out_size[0] > 0 && p.out_size[1] > 0,
              "{}: input {} with padding [{}, {}] is smaller than kernel_size [{}, {}]", name, input.shape(),
              p.padding[0], p.padding[1], p.kernel[0], p.kernel[1]);
  return p;
}

Tensor pool(const Op<void(const Pool2dProblem&)>& op, const GradSlot& slot, const Tensor& input,
            const Pool2dOptions& options) {
  Pool2dProblem p = plan_pool(op.name(), input, options);
  Tensor out = make_tensor({p.batch, p.channels, p.out_size[0], p.out_size[1]}, input.dtype(), input.device());
  if (out.numel() > 0) {
    Tensor dense = contiguous(input);
    p.input = dense.data_ptr(), p.out = out.data_ptr();
    op(input.device().type, input.dtype(), p);
  }
  Pool2dOptions resolved = options;
  resolved.stride = p.stride;
  return with_grad(slot, out, {&input}, &resolved);
}

Tensor compute_conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  check_floating_4d(input, "conv2d");
  EMBER_CHECK(weight.defined() && weight.dim() == 4, "conv2d: expected weight [O, C / groups, kH, kW], got {}",
              weight.defined() ? weight.shape() : Shape{});
  EMBER_CHECK(weight.dtype() == input.dtype() && weight.device() == input.device(),
              "conv2d: expected input and weight of one dtype and device, got {} on {} and {} on {}", input.dtype(),
              input.device(), weight.dtype(), weight.device());
  check_positive(options.stride, "conv2d", "stride");
  check_positive(options.dilation, "conv2d", "dilation");
  check_non_negative(options.padding, "conv2d", "padding");
  int64_t groups = options.groups;
  EMBER_CHECK(groups > 0, "conv2d: groups must be positive, got {}", groups);
  int64_t out_channels = weight.size(0);
  EMBER_CHECK(out_channels % groups == 0, "conv2d: weight {} has {} output channels, not divisible by groups {}",
              weight.shape(), out_channels, groups);
  EMBER_CHECK(input.size(1) == weight.size(1) * groups,
              "conv2d: expected input [N, C, H, W] with C = {} for weight {} and groups {}, got {}",
              weight.size(1) * groups, weight.shape(), groups, input.shape());
  if (bias.defined()) {
    EMBER_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, "conv2d: expected bias [{}], got {}", out_channels,
                bias.shape());
    EMBER_CHECK(bias.dtype() == input.dtype() && bias.device() == input.device(),
                "conv2d: expected bias of dtype {} on {}, got {} on {}", input.dtype(), input.device(), bias.dtype(),
                bias.device());
  }
  Conv2dProblem p;
  p.batch = input.size(0), p.in_channels = input.size(1), p.out_channels = out_channels, p.groups = groups;
  p.in_size = {input.size(2), input.size(3)};
  p.kernel = {weight.size(2), weight.size(3)};
  p.stride = options.stride, p.padding = options.padding, p.dilation = options.dilation;
  for (int d = 0; d < 2; ++d)
    p.out_size[d] = window_count(p.in_size[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d], "conv2d");
  EMBER_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0 && p.out_size[0] > 0 && p.out_size[1] > 0,
              "conv2d: input {} with padding [{}, {}] is smaller than the dilated kernel of weight {}", input.shape(),
              p.padding[0], p.padding[1], weight.shape());
  drop_inert_options(p);
  Tensor out = make_tensor({p.batch, out_channels, p.out_size[0], p.out_size[1]}, input.dtype(), input.device());
  if (out.numel() == 0) return out;
  if (p.in_channels == 0) {  // an empty sum: zeros, plus the bias
    out.fill_(0);
    if (bias.defined()) out.copy_(bias.view({out_channels, 1, 1}));
    return out;
  }
  Tensor dense_input = contiguous(input), dense_weight = contiguous(weight);
  Tensor dense_bias = bias.defined() ? contiguous(bias) : Tensor();
  p.input = dense_input.data_ptr(), p.weight = dense_weight.data_ptr(), p.out = out.data_ptr();
  p.bias = dense_bias.defined() ? dense_bias.data_ptr() : nullptr;
  conv2d_op(input.device().type, input.dtype(), p);
  return out;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  constexpr AutocastKind lower = AutocastKind::lower_precision;  // Note [Autocast]
  if (autocast_wants(lower, {&input, &weight, &bias})) [[unlikely]]
    return conv2d(autocast_input(input, lower), autocast_input(weight, lower), autocast_input(bias, lower), options);
  Tensor out;
  {
    NoGradGuard no_grad;  // the empty-channel path fills and copies into its output
    out = compute_conv2d(input, weight, bias, options);
  }
  return with_grad(conv2d_grad, out, {&input, &weight, &bias}, &options);
}

namespace {

// The forward problem behind a gradient, from the shapes the forward had;
// checks that grad_output has the forward output's shape and `known`'s dtype.
Conv2dProblem plan_conv_backward(std::string_view name, const Tensor& grad_output, const Tensor& known,
                                 const Shape& input_shape, const Shape& weight_shape, const Conv2dOptions& options) {
  EMBER_CHECK(grad_output.defined() && known.defined(), "{}: undefined tensor argument", name);
  EMBER_CHECK(input_shape.ndim() == 4 && weight_shape.ndim() == 4 && options.groups > 0 &&
                  input_shape[1] == weight_shape[1] * options.groups && weight_shape[0] % options.groups == 0,
              "{}: input {} and weight {} do not fit a convolution with groups {}", name, input_shape, weight_shape,
              options.groups);
  check_positive(options.stride, name, "stride");
  check_positive(options.dilation, name, "dilation");
  check_non_negative(options.padding, name, "padding");
  Conv2dProblem p;
  p.batch = input_shape[0], p.in_channels = input_shape[1], p.out_channels = weight_shape[0];
  p.groups = options.groups;
  p.in_size = {input_shape[2], input_shape[3]};
  p.kernel = {weight_shape[2], weight_shape[3]};
  p.stride = options.stride, p.padding = options.padding, p.dilation = options.dilation;
  for (int d = 0; d < 2; ++d)
    p.out_size[d] = window_count(p.in_size[d], p.kernel[d], p.stride[d], p.padding[d], p.dilation[d], name);
  Shape expected{p.batch, p.out_channels, p.out_size[0], p.out_size[1]};
  EMBER_CHECK(grad_output.shape() == expected && grad_output.dtype() == known.dtype() &&
                  grad_output.device() == known.device() && is_floating(known.dtype()),
              "{}: expected grad_output {} of dtype {} on {}, got {} of {} on {}", name, expected, known.dtype(),
              known.device(), grad_output.shape(), grad_output.dtype(), grad_output.device());
  drop_inert_options(p);
  return p;
}

// Runs one of the gradient kernels into a fresh `grad` of `shape`.
Tensor conv_backward(const Op<void(const Conv2dBackwardProblem&)>& op, Conv2dProblem forward,
                     const Tensor& grad_output, const Tensor& known, bool known_is_weight, const Shape& shape) {
  Tensor grad = make_tensor(shape, known.dtype(), known.device());
  if (grad.numel() == 0) return grad;
  if (grad_output.numel() == 0 || forward.in_channels == 0) return grad.fill_(0);
  Tensor dense_grad_output = contiguous(grad_output), dense_known = contiguous(known);
  (known_is_weight ? forward.weight : forward.input) = dense_known.data_ptr();
  Conv2dBackwardProblem p{forward, dense_grad_output.data_ptr(), grad.data_ptr()};
  op(known.device().type, known.dtype(), p);
  return grad;
}

}  // namespace

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options) {
  NoGradGuard no_grad;
  EMBER_CHECK(weight.defined(), "conv2d_backward_input: undefined weight");
  Conv2dProblem p = plan_conv_backward("conv2d_backward_input", grad_output, weight, input_shape, weight.shape(),
                                       options);
  return conv_backward(conv2d_backward_input_op, p, grad_output, weight, true, input_shape);
}

Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                              const Conv2dOptions& options) {
  NoGradGuard no_grad;
  EMBER_CHECK(input.defined(), "conv2d_backward_weight: undefined input");
  Conv2dProblem p = plan_conv_backward("conv2d_backward_weight", grad_output, input, input.shape(), weight_shape,
                                       options);
  return conv_backward(conv2d_backward_weight_op, p, grad_output, input, false, weight_shape);
}

Conv2dGradients conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                const Conv2dOptions& options, Conv2dGradientMask mask) {
  NoGradGuard no_grad;
  EMBER_CHECK(input.defined() && weight.defined(), "conv2d_backward: undefined {}",
              input.defined() ? "weight" : "input");
  EMBER_CHECK(weight.dtype() == input.dtype() && weight.device() == input.device(),
              "conv2d_backward: expected input and weight of one dtype and device, got {} on {} and {} on {}",
              input.dtype(), input.device(), weight.dtype(), weight.device());
  Conv2dProblem p = plan_conv_backward("conv2d_backward", grad_output, input, input.shape(), weight.shape(), options);
  Conv2dGradients grads;
  // One gradient, or a problem with nothing to reorder: the single passes.
  if (!mask.input || !mask.weight || input.numel() == 0 || weight.numel() == 0 || grad_output.numel() == 0) {
    if (mask.input) grads.input = conv_backward(conv2d_backward_input_op, p, grad_output, weight, true, input.shape());
    if (mask.weight)
      grads.weight = conv_backward(conv2d_backward_weight_op, p, grad_output, input, false, weight.shape());
    return grads;
  }
  grads.input = make_tensor(input.shape(), input.dtype(), input.device());
  grads.weight = make_tensor(weight.shape(), weight.dtype(), weight.device());
  Tensor dense_grad_output = contiguous(grad_output), dense_input = contiguous(input), dense_weight = contiguous(weight);
  p.input = dense_input.data_ptr(), p.weight = dense_weight.data_ptr();
  conv2d_backward_op(input.device().type, input.dtype(),
                     {p, dense_grad_output.data_ptr(), grads.input.data_ptr(), grads.weight.data_ptr()});
  return grads;
}

Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return pool(max_pool2d_op, max_pool2d_grad, input, options);
}
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options) {
  return pool(avg_pool2d_op, avg_pool2d_grad, input, options);
}

Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& input, const Pool2dOptions& options) {
  MaxPoolBackwardProblem p{plan_pool("max_pool2d_backward", input, options)};
  Shape expected{p.forward.batch, p.forward.channels, p.forward.out_size[0], p.forward.out_size[1]};
  EMBER_CHECK(grad_output.defined() && grad_output.shape() == expected && grad_output.dtype() == input.dtype(),
              "max_pool2d_backward: expected grad_output {} of dtype {}, got {} of {}", expected, input.dtype(),
              grad_output.defined() ? grad_output.shape() : Shape{}, grad_output.defined() ? grad_output.dtype() : input.dtype());
  Tensor grad_input = zeros(input.shape(), {.dtype = input.dtype(), .device = input.device()});
  if (grad_output.numel() == 0) return grad_input;
  Tensor dense_input = contiguous(input), dense_grad = contiguous(grad_output);
  p.forward.input = dense_input.data_ptr();
  p.grad_output = dense_grad.data_ptr(), p.grad_input = grad_input.data_ptr();
  max_pool2d_backward_op(input.device().type, input.dtype(), p);
  return grad_input;
}

}  // namespace ember
