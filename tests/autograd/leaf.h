// The f64 leaf that requires grad which the autograd tests build their
// hand cases from: leaf({1, 2, 3}), leaf({1, 2, 3, 4}, {2, 2}).
#pragma once

#include <vector>

#include "support/test_support.h"

namespace ember::testing {

inline Tensor leaf(std::vector<double> values, Shape shape = {}) {
  Tensor t = from_vector(values, shape).to(DType::f64);
  t.requires_grad_(true);
  return t;
}

}  // namespace ember::testing
