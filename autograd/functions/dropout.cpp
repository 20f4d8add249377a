// Gradient of dropout (forward: core/ops/dropout.cpp). Nothing is saved but
// the stream: the backward regenerates the forward's mask from it.
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/dropout_kernels.h"
#include "core/ops/elementwise.h"

namespace ember::autograd {

void register_dropout_functions() {
  // dropout: y = x m / (1 - p), m_i = [uniform_i >= p]  ->  dx = g m / (1 - p), the same kernel on g
  dropout_grad.set_recorder([](const GradRecord& r) {
    DropoutProblem forward = params<DropoutProblem>(r);
    forward.input = nullptr, forward.output = nullptr;
    record_formula(r, "DropoutBackward", {}, [forward](const std::vector<Tensor>&, const Tensor& g) {
      // Under create_graph: the kernel on ones is the scaled mask m / (1 - p), and g times it is recorded.
      if (should_record({&g})) return std::vector<Tensor>{g * dropout_backward(ones_like(g), forward)};
      return std::vector<Tensor>{dropout_backward(g, forward)};
    });
  });
}

}  // namespace ember::autograd
