// Activation layers (see activation.h).
#include "nn/activation.h"

#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "nn/functional/activation.h"

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

Tensor LeakyReLU::forward(const Tensor& input) { return functional::leaky_relu(input, negative_slope); }
std::string LeakyReLU::extra_repr() const { return "negative_slope=" + python_repr(negative_slope); }

Tensor ELU::forward(const Tensor& input) { return functional::elu(input, alpha); }
std::string ELU::extra_repr() const { return "alpha=" + python_repr(alpha); }

Softplus::Softplus(double beta, double threshold) : beta(beta), threshold(threshold) {
  EMBER_CHECK(beta != 0, "Softplus: beta must be nonzero, got {}", beta);
}
Tensor Softplus::forward(const Tensor& input) { return functional::softplus(input, beta, threshold); }
std::string Softplus::extra_repr() const {
  return fmt::format("beta={}, threshold={}", python_repr(beta), python_repr(threshold));
}

Hardtanh::Hardtanh(double min_val, double max_val) : min_val(min_val), max_val(max_val) {
  EMBER_CHECK(min_val <= max_val, "Hardtanh: min_val {} must not exceed max_val {}", min_val, max_val);
}
Tensor Hardtanh::forward(const Tensor& input) { return functional::hardtanh(input, min_val, max_val); }
std::string Hardtanh::extra_repr() const {
  return fmt::format("min_val={}, max_val={}", python_repr(min_val), python_repr(max_val));
}

Tensor ReLU6::forward(const Tensor& input) { return functional::relu6(input); }
Tensor Mish::forward(const Tensor& input) { return functional::mish(input); }
Tensor LogSigmoid::forward(const Tensor& input) { return functional::logsigmoid(input); }

Tensor Flatten::forward(const Tensor& input) { return flatten(input, start_dim, end_dim); }
std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

Tensor Unflatten::forward(const Tensor& input) { return unflatten(input, dim, unflattened_size); }
std::string Unflatten::extra_repr() const {
  return fmt::format("dim={}, unflattened_size={}", dim, python_tuple(unflattened_size));
}

}  // namespace ember::nn
