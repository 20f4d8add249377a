// nn::Dropout (see dropout.h).
#include "nn/dropout.h"

#include "core/ops/dropout.h"
#include "nn/functional/normalization.h"

namespace ember::nn {

Dropout::Dropout(double p, Generator* generator) : p(p), generator(generator) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability has to be between 0 and 1, but got {}", p);
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p, is_training(), generator); }

std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", python_repr(p)); }

Dropout2d::Dropout2d(double p, Generator* generator) : p(p), generator(generator) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "Dropout2d: probability has to be between 0 and 1, but got {}", p);
}

Tensor Dropout2d::forward(const Tensor& input) { return functional::dropout2d(input, p, is_training(), generator); }

std::string Dropout2d::extra_repr() const { return fmt::format("p={}, inplace=False", python_repr(p)); }

}  // namespace ember::nn
