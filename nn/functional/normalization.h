// nn::functional normalisation and dropout: core's fused ops
// (core/ops/normalization.h, core/ops/dropout.h) under torch.nn.functional's
// names, and composites of core's ops for the rest
// (nn/functional/normalization.cpp). Tests: tests/nn/test_layers.cpp,
// tests/nn/test_activations.cpp.
#pragma once

#include "core/ops/dropout.h"
#include "core/ops/normalization.h"

namespace ember::nn::functional {

using ember::batch_norm;
using ember::dropout;
using ember::layer_norm;
using ember::rms_norm;

// input / max(|input|_p along dim, eps).
Tensor normalize(const Tensor& input, double p = 2.0, int64_t dim = 1, double eps = 1e-12);

// Zeroes whole channels of an [N, C, H, W] input with probability p (one draw
// per sample and channel) and scales the rest by 1/(1-p); the identity when
// !training or p == 0.
Tensor dropout2d(const Tensor& input, double p = 0.5, bool training = true, Generator* generator = nullptr);

}  // namespace ember::nn::functional
