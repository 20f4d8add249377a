// nn::Conv1d, nn::Conv2d, nn::MaxPool2d and nn::AvgPool2d over NCL and NCHW
// inputs, on core's oneDNN-backed ops. Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/ops/conv.h"
#include "core/random.h"
#include "nn/functional/conv.h"
#include "nn/module.h"

namespace ember::nn {

struct Conv2dOptions {
  Pair stride{1, 1};
  Pair padding{0, 0};
  Pair dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::f32;
  Generator* generator = nullptr;  // for the default initialisation
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Pair kernel_size, const Conv2dOptions& options = {});
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv2dOptions& options = {})
      : Conv2d(in_channels, out_channels, Pair{kernel_size, kernel_size}, options) {}
  // [N, in_channels, H, W] -> [N, out_channels, H', W']
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  // PyTorch's: weight kaiming_uniform_(a = sqrt(5)); bias U(+-1/sqrt(fan_in)).
  void reset_parameters(Generator* generator = nullptr);

  int64_t in_channels;
  int64_t out_channels;
  Pair kernel_size;
  ember::Conv2dOptions conv;  // stride, padding, dilation, groups
  // Registered slots (Note [Parameter slots]).
  Tensor& weight;  // [out_channels, in_channels / groups, kH, kW]
  Tensor& bias;    // [out_channels] or undefined
};

struct Conv1dOptions {
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::f32;
  Generator* generator = nullptr;  // for the default initialisation
};

// nn::functional::conv1d; PyTorch's parameter shapes and initialisation, so
// state dicts move between the two.
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, const Conv1dOptions& options = {});
  // [N, in_channels, L] -> [N, out_channels, L']
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  void reset_parameters(Generator* generator = nullptr);

  int64_t in_channels;
  int64_t out_channels;
  int64_t kernel_size;
  functional::Conv1dOptions conv;  // stride, padding, dilation, groups
  Tensor& weight;  // [out_channels, in_channels / groups, kernel_size]
  Tensor& bias;    // [out_channels] or undefined
};

// stride {0, 0} means the kernel size, as PyTorch's stride=None.
struct MaxPool2dOptions {
  Pair stride{0, 0};
  Pair padding{0, 0};
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pair kernel_size, const MaxPool2dOptions& options = {});
  explicit MaxPool2d(int64_t kernel_size, const MaxPool2dOptions& options = {})
      : MaxPool2d(Pair{kernel_size, kernel_size}, options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Pool2dOptions pool;
};

struct AvgPool2dOptions {
  Pair stride{0, 0};
  Pair padding{0, 0};
  bool count_include_pad = true;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pair kernel_size, const AvgPool2dOptions& options = {});
  explicit AvgPool2d(int64_t kernel_size, const AvgPool2dOptions& options = {})
      : AvgPool2d(Pair{kernel_size, kernel_size}, options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  Pool2dOptions pool;
};

}  // namespace ember::nn
