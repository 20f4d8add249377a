// Normalisation layers: BatchNorm1d/2d (running statistics as buffers),
// LayerNorm and RMSNorm, on core's fused kernels (core/ops/normalization.h).
// Tests: tests/nn/test_layers.cpp.
#pragma once

#include <optional>

#include "nn/module.h"

namespace ember::nn {

struct BatchNormOptions {
  double eps = 1e-5;
  // Weight of the newest batch in the running statistics; unset: a cumulative
  // average (1 / num_batches_tracked), as PyTorch's momentum=None.
  std::optional<double> momentum = 0.1;
  bool affine = true;               // learnable weight (ones) and bias (zeros)
  bool track_running_stats = true;  // false: batch statistics in eval mode too, and no running buffers
  DType dtype = DType::f32;
};

// PyTorch's _BatchNorm: parameters weight, bias; buffers running_mean,
// running_var, num_batches_tracked (i64), in that order.
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, const BatchNormOptions& options);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  void reset_running_stats();
  void reset_parameters();

  int64_t num_features;
  BatchNormOptions options;
  // Registered slots (Note [Parameter slots]); undefined when not kept.
  Tensor& weight;
  Tensor& bias;
  Tensor& running_mean;
  Tensor& running_var;
  Tensor& num_batches_tracked;

 protected:
  virtual void check_input_dim(const Tensor& input) const = 0;
};

// input [N, C] or [N, C, L]
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, const BatchNormOptions& options = {}) : BatchNorm(num_features, options) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

// input [N, C, H, W]
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, const BatchNormOptions& options = {}) : BatchNorm(num_features, options) {}

 protected:
  void check_input_dim(const Tensor& input) const override;
};

struct LayerNormOptions {
  double eps = 1e-5;
  bool elementwise_affine = true;
  bool bias = true;  // false: a weight but no bias (PyTorch 2.1's option; nanoGPT's bias=False)
  DType dtype = DType::f32;
};

// Normalises over the trailing normalized_shape dims.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, const LayerNormOptions& options = {});
  explicit LayerNorm(int64_t normalized_size, const LayerNormOptions& options = {})
      : LayerNorm(Shape{normalized_size}, options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Shape normalized_shape;
  LayerNormOptions options;
  Tensor& weight;  // ones; a registered slot (Note [Parameter slots])
  Tensor& bias;    // zeros
};

struct RMSNormOptions {
  std::optional<double> eps{};  // unset: f32's machine epsilon (f64's for f64), as PyTorch's kernel
  bool elementwise_affine = true;
  DType dtype = DType::f32;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, const RMSNormOptions& options = {});
  explicit RMSNorm(int64_t normalized_size, const RMSNormOptions& options = {})
      : RMSNorm(Shape{normalized_size}, options) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  Shape normalized_shape;
  RMSNormOptions options;
  Tensor& weight;  // ones; a registered slot (Note [Parameter slots])
};

}  // namespace ember::nn
