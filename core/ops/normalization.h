// Normalisation layers' ops: layer_norm, rms_norm and batch_norm, with their
// fused backward passes (one kernel each, which autograd calls; also reachable
// on their own for benchmarks). Entry points: core/ops/normalization.cpp;
// kernels: kernels/{reference,cpu}/normalization.cpp; gradients:
// autograd/functions/normalization.cpp. Tests: tests/core/test_normalization.cpp.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace ember {

// input [..., *normalized_shape]; weight and bias have normalized_shape or are undefined.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// eps unset: the machine epsilon of the dtype it computes in (f32, or f64 for f64), as PyTorch's kernel.
Tensor rms_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                std::optional<double> eps = std::nullopt);
// input [N, C, *]. training: normalise with batch statistics and, when running_mean/running_var are
// defined, update them in place (momentum as PyTorch: new = (1 - momentum) * old + momentum * batch, the
// variance unbiased); not training: normalise with the running statistics. weight/bias [C] or undefined.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum = 0.1,
                  double eps = 1e-5);

// The statistics a normalisation saves for its backward: per row (layer/rms
// norm: one row per normalised group; batch norm: one per channel) the mean
// (undefined for rms_norm) and 1 / sqrt(variance + eps), in f32 (f64 for f64 inputs).
struct NormalizationResult {
  Tensor output;
  Tensor mean;
  Tensor rstd;
  Tensor var;  // batch_norm in training: each channel's biased batch variance
};
// Gradients of a normalisation's input, weight and bias (undefined when that
// input is undefined).
struct NormalizationGrads {
  Tensor input;
  Tensor weight;
  Tensor bias;
};

// The forward passes without autograd, returning the saved statistics too.
NormalizationResult layer_norm_forward(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                                       const Tensor& bias, double eps);
NormalizationResult rms_norm_forward(const Tensor& input, const Shape& normalized_shape, const Tensor& weight,
                                     double eps);
// Training: batch statistics (running stats untouched here); eval: the given mean/var.
NormalizationResult batch_norm_forward(const Tensor& input, const Tensor& mean, const Tensor& var,
                                       const Tensor& weight, const Tensor& bias, bool training, double eps);

// The fused backward passes: d(loss)/d(input, weight, bias) from d(loss)/d(output)
// and the forward's input and saved statistics.
NormalizationGrads layer_norm_backward(const Tensor& grad_output, const Tensor& input,
                                       const Shape& normalized_shape, const Tensor& weight, const Tensor& mean,
                                       const Tensor& rstd, bool has_bias);
NormalizationGrads rms_norm_backward(const Tensor& grad_output, const Tensor& input, const Shape& normalized_shape,
                                     const Tensor& weight, const Tensor& rstd);
// training: mean/rstd are the batch statistics (their dependence on the input
// is differentiated); eval: constants.
NormalizationGrads batch_norm_backward(const Tensor& grad_output, const Tensor& input, const Tensor& weight,
                                       const Tensor& mean, const Tensor& rstd, bool training, bool has_bias);

}  // namespace ember
