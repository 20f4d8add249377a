// The device-parity harness of the CUDA suites: an op test written once runs
// on the CPU (the oracle: the reference kernels) and on cuda:0 from the same
// inputs, and the results are compared with the per-dtype tolerance of every
// op test. Without a GPU each test skips, saying why.
//
//   EMBER_REQUIRE_GPU();
//   for (const Layout& a : layouts_of(random_tensor({3, 5}, DType::f32)))
//     EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return exp(x[0]); }, {a.tensor}));
#pragma once

#include <functional>
#include <vector>

#include "support/test_support.h"

namespace ember::testing {

#define EMBER_REQUIRE_GPU()                                                                           \
  do {                                                                                                \
    if (!::ember::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU on this machine";                 \
  } while (0)

using Tensors = std::vector<Tensor>;
using TensorFunction = std::function<Tensor(const Tensors&)>;

inline const Device kGpu{DeviceType::cuda, 0};

// The inputs moved to the GPU with their layout kept (strides, offsets and
// expanded dims), so the CUDA kernels see the same strided operands.
inline Tensor on_gpu_like(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor base = Tensor::make(t.storage(), t.dtype(), Shape{int64_t(t.storage()->nbytes() / element_size(t.dtype()))},
                             Strides{1}, 0);
  Tensor moved = base.to(kGpu);
  return as_strided(moved, t.shape(), t.strides(), t.offset());
}

// Runs f on the CPU (reference kernels) and on the GPU and compares; the
// tolerance scales the per-dtype one (reductions over many elements differ
// in summation order).
inline ::testing::AssertionResult same_on_gpu(const TensorFunction& f, const Tensors& inputs,
                                              double tolerance_scale = 1.0) {
  Tensor expected = reference([&] { return f(inputs); });
  Tensors gpu_inputs;
  for (const Tensor& t : inputs) gpu_inputs.push_back(on_gpu_like(t));
  Tensor actual = f(gpu_inputs);
  if (!actual.device().is_cuda())
    return ::testing::AssertionFailure() << "the result is on " << actual.device().str() << ", not on the GPU";
  double tol = tolerance(expected.dtype()) * tolerance_scale;
  return all_close(actual.to(kCPU), expected, tol, tol);
}

// The gradients of sum(f(inputs) * weights) with respect to every floating
// input, on the CPU (reference kernels) and on the GPU, compared.
inline ::testing::AssertionResult same_gradients_on_gpu(const TensorFunction& f, const Tensors& inputs,
                                                        double tolerance_scale = 1.0) {
  auto gradients = [&](const Tensors& xs, Device device) {
    Tensors leaves;
    for (const Tensor& x : xs) {
      Tensor leaf = device.is_cpu() ? x.detach() : on_gpu_like(x).detach();
      if (is_floating(leaf.dtype())) leaf.requires_grad_(true);
      leaves.push_back(leaf);
    }
    Tensor out = f(leaves);
    Tensor weights = random_tensor(out.shape(), out.dtype()).to(device);
    sum(out * weights).backward();
    Tensors grads;
    for (const Tensor& leaf : leaves) grads.push_back(leaf.requires_grad() ? leaf.grad().to(kCPU) : Tensor());
    return grads;
  };
  // One weight draw for both runs: the generator is reseeded in between.
  rng().seed(1234);
  Tensors expected = reference([&] { return gradients(inputs, kCPU); });
  rng().seed(1234);
  Tensors actual = gradients(inputs, kGpu);
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!expected[i].defined()) continue;
    double tol = tolerance(expected[i].dtype()) * tolerance_scale;
    ::testing::AssertionResult close = all_close(actual[i], expected[i], tol, tol);
    if (!close) return close << " (gradient of input " << i << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace ember::testing
