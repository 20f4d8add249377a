// nn::Dropout (see dropout.h).
#include "nn/dropout.h"

#include "core/ops/dropout.h"

namespace ember::nn {

Dropout::Dropout(double p, Generator* generator) : p(p), generator(generator) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability has to be between 0 and 1, but got {}", p);
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p, is_training(), generator); }

std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace=False", python_repr(p)); }

}  // namespace ember::nn
