// Fused optimizer updates: each call updates one parameter and its state
// buffers in place, in one pass over memory, as PyTorch's single-tensor
// optimizers define the update (torch/optim/*.py, 1.13), and the unscaling
// pass of loss scaling. The optim layer
// (optim/*.cpp) calls these once per parameter per step; they are not
// differentiable and record nothing. Kernels: kernels/{reference,cpu}/optimizer.cpp;
// tests: tests/optim/test_update_kernels.cpp and the golden optimizer tests.
//
// Every tensor must have the parameter's shape, dtype and device; the
// parameter and its state buffers must be contiguous (the grad may be
// strided: it is made contiguous first). f16/bf16 parameters are updated with
// f32 arithmetic and their state is stored in the parameter's dtype.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember {

// SGD: d = (maximize ? -g : g) + weight_decay * p; with momentum,
// buf = first_step ? d : momentum * buf + (1 - dampening) * d and
// d = nesterov ? d + momentum * buf : buf; then p -= lr * d.
struct SgdUpdate {
  double lr = 0;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;
  bool first_step = false;  // the momentum buffer is written, not read
};
// momentum_buffer is undefined when momentum == 0.
void sgd_update_(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& hyper);

// Adam and AdamW: g = (maximize ? -g : g) (+ weight_decay * p for Adam;
// AdamW instead scales p by 1 - lr * weight_decay first);
// m = beta1 * m + (1 - beta1) * g; v = beta2 * v + (1 - beta2) * g^2;
// amsgrad: v_max = max(v_max, v) replaces v below;
// p -= lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps).
struct AdamUpdate {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  bool amsgrad = false;
  bool maximize = false;
  int64_t step = 1;  // this update's step number, counted from 1
};
// max_exp_avg_sq is undefined unless amsgrad.
void adam_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const Tensor& max_exp_avg_sq, const AdamUpdate& hyper);

// RMSprop: g = (maximize ? -g : g) + weight_decay * p;
// s = alpha * s + (1 - alpha) * g^2; centered: a = alpha * a + (1 - alpha) * g,
// denom = sqrt(s - a^2) + eps, else sqrt(s) + eps;
// momentum > 0: buf = momentum * buf + g / denom, p -= lr * buf; else p -= lr * g / denom.
struct RmspropUpdate {
  double lr = 0;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
  bool maximize = false;
};
// grad_avg is undefined unless centered; momentum_buffer unless momentum > 0.
void rmsprop_update_(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
                     const Tensor& momentum_buffer, const RmspropUpdate& hyper);

// Adagrad: g = (maximize ? -g : g) + weight_decay * p; sum += g^2;
// p -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(sum) + eps).
struct AdagradUpdate {
  double lr = 0;
  double lr_decay = 0;
  double weight_decay = 0;
  double eps = 1e-10;
  bool maximize = false;
  int64_t step = 1;
};
void adagrad_update_(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradUpdate& hyper);

// Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):
// g = maximize ? -g : g; p *= 1 - lr * weight_decay;
// p -= lr * sign(beta1 * m + (1 - beta1) * g); m = beta2 * m + (1 - beta2) * g.
struct LionUpdate {
  double lr = 0;
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0;
  bool maximize = false;
};
void lion_update_(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const LionUpdate& hyper);

// Loss scaling (distributed/amp/grad_scaler.h), as PyTorch's
// _amp_foreach_non_finite_check_and_unscale_: grad *= inv_scale in place
// (f16/bf16 computed in f32), and found_inf, a one-element f32 tensor on the
// gradient's device, is set to 1 when any element of grad was inf or NaN
// before scaling; it is never cleared, so one flag collects every gradient of
// a step. One pass over a contiguous grad; a strided one is staged through a
// contiguous copy.
void unscale_and_check_(const Tensor& grad, const Tensor& found_inf, double inv_scale);

}  // namespace ember
