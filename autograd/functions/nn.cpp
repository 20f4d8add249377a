// Gradients of convolution and pooling (forward: core/ops/conv.cpp). The
// convolution's input and weight gradients are kernel ops of their own
// (conv2d_backward_input / _weight, or conv2d_backward for both at once:
// oneDNN's backward primitives on CPU).
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/conv.h"
#include "core/ops/conv_kernels.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

}  // namespace

void register_nn_functions() {
  // conv2d: out = input (*) weight + bias
  //   ->  dinput = g (*)^T weight, dweight = input (*) g, dbias = g summed over N, H, W
  conv2d_grad.set_recorder([](const GradRecord& r) {
    Conv2dOptions options = params<Conv2dOptions>(r);
    Shape input_shape = input(r, 0).shape(), weight_shape = input(r, 1).shape();
    bool need_input = needs_grad(r, 0), need_weight = needs_grad(r, 1), need_bias = needs_grad(r, 2);
    // The input is saved for the weight's gradient and the weight for the input's.
    record_formula(r, "Conv2dBackward", {need_weight ? input(r, 0) : Tensor(), need_input ? input(r, 1) : Tensor()},
                   [=](const Saved& s, const Tensor& g) {
                     refuse_double_backward("Conv2dBackward", {&g, &s[0], &s[1]});
                     // Both at once share the CPU's reorder of g into oneDNN's blocked layout.
                     Conv2dGradients grads =
                         need_input && need_weight
                             ? conv2d_backward(g, s[0], s[1], options)
                             : Conv2dGradients{
                                   need_input ? conv2d_backward_input(g, s[1], input_shape, options) : Tensor(),
                                   need_weight ? conv2d_backward_weight(g, s[0], weight_shape, options) : Tensor()};
                     return Grads{grads.input, grads.weight, need_bias ? sum(g, {0, 2, 3}) : Tensor()};
                   });
  });
  // max_pool2d: out = the window maximum  ->  dinput = g at each window's (first) maximum
  max_pool2d_grad.set_recorder([](const GradRecord& r) {
    Pool2dOptions options = params<Pool2dOptions>(r);
    record_formula(r, "MaxPool2dBackward", {input(r, 0)}, [options](const Saved& s, const Tensor& g) {
      refuse_double_backward("MaxPool2dBackward", {&g});
      Tensor grad = max_pool2d_backward(g, s[0], options);
      if (should_record({&s[0]})) grad = grad + zero_through(s[0]);  // the window's argmax alone ties it to the input
      return Grads{grad};
    });
  });
  // avg_pool2d: out = window sum / divisor  ->  dinput = g / divisor spread back over each window
  // (conv2d's input gradient for a kernel of ones, one channel per group)
  avg_pool2d_grad.set_recorder([](const GradRecord& r) {
    Pool2dOptions options = params<Pool2dOptions>(r);
    Shape shape = input(r, 0).shape();
    record_formula(r, "AvgPool2dBackward", {}, [options, shape](const Saved&, const Tensor& g) {
      refuse_double_backward("AvgPool2dBackward", {&g});
      int64_t window = options.kernel_size[0] * options.kernel_size[1];
      Tensor divisor = full({}, double(window), {.dtype = g.dtype(), .device = g.device()});
      if (!options.count_include_pad) {  // the in-bounds elements of each window
        Tensor ones_plane = ones({1, 1, shape[2], shape[3]}, {.dtype = g.dtype(), .device = g.device()});
        divisor = avg_pool2d(ones_plane, {options.kernel_size, options.stride, options.padding, true}) * double(window);
      }
      Tensor kernel = ones({shape[1], 1, options.kernel_size[0], options.kernel_size[1]}, {.dtype = g.dtype(), .device = g.device()});
      Conv2dOptions as_conv{.stride = options.stride, .padding = options.padding, .groups = shape[1]};
      return Grads{conv2d_backward_input(g / divisor, kernel, shape, as_conv)};
    });
  });
}

}  // namespace ember::autograd
