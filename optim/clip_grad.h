// Gradient clipping, as torch.nn.utils.clip_grad_norm_ and clip_grad_value_:
// both change the parameters' .grad in place and skip parameters without one.
// Called from training loops between backward() and optimizer.step().
// Tests: tests/optim/test_clip_grad.cpp.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ember::optim {

// Scales all gradients by min(1, max_norm / (total_norm + 1e-6)), where
// total_norm is the norm_type-norm of the vector of every gradient's norm
// (norm_type may be infinity: the largest absolute value). Returns total_norm
// as a 0-d tensor (0 when no parameter has a gradient). With
// error_if_nonfinite, a nan or infinite total norm throws instead.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace ember::optim
