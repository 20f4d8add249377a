// gradcheck and gradgradcheck: analytic first and second derivatives against
// central finite differences, in f64.
// Used by the test suite for every differentiable op (tests/autograd/).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

struct GradcheckResult {
  bool ok = true;
  double worst_error = 0;  // |analytic - numeric| - (atol + rtol |numeric|), largest over all elements
  std::string report;      // which input and element was worst, with both values
};

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

// `fn` maps the inputs to one output tensor. Floating inputs are converted to
// contiguous f64 leaves that require grad (to check a non-contiguous layout,
// let fn transpose or slice them); others are passed through. The check
// compares v^T J for a random v, one input element at a time.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

// Second derivatives, as PyTorch's gradgradcheck: gradcheck of the map
// (x, v) -> v^T J(x), the gradient computed with create_graph, for a random
// weighting v of fn's output that is itself an input (so the gradient's
// dependence on the incoming gradient is checked too). An op whose gradient
// is not differentiable raises "double backward of X is not supported".
GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace ember::autograd
