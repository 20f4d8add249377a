// nn::Dropout and nn::Dropout2d: zero activations with probability p while training, the
// identity in eval mode. Tests: tests/nn/test_layers.cpp.
#pragma once

#include "core/random.h"
#include "nn/module.h"

namespace ember::nn {

class Dropout : public Module {
 public:
  // generator: the Philox stream masks come from; the default generator when null.
  explicit Dropout(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double p;
  Generator* generator;
};

// Zeroes whole channels of [N, C, H, W] activations (nn::functional::dropout2d).
class Dropout2d : public Module {
 public:
  explicit Dropout2d(double p = 0.5, Generator* generator = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;
  double p;
  Generator* generator;
};

}  // namespace ember::nn
