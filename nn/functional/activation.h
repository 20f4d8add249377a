// nn::functional activations: core's element-wise and softmax ops under
// torch.nn.functional's names (core/ops/elementwise.h, core/ops/reduction.h
// document them). Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"

namespace ember::nn::functional {

using ember::gelu;
using ember::GeluApproximation;
using ember::log_softmax;
using ember::relu;
using ember::sigmoid;
using ember::silu;
using ember::softmax;
using ember::tanh;

}  // namespace ember::nn::functional
