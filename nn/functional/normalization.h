// nn::functional normalisation and dropout: core's fused ops
// (core/ops/normalization.h, core/ops/dropout.h) under torch.nn.functional's
// names. Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/ops/dropout.h"
#include "core/ops/normalization.h"

namespace ember::nn::functional {

using ember::batch_norm;
using ember::dropout;
using ember::layer_norm;
using ember::rms_norm;

}  // namespace ember::nn::functional
