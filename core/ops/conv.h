// NCHW convolution and pooling through oneDNN. Entry points: core/ops/conv.cpp;
// kernels: kernels/{reference,cpu}/conv.cpp.
#pragma once

#include <array>

#include "core/tensor.h"

namespace ember {

using Pair = std::array<int64_t, 2>;

struct Conv2dOptions {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair dilation{1, 1};
  int64_t groups = 1;
};
// input [N, C, H, W], weight [O, C/groups, kH, kW], bias [O] or undefined -> [N, O, H', W'].
// An inf or nan meeting the padding may give nan or add nothing, by kernel
// (Note [Padding and non-finite values] in core/README.md).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});
// conv2d's gradients given d(loss)/d(output) [N, O, H', W'], for autograd's
// formula: d/d(input) (of input_shape) and d/d(weight) (of weight_shape).
// Not themselves differentiable.
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options = {});
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& input, const Shape& weight_shape,
                              const Conv2dOptions& options = {});
// Both gradients from one grad_output, as PyTorch's convolution_backward with
// its output mask: equal, bit for bit, to the two calls above, and on the CPU
// cheaper, since grad_output is reordered into oneDNN's blocked layout once
// for both passes. A gradient the mask leaves out is undefined. Not
// differentiable.
struct Conv2dGradients {
  Tensor input, weight;
};
struct Conv2dGradientMask {
  bool input = true, weight = true;
};
Conv2dGradients conv2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                const Conv2dOptions& options = {}, Conv2dGradientMask mask = {});

struct Pool2dOptions {
  Pair kernel_size{2, 2};
  Pair stride{0, 0};  // {0, 0}: the kernel size, as PyTorch's default
  Pair padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& input, const Pool2dOptions& options);
// d(loss)/d(input) of max_pool2d given d(loss)/d(output): each gradient goes to its window's first maximum.
Tensor max_pool2d_backward(const Tensor& grad_output, const Tensor& input, const Pool2dOptions& options);
Tensor avg_pool2d(const Tensor& input, const Pool2dOptions& options);

}  // namespace ember
