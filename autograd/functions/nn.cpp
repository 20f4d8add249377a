// Gradients of convolution and pooling (forward: core/ops/conv.cpp). The
// input gradient of a convolution is a transposed convolution and its weight
// gradient a convolution of the input with the output gradient; both are
// built here from the forward conv2d, so they run on the same oneDNN kernels.
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/conv.h"
#include "core/ops/conv_kernels.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// d(conv2d)/d(input): g [N, O, Ho, Wo] spread out by the stride, padded so every
// input position sees the windows it was in, then convolved with the weight's
// channels swapped per group and flipped in space -> [N, C, H, W].
Tensor conv_input_grad(const Tensor& g, const Tensor& weight, const Shape& input_shape, const Conv2dOptions& o) {
  int64_t groups = o.groups, out_channels = weight.size(0), group_in = weight.size(1);
  int64_t kernel[2] = {weight.size(2), weight.size(3)};
  Shape spread_shape{g.size(0), g.size(1), (g.size(2) - 1) * o.stride[0] + 1, (g.size(3) - 1) * o.stride[1] + 1};
  Tensor spread = zeros(spread_shape, {.dtype = g.dtype(), .device = g.device()});
  spread.slice(2, 0, spread_shape[2], o.stride[0]).slice(3, 0, spread_shape[3], o.stride[1]).copy_(g);
  int64_t before[2], extra[2];
  for (int d = 0; d < 2; ++d) {
    before[d] = o.dilation[d] * (kernel[d] - 1) - o.padding[d];
    extra[d] = input_shape[2 + d] - (spread_shape[2 + d] + o.dilation[d] * (kernel[d] - 1) - 2 * o.padding[d]);
  }
  spread = pad(spread, {before[1], before[1] + extra[1], before[0], before[0] + extra[0]});
  Tensor swapped = weight.reshape({groups, out_channels / groups, group_in, kernel[0], kernel[1]})
                       .transpose(1, 2)
                       .reshape({groups * group_in, out_channels / groups, kernel[0], kernel[1]});
  Tensor flipped = index_select(index_select(swapped, 2, arange(kernel[0] - 1, -1, -1)), 3, arange(kernel[1] - 1, -1, -1));
  return conv2d(spread, flipped, {}, {.dilation = o.dilation, .groups = groups});
}

// d(conv2d)/d(weight), per group: the input with batch and channels swapped
// [C/G, N, H, W], convolved with g likewise swapped [O/G, N, Ho, Wo] as the
// kernel (stride and dilation trade places) -> [C/G, O/G, >= kH, >= kW].
Tensor conv_weight_grad(const Tensor& g, const Tensor& input, const Shape& weight_shape, const Conv2dOptions& o) {
  int64_t groups = o.groups, group_in = weight_shape[1], group_out = weight_shape[0] / groups;
  std::vector<Tensor> parts;
  for (int64_t group = 0; group < groups; ++group) {
    Tensor x = input.narrow(1, group * group_in, group_in).transpose(0, 1).contiguous();
    Tensor k = g.narrow(1, group * group_out, group_out).transpose(0, 1).contiguous();
    Tensor part = conv2d(x, k, {}, {.stride = o.dilation, .padding = o.padding, .dilation = o.stride});
    parts.push_back(part.narrow(2, 0, weight_shape[2]).narrow(3, 0, weight_shape[3]).transpose(0, 1));
  }
  return cat(parts, 0);
}

}  // namespace

void register_nn_functions() {
  // conv2d: out = input (*) weight + bias
  //   ->  dinput = g (*)^T weight, dweight = input (*) g, dbias = g summed over N, H, W
  conv2d_grad.set_recorder([](const GradRecord& r) {
    Conv2dOptions options = params<Conv2dOptions>(r);
    Shape input_shape = input(r, 0).shape(), weight_shape = input(r, 1).shape();
    bool has_bias = input(r, 2).defined();
    record_formula(r, "Conv2dBackward", {input(r, 0), input(r, 1)}, [=](const Saved& s, const Tensor& g) {
      Tensor dbias = has_bias ? sum(g, {0, 2, 3}) : Tensor();
      return Grads{conv_input_grad(g, s[1], input_shape, options), conv_weight_grad(g, s[0], weight_shape, options),
                   dbias};
    });
  });
  // max_pool2d: out = the window maximum  ->  dinput = g at each window's (first) maximum
  max_pool2d_grad.set_recorder([](const GradRecord& r) {
    Pool2dOptions options = params<Pool2dOptions>(r);
    record_formula(r, "MaxPool2dBackward", {input(r, 0)}, [options](const Saved& s, const Tensor& g) {
      return Grads{max_pool2d_backward(g, s[0], options)};
    });
  });
  // avg_pool2d: out = window sum / divisor  ->  dinput = g / divisor spread back over each window
  // (a transposed convolution with a kernel of ones, one channel per group)
  avg_pool2d_grad.set_recorder([](const GradRecord& r) {
    Pool2dOptions options = params<Pool2dOptions>(r);
    Shape shape = input(r, 0).shape();
    record_formula(r, "AvgPool2dBackward", {}, [options, shape](const Saved&, const Tensor& g) {
      int64_t window = options.kernel_size[0] * options.kernel_size[1];
      Tensor divisor = full({}, double(window), {.dtype = g.dtype()});
      if (!options.count_include_pad) {  // the in-bounds elements of each window
        Tensor ones_plane = ones({1, 1, shape[2], shape[3]}, {.dtype = g.dtype()});
        divisor = avg_pool2d(ones_plane, {options.kernel_size, options.stride, options.padding, true}) * double(window);
      }
      Tensor kernel = ones({shape[1], 1, options.kernel_size[0], options.kernel_size[1]}, {.dtype = g.dtype()});
      Conv2dOptions as_conv{.stride = options.stride, .padding = options.padding, .groups = shape[1]};
      return Grads{conv_input_grad(g / divisor, kernel, shape, as_conv)};
    });
  });
}

}  // namespace ember::autograd
