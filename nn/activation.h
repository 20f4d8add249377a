// Activation layers: stateless modules around nn::functional's activations,
// printed as PyTorch prints them. Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/ops/elementwise.h"
#include "core/shape.h"
#include "nn/module.h"

namespace ember::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::none) : approximate(approximate) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  GeluApproximation approximate;
};

class SiLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t dim;
};

// nn::functional::leaky_relu and the composites after it (nn/functional/activation.h).
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double negative_slope;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double alpha;
};

class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double beta;
  double threshold;
};

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double min_val;
  double max_val;
};

class ReLU6 : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class Mish : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

class LogSigmoid : public Module {
 public:
  Tensor forward(const Tensor& input) override;
};

// input.flatten(start_dim, end_dim); by default everything but the batch dim.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t start_dim;
  int64_t end_dim;
};

// input.unflatten(dim, unflattened_size): Flatten's inverse (one size may be -1).
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, Shape unflattened_size) : dim(dim), unflattened_size(std::move(unflattened_size)) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t dim;
  Shape unflattened_size;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& input) override { return input; }
};

}  // namespace ember::nn
