// Cross-entropy as one fused op (forward and backward kernels), the reduction
// modes the losses share. Entry point: core/ops/loss.cpp; kernels:
// kernels/{reference,cpu}/loss.cpp; gradient: autograd/functions/loss.cpp.
// The other losses are composites in nn/functional/loss.cpp. Tests: tests/core/test_loss.cpp,
// tests/nn/test_loss.cpp (golden values from PyTorch).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember {

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  Tensor weight{};             // [C] class weights, or undefined
  int64_t ignore_index = -100; // targets equal to it contribute nothing (class-index targets only)
  Reduction reduction = Reduction::mean;  // mean: weighted mean over non-ignored targets, as PyTorch
  double label_smoothing = 0.0;
};

// input [N, C] or [N, C, d1, ...] or [C]; target: class indices (i64/i32, shape of input without dim 1)
// or probabilities (floating, same shape as input). One fused, numerically stable pass per row
// (max, log-sum-exp, loss), not log + softmax + gather; its gradient is a fused kernel too.
// The gradient flows to input only (not to probability targets or weight).
Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});

// The fused passes without autograd (autograd and benchmarks call them). The
// forward also returns each row's log-sum-exp as its largest logit and
// log sum_c exp(x_c - max) (f32, f64 for f64 inputs; one per element of the
// target's shape; apart, so that large logits keep the log-sum) and the
// mean's denominator (0-d, same dtype).
struct CrossEntropyResult {
  Tensor loss;
  Tensor row_max;
  Tensor log_sum;
  Tensor total_weight;
};
CrossEntropyResult cross_entropy_forward(const Tensor& input, const Tensor& target,
                                         const CrossEntropyOptions& options = {});
// d(loss)/d(input) from d(loss)/d(loss): 0-d for mean and sum, the loss's shape for none.
Tensor cross_entropy_backward(const Tensor& grad_output, const Tensor& input, const Tensor& target,
                              const CrossEntropyOptions& options, const Tensor& row_max, const Tensor& log_sum,
                              const Tensor& total_weight);

}  // namespace ember
