// nn::init: PyTorch's weight initialisers, each filling a tensor in place
// (under NoGradGuard, so parameters keep their identity) from `generator`,
// the default generator when null. Fans and gains follow torch.nn.init
// exactly. Layers call these for their default initialisation.
// Tests: tests/nn/test_init.cpp.
#pragma once

#include <optional>
#include <utility>

#include "core/random.h"
#include "core/tensor.h"

namespace ember::nn::init {

enum class Nonlinearity { linear, conv1d, conv2d, conv3d, sigmoid, tanh, relu, leaky_relu, selu };
enum class FanMode { fan_in, fan_out };

// The recommended gain for `nonlinearity` (torch.nn.init.calculate_gain);
// `param` is leaky_relu's negative slope (0.01 when unset).
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field, the
// receptive field being the product of the dims after the first two.
Fans calculate_fan_in_and_fan_out(const Tensor& tensor);

Tensor uniform_(const Tensor& tensor, double low = 0.0, double high = 1.0, Generator* generator = nullptr);
Tensor normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, Generator* generator = nullptr);
// Normal(mean, std) restricted to [low, high], by inverting the CDF of a uniform draw, as PyTorch.
Tensor trunc_normal_(const Tensor& tensor, double mean = 0.0, double std = 1.0, double low = -2.0,
                     double high = 2.0, Generator* generator = nullptr);
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

// Uniform(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);
// Normal(0, std) with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& tensor, double gain = 1.0, Generator* generator = nullptr);

struct KaimingOptions {
  double a = 0.0;  // leaky_relu's negative slope
  FanMode mode = FanMode::fan_in;
  Nonlinearity nonlinearity = Nonlinearity::leaky_relu;
  Generator* generator = nullptr;
};
// Uniform(-bound, bound) with bound = gain * sqrt(3 / fan).
Tensor kaiming_uniform_(const Tensor& tensor, const KaimingOptions& options = {});
// Normal(0, std) with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& tensor, const KaimingOptions& options = {});

}  // namespace ember::nn::init
