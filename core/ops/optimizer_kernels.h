// The kernel interface of the fused optimizer updates (entry points and the
// formulas: core/ops/optimizer.h). Keyed by the parameter's dtype; every
// operand is contiguous with the parameter's dtype and numel (the entry point
// checks), and optional buffers are undefined when the options do not use them.
// Kernels: kernels/{reference,cpu}/optimizer.cpp (a CUDA backend adds its own).
#pragma once

#include "core/dispatch.h"
#include "core/ops/optimizer.h"

namespace ember {

extern Op<void(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate&)> sgd_update_op;
extern Op<void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
               const Tensor& max_exp_avg_sq, const AdamUpdate&)>
    adam_update_op;
extern Op<void(const Tensor& param, const Tensor& grad, const Tensor& square_avg, const Tensor& grad_avg,
               const Tensor& momentum_buffer, const RmspropUpdate&)>
    rmsprop_update_op;
extern Op<void(const Tensor& param, const Tensor& grad, const Tensor& sum, const AdagradUpdate&)> adagrad_update_op;
extern Op<void(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const LionUpdate&)> lion_update_op;
// Keyed by the gradient's dtype; grad is contiguous and non-empty, found_inf one f32 element.
extern Op<void(const Tensor& grad, const Tensor& found_inf, double inv_scale)> unscale_and_check_op;

}  // namespace ember
