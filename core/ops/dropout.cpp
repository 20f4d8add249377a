// Entry point of dropout: validate p, reserve the Philox blocks of the mask and
// dispatch. The mask is never stored: the backward regenerates it from the
// same stream (autograd/functions/dropout.cpp). Kernels:
// kernels/{reference,cpu}/dropout.cpp. Tests: tests/core/test_dropout.cpp.
#include "core/ops/dropout.h"

#include <cmath>

#include "core/ops/dropout_kernels.h"
#include "core/ops/views.h"

namespace ember {

Op<void(const DropoutProblem&)> dropout_op("dropout");
GradSlot dropout_grad("dropout");

Tensor dropout(const Tensor& input, double p, bool training, Generator* generator) {
  EMBER_CHECK(input.defined(), "dropout: undefined input");
  EMBER_CHECK(p >= 0 && p <= 1, "dropout: p must be a probability in [0, 1], got {}", p);
  EMBER_CHECK(is_floating(input.dtype()), "dropout: expected a floating point input, got {}", input.dtype());
  if (!training || p == 0) return input;
  DropoutProblem problem;
  problem.numel = input.numel();
  // uniform = (word >> 8) / 2^24 < p  <=>  (word >> 8) < ceil(p 2^24), exactly, in integers.
  problem.threshold = uint32_t(std::ceil(p * 16777216.0));
  problem.scale = p == 1 ? 0.0 : 1.0 / (1.0 - p);
  Generator& source = generator ? *generator : default_generator();
  problem.stream.seed = source.seed();
  problem.stream.offset = source.reserve(uint64_t((problem.numel + kDropoutPerBlock - 1) / kDropoutPerBlock));
  Tensor out = make_tensor(input.shape(), input.dtype(), input.device());
  if (problem.numel > 0) {
    Tensor dense = contiguous(input);
    problem.input = dense.data_ptr(), problem.output = out.data_ptr();
    dropout_op(input.device().type, input.dtype(), problem);
  }
  return with_grad(dropout_grad, out, {&input}, &problem);
}

Tensor dropout_backward(const Tensor& grad_output, const DropoutProblem& forward) {
  EMBER_CHECK(grad_output.defined() && grad_output.numel() == forward.numel,
              "dropout_backward: expected grad_output of {} elements", forward.numel);
  Tensor grad_input = make_tensor(grad_output.shape(), grad_output.dtype(), grad_output.device());
  if (forward.numel == 0) return grad_input;
  Tensor dense = contiguous(grad_output);
  DropoutProblem problem = forward;
  problem.input = dense.data_ptr(), problem.output = grad_input.data_ptr();
  dropout_op(grad_output.device().type, grad_output.dtype(), problem);
  return grad_input;
}

}  // namespace ember
