// conv1d of nn::functional (see conv.h).
#include "nn/functional/conv.h"

#include "core/ops/views.h"

namespace ember::nn::functional {

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv1dOptions& options) {
  EMBER_CHECK(input.defined() && weight.defined(), "conv1d: undefined input or weight");
  // Checked here, so that conv2d's errors never describe the height of 1 it is given.
  EMBER_CHECK(input.dim() == 3 && weight.dim() == 3,
              "conv1d: expected input [N, C, L] and weight [O, C/groups, K], got input {} and weight {}",
              input.shape(), weight.shape());
  EMBER_CHECK(options.stride > 0 && options.padding >= 0 && options.dilation > 0,
              "conv1d: expected stride > 0, padding >= 0 and dilation > 0, got stride {}, padding {}, dilation {}",
              options.stride, options.padding, options.dilation);
  const ember::Conv2dOptions as_2d{.stride = {1, options.stride},
                                   .padding = {0, options.padding},
                                   .dilation = {1, options.dilation},
                                   .groups = options.groups};
  return conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, as_2d).squeeze(2);
}

}  // namespace ember::nn::functional
