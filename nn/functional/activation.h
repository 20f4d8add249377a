// nn::functional activations: core's element-wise and softmax ops under
// torch.nn.functional's names (core/ops/elementwise.h, core/ops/reduction.h
// document them), and composites of them for the rest
// (nn/functional/activation.cpp), whose gradients need no code of their own.
// Tests: tests/nn/test_layers.cpp, tests/nn/test_activations.cpp.
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

// x where x > 0, else negative_slope * x.
Tensor leaky_relu(const Tensor& input, double negative_slope = 0.01);
// x where x > 0, else alpha (e^x - 1).
Tensor elu(const Tensor& input, double alpha = 1.0);
// log(1 + e^(beta x)) / beta, and x itself where beta x > threshold.
Tensor softplus(const Tensor& input, double beta = 1.0, double threshold = 20.0);
// x clamped to [min_val, max_val]; the gradient is 0 at the bounds, as PyTorch's.
Tensor hardtanh(const Tensor& input, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& input);  // hardtanh(input, 0, 6)
Tensor mish(const Tensor& input);   // x tanh(softplus(x))
Tensor logsigmoid(const Tensor& input);  // log(sigmoid(x)), without overflow

}  // namespace ember::nn::functional
