// Activation layers: stateless modules around nn::functional's activations,
// printed as PyTorch prints them. Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/ops/elementwise.h"
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

// input.flatten(start_dim, end_dim); by default everything but the batch dim.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  int64_t start_dim;
  int64_t end_dim;
};

class Identity : public Module {
 public:
  Tensor forward(const Tensor& input) override { return input; }
};

}  // namespace ember::nn
