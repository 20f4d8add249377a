// Activation layers (see activation.h).
#include "nn/activation.h"

#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate); }
std::string GELU::extra_repr() const {
  return approximate == GeluApproximation::tanh ? "approximate='tanh'" : "approximate='none'";
}

Tensor SiLU::forward(const Tensor& input) { return silu(input); }
Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim); }
std::string Softmax::extra_repr() const { return fmt::format("dim={}", dim); }

Tensor Flatten::forward(const Tensor& input) { return flatten(input, start_dim, end_dim); }
std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

}  // namespace ember::nn
