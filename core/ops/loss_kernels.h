// The kernel interface of cross-entropy (entry point: core/ops/loss.cpp;
// kernels: kernels/{reference,cpu}/loss.cpp). The entry point moves the class
// dim last, so a kernel sees dense rows [rows, classes]. Per row i with
// coefficients a_c (below) and A = sum_c a_c, in ComputeType<T>:
//   loss_i = sum_c a_c (lse_i - x_ic)       lse_i = log sum_c exp(x_ic)
//   dloss_i / dx_ic = A p_ic - a_c          p_ic = exp(x_ic - lse_i)
// class indices t_i (eps = label_smoothing, w = weight or ones):
//   a_c = (1 - eps) w_c [c == t_i] + eps / C w_c, and 0 for a row with t_i == ignore_index;
//   the mean divides by the sum of w_{t_i} over rows not ignored (PyTorch's denominator).
// probabilities q_ic: a_c = w_c ((1 - eps) q_ic + eps / C); the mean divides by the row count.
#pragma once

#include "core/dispatch.h"
#include "core/grad_hook.h"
#include "core/ops/loss.h"

namespace ember {

// A class index out of [0, classes) that is not ignore_index, found by the kernel.
struct InvalidTarget {
  int64_t row = -1;  // -1: none
  int64_t value = 0;
};

// The error of an invalid class index, shared by the entry point and the
// kernels that report it later (CUDA under strict device copies).
[[noreturn]] void throw_invalid_target(int64_t classes, int64_t ignore_index, const InvalidTarget& invalid);

struct CrossEntropyProblem {
  int64_t rows = 0, classes = 0;
  bool probabilities = false;      // target holds probabilities [rows, classes] of the key dtype
  DType target_dtype = DType::i64;  // class indices [rows]: i64 or i32
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  Reduction reduction = Reduction::mean;
  const void* input = nullptr;   // [rows, classes]
  const void* target = nullptr;
  const void* weight = nullptr;  // [classes] or null
  void* loss = nullptr;          // key dtype: [rows] for none, one element otherwise
  // Each row's log-sum-exp kept as two statistics (statistics type, [rows]):
  // its largest logit m and log sum_c exp(x_c - m). Their sum rounds the
  // log-sum away for logits of large magnitude (f32 at 1e8: m + 0.69 = m),
  // which made every probability exp(x_c - lse) of the backward 1.
  void* row_max = nullptr;
  void* log_sum = nullptr;
  void* total_weight = nullptr;  // statistics type, one element: the mean's denominator
  InvalidTarget* invalid = nullptr;  // written when a class index is out of range (then nothing else is)
};

// grad_input[i, c] = g_i (A_i p_ic - a_c), g_i = grad_output (/ total_weight for the mean).
struct CrossEntropyBackwardProblem {
  CrossEntropyProblem forward;  // as in the forward, with row_max, log_sum and total_weight read; loss unused
  const void* grad_output = nullptr;  // key dtype: [rows] for none, one element otherwise
  void* grad_input = nullptr;         // [rows, classes]
};

extern Op<void(const CrossEntropyProblem&)> cross_entropy_op;
extern Op<void(const CrossEntropyBackwardProblem&)> cross_entropy_backward_op;

// Gradient slot (autograd/functions/loss.cpp); params: CrossEntropyParams.
extern GradSlot cross_entropy_grad;
struct CrossEntropyParams {
  const Tensor& target;
  const CrossEntropyOptions& options;
  const Tensor& row_max;
  const Tensor& log_sum;
  const Tensor& total_weight;
};

}  // namespace ember
