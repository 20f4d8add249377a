// Gradient of dropout (forward: core/ops/dropout.cpp). Nothing is saved but
// the stream: the backward regenerates the forward's mask from it.
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/dropout_kernels.h"

namespace ember::autograd {

void register_dropout_functions() {
  // dropout: y = x m / (1 - p), m_i = [uniform_i >= p]  ->  dx = g m / (1 - p), the same kernel on g
  dropout_grad.set_recorder([](const GradRecord& r) {
    DropoutProblem forward = params<DropoutProblem>(r);
    forward.input = nullptr, forward.output = nullptr;
    record_formula(r, "DropoutBackward", {}, [forward](const std::vector<Tensor>&, const Tensor& g) {
      refuse_double_backward("DropoutBackward", {&g});
      return std::vector<Tensor>{dropout_backward(g, forward)};
    });
  });
}

}  // namespace ember::autograd
