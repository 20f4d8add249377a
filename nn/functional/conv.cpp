// conv1d of nn::functional (see conv.h).
#include "nn/functional/conv.h"

#include "core/ops/views.h"

namespace ember::nn::functional {

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv1dOptions& options) {
  EMBER_CHECK(input.defined() && weight.defined(), "conv1d: undefined input or weight");
  EMBER_CHECK((input.dim() == 3 || input.dim() == 2) && weight.dim() == 3,
              "conv1d: expected input [N, C, L] (or [C, L]) and weight [O, C/groups, K], got input {} and weight {}",
              input.shape(), weight.shape());
  EMBER_CHECK(options.stride > 0 && options.padding >= 0 && options.dilation > 0,
              "conv1d: expected stride > 0, padding >= 0 and dilation > 0, got stride {}, padding {}, dilation {}",
              options.stride, options.padding, options.dilation);
  if (input.dim() == 2) return conv1d(input.unsqueeze(0), weight, bias, options).squeeze(0);  // unbatched
  const ember::Conv2dOptions as_2d{.stride = {1, options.stride},
                                   .padding = {0, options.padding},
                                   .dilation = {1, options.dilation},
                                   .groups = options.groups};
  // conv2d checks the rest; its error is told in conv1d's shapes.
  try {
    return conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, as_2d).squeeze(2);
  } catch (const Error& error) {
    throw Error(fmt::format("conv1d: input {}, weight {}{}, stride {}, padding {}, dilation {}, groups {}, run as a "
                            "conv2d of height 1, which said: {}",
                            input.shape(), weight.shape(), bias.defined() ? fmt::format(", bias {}", bias.shape()) : "",
                            options.stride, options.padding, options.dilation, options.groups, error.what()));
  }
}

}  // namespace ember::nn::functional
