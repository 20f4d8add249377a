// Loss functions, PyTorch's torch.nn.functional names and semantics.
// cross_entropy is core's fused op (core/ops/loss.h); the others are
// composites of differentiable ops (nn/functional/loss.cpp).
// Tests: tests/nn/test_loss.cpp (golden values from tests/data/make_golden_losses.py).
#pragma once

#include "core/ops/loss.h"

namespace ember::nn::functional {

using ember::CrossEntropyOptions;
using ember::Reduction;

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});

// input: log-probabilities [N, C], [N, C, d1, ...] or [C]; target: class indices.
struct NllLossOptions {
  Tensor weight{};              // [C] class weights, or undefined
  int64_t ignore_index = -100;  // targets equal to it contribute nothing
  Reduction reduction = Reduction::mean;  // mean: divided by the summed weights of non-ignored targets
};
Tensor nll_loss(const Tensor& input, const Tensor& target, const NllLossOptions& options = {});

// input and target of the same shape.
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// 0.5 d^2 / beta where |d| < beta, |d| - 0.5 beta elsewhere (l1_loss when beta == 0).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                      double beta = 1.0);

// 0.5 d^2 where |d| < delta, delta (|d| - 0.5 delta) elsewhere: smooth_l1_loss times delta. delta > 0.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean,
                  double delta = 1.0);

// Kullback-Leibler divergence, pointwise target (log target - input), with input
// log-probabilities and target probabilities (log-probabilities when
// log_target). A zero target adds 0. PyTorch's reductions: mean divides by the
// number of elements (its default, though the true KL divergence is
// batchmean's, the sum divided by the batch size).
enum class KlDivReduction { none, batchmean, sum, mean };
struct KlDivOptions {
  KlDivReduction reduction = KlDivReduction::mean;
  bool log_target = false;
};
Tensor kl_div(const Tensor& input, const Tensor& target, const KlDivOptions& options = {});

// -w (t log x + (1 - t) log(1 - x)) of probabilities x in [0, 1], each log
// clamped at -100, with PyTorch's gradient w (x - t) / max(x (1 - x), 1e-12).
// Under CPU autocast it runs in f32, as PyTorch's; CUDA autocast refuses it,
// as PyTorch's does (a probability rounded to bf16 saturates): apply
// binary_cross_entropy_with_logits to the logits instead. weight broadcasts
// to the input.
struct BceOptions {
  Tensor weight{};
  Reduction reduction = Reduction::mean;
};
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const BceOptions& options = {});

// weight broadcasts to the input (per element); pos_weight to the last dim (per class).
struct BceWithLogitsOptions {
  Tensor weight{};
  Tensor pos_weight{};
  Reduction reduction = Reduction::mean;
};
// The stable form: (1 - t) x + (1 + (pos_weight - 1) t) log(1 + e^-x), the log from -logsigmoid(x).
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BceWithLogitsOptions& options = {});

}  // namespace ember::nn::functional
