// The case table of the gradient checks (defined in test_gradcheck.cpp):
// random f64 inputs of the given shapes and a function of them, per
// differentiable op (GradSlot name). gradcheck runs every case
// (test_gradcheck.cpp), gradgradcheck every case of an op whose gradient is
// differentiable (test_higher_order.cpp).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace ember::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
struct GradCase {
  std::vector<Shape> shapes;  // one random input per shape
  Fn fn;
  double lo = -2, hi = 2;     // the inputs' range (keep log/sqrt positive)
};

const std::map<std::string, std::vector<GradCase>>& gradcheck_cases();

// Differentiable ops with kernels on the GPU only, and where their gradients are checked.
extern const std::map<std::string, std::string> kGpuOnly;

}  // namespace ember::testing
