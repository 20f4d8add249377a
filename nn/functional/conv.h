// nn::functional convolution and pooling: core's oneDNN-backed ops
// (core/ops/conv.h) under torch.nn.functional's names. Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/ops/conv.h"

namespace ember::nn::functional {

using ember::avg_pool2d;
using ember::conv2d;
using ember::Conv2dOptions;
using ember::max_pool2d;
using ember::Pool2dOptions;

}  // namespace ember::nn::functional
