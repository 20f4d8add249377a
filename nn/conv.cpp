// nn::Conv2d and the pooling layers (see conv.h).
#include "nn/conv.h"

#include <cmath>

#include "core/ops/creation.h"
#include "nn/init.h"

namespace ember::nn {

namespace {

// PyTorch prints the size it was given; ember keeps pairs, so a square pair
// prints as one int, the form nn.MaxPool2d(2) shows.
std::string pair_or_int(const Pair& pair) {
  return pair[0] == pair[1] ? std::to_string(pair[0]) : python_tuple(pair);
}

Pair default_stride(const Pair& stride, const Pair& kernel_size) {
  return stride == Pair{0, 0} ? kernel_size : stride;
}

Pair checked_kernel(const Pair& kernel_size) {
  EMBER_CHECK(kernel_size[0] > 0 && kernel_size[1] > 0, "Conv2d: kernel_size must be positive, got {}",
              python_tuple(kernel_size));
  return kernel_size;
}

int64_t checked_kernel(int64_t kernel_size) {
  EMBER_CHECK(kernel_size > 0, "Conv1d: kernel_size must be positive, got {}", kernel_size);
  return kernel_size;
}

int64_t checked_groups(int64_t in_channels, int64_t out_channels, int64_t groups, std::string_view layer) {
  EMBER_CHECK(in_channels >= 0 && out_channels >= 0, "{}: in_channels {} and out_channels {} must not be negative",
              layer, in_channels, out_channels);
  EMBER_CHECK(groups > 0 && in_channels % groups == 0 && out_channels % groups == 0,
              "{}: in_channels {} and out_channels {} must be divisible by groups {}", layer, in_channels,
              out_channels, groups);
  return groups;
}

// PyTorch's _ConvNd.reset_parameters: weight kaiming_uniform_(a = sqrt(5)); bias U(+-1/sqrt(fan_in)).
void reset_conv_parameters(Tensor& weight, Tensor& bias, Generator* generator) {
  init::kaiming_uniform_(weight, {.a = std::sqrt(5.0), .generator = generator});
  if (bias.defined()) {
    int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).fan_in;
    double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound, generator);
  }
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, const Conv2dOptions& options)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(checked_kernel(kernel_size)),
      conv{.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
           .groups = checked_groups(in_channels, out_channels, options.groups, "Conv2d")},
      weight(register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size[0],
                                                 kernel_size[1]},
                                                {.dtype = options.dtype}))),
      bias(register_parameter("bias", options.bias ? empty({out_channels}, {.dtype = options.dtype}) : Tensor())) {
  reset_parameters(options.generator);
}

void Conv2d::reset_parameters(Generator* generator) { reset_conv_parameters(weight, bias, generator); }

Tensor Conv2d::forward(const Tensor& input) { return conv2d(input, weight, bias, conv); }

std::string Conv2d::extra_repr() const {
  // PyTorch's _ConvNd.extra_repr: non-default settings only.
  std::string out = fmt::format("{}, {}, kernel_size={}, stride={}", in_channels, out_channels,
                                python_tuple(kernel_size), python_tuple(conv.stride));
  if (conv.padding != Pair{0, 0}) out += ", padding=" + python_tuple(conv.padding);
  if (conv.dilation != Pair{1, 1}) out += ", dilation=" + python_tuple(conv.dilation);
  if (conv.groups != 1) out += fmt::format(", groups={}", conv.groups);
  if (!bias.defined()) out += ", bias=False";
  return out;
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(checked_kernel(kernel_size)),
      conv{.stride = options.stride, .padding = options.padding, .dilation = options.dilation,
           .groups = checked_groups(in_channels, out_channels, options.groups, "Conv1d")},
      weight(register_parameter("weight", empty({out_channels, in_channels / options.groups, kernel_size},
                                                {.dtype = options.dtype}))),
      bias(register_parameter("bias", options.bias ? empty({out_channels}, {.dtype = options.dtype}) : Tensor())) {
  reset_parameters(options.generator);
}

void Conv1d::reset_parameters(Generator* generator) { reset_conv_parameters(weight, bias, generator); }

Tensor Conv1d::forward(const Tensor& input) { return functional::conv1d(input, weight, bias, conv); }

std::string Conv1d::extra_repr() const {
  std::string out = fmt::format("{}, {}, kernel_size=({},), stride=({},)", in_channels, out_channels, kernel_size,
                                conv.stride);
  if (conv.padding != 0) out += fmt::format(", padding=({},)", conv.padding);
  if (conv.dilation != 1) out += fmt::format(", dilation=({},)", conv.dilation);
  if (conv.groups != 1) out += fmt::format(", groups={}", conv.groups);
  if (!bias.defined()) out += ", bias=False";
  return out;
}

MaxPool2d::MaxPool2d(Pair kernel_size, const MaxPool2dOptions& options)
    : pool{.kernel_size = kernel_size, .stride = default_stride(options.stride, kernel_size),
           .padding = options.padding} {}

Tensor MaxPool2d::forward(const Tensor& input) { return max_pool2d(input, pool); }

std::string MaxPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}, dilation=1, ceil_mode=False",
                     pair_or_int(pool.kernel_size), pair_or_int(pool.stride), pair_or_int(pool.padding));
}

AvgPool2d::AvgPool2d(Pair kernel_size, const AvgPool2dOptions& options)
    : pool{.kernel_size = kernel_size, .stride = default_stride(options.stride, kernel_size),
           .padding = options.padding, .count_include_pad = options.count_include_pad} {}

Tensor AvgPool2d::forward(const Tensor& input) { return avg_pool2d(input, pool); }

std::string AvgPool2d::extra_repr() const {
  return fmt::format("kernel_size={}, stride={}, padding={}", pair_or_int(pool.kernel_size),
                     pair_or_int(pool.stride), pair_or_int(pool.padding));
}

}  // namespace ember::nn
