// The kernel interface of the normalisation family. Entry points
// (core/ops/normalization.cpp) validate, make the tensors contiguous and of the
// input's dtype and describe them as below; kernels
// (kernels/{reference,cpu}/normalization.cpp) only compute. Statistics (mean,
// rstd = 1 / sqrt(var + eps)) are in ComputeType<T>: f32 for f32/f16/bf16
// inputs, f64 for f64. Tests: tests/core/test_normalization.cpp.
#pragma once

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/ops/normalization.h"

namespace ember {

// layer_norm / rms_norm: input [rows, cols], each row normalised on its own;
// weight and bias [cols] (null when absent). layer_norm writes mean and rstd
// per row; rms_norm writes rstd only (its mean is null).
struct RowNormProblem {
  int64_t rows = 0, cols = 0;
  double eps = 0;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* output = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
};

// The fused backward of a row norm: grad_input [rows, cols] always; grad_weight
// and grad_bias [cols] when not null (summed over rows). mean is null for rms_norm.
struct RowNormBackwardProblem {
  int64_t rows = 0, cols = 0;
  const void* grad_output = nullptr;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* mean = nullptr;
  const void* rstd = nullptr;
  void* grad_input = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

// batch_norm: input [batch, channels, spatial], each channel normalised over
// batch x spatial. training: the kernel computes mean, rstd and the biased
// variance (var, when not null) of each channel; eval: it reads running_mean
// and running_var ([channels], statistics type) and writes mean and rstd from them.
struct BatchNormProblem {
  int64_t batch = 0, channels = 0, spatial = 0;
  bool training = true;
  double eps = 0;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  const void* running_mean = nullptr;
  const void* running_var = nullptr;
  void* output = nullptr;
  void* mean = nullptr;
  void* rstd = nullptr;
  void* var = nullptr;
};

// The fused backward of batch_norm. training: mean and rstd are functions of the
// input and differentiated as such; eval: constants.
struct BatchNormBackwardProblem {
  int64_t batch = 0, channels = 0, spatial = 0;
  bool training = true;
  const void* grad_output = nullptr;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* mean = nullptr;
  const void* rstd = nullptr;
  void* grad_input = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

extern Op<void(const RowNormProblem&)> layer_norm_op, rms_norm_op;
extern Op<void(const RowNormBackwardProblem&)> layer_norm_backward_op, rms_norm_backward_op;
extern Op<void(const BatchNormProblem&)> batch_norm_op;
extern Op<void(const BatchNormBackwardProblem&)> batch_norm_backward_op;

// Gradient slots (autograd/functions/normalization.cpp); params: NormalizationParams.
extern GradSlot layer_norm_grad, rms_norm_grad, batch_norm_grad;
// What the recorder saves besides the inputs: the statistics and the forward's settings.
struct NormalizationParams {
  const Shape& normalized_shape;  // layer/rms norm
  const Tensor& mean;             // undefined for rms_norm
  const Tensor& rstd;
  bool training;                  // batch norm
};

}  // namespace ember
