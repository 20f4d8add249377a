// ember's side of the libtorch comparison: the shared workload table (names
// and sizes must match worker_libtorch.cpp) and the training rows
// (training_ember.cpp), timed by worker.cpp.
// Run by the driver compare_libtorch, never directly by scripts.
#include "autograd/engine.h"
#include "bench_support.h"
#include "core/ops/conv.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/parallel.h"
#include "training_workloads.h"
#include "worker.h"

namespace ember::compare {
namespace {

Tensor uniform(const Shape& shape, uint32_t seed) { return bench::uniform_tensor(shape, DType::f32, seed); }

// [n, n] x [n, n] -> [n, n]
Step matmul_step(int64_t n) {
  Tensor a = uniform({n, n}, 1), b = uniform({n, n}, 2);
  return [a, b] { Tensor c = mm(a, b); };
}

Step add_step(int64_t count) {
  Tensor a = uniform({count}, 1), b = uniform({count}, 2);
  return [a, b] { Tensor c = add(a, b); };
}

Step softmax_step(int64_t rows, int64_t columns) {
  Tensor input = uniform({rows, columns}, 1);
  return [input] { Tensor probabilities = softmax(input, 1); };
}

Step sum_step(int64_t rows, int64_t columns, int64_t dim) {
  Tensor input = uniform({rows, columns}, 1);
  return [input, dim] { Tensor total = sum(input, {dim}); };
}

// Forward and backward of 20 small ops (5 x mul, add, tanh, exp) on leaves
// that require grad: the per-op cost of recording and walking the graph.
// Gradients come from autograd::grad, so nothing accumulates across steps.
// The same sequence as worker_libtorch.cpp's chain_step.
Step chain_step(const Shape& shape) {
  Tensor x = uniform(shape, 1).requires_grad_(), y = uniform(shape, 2).requires_grad_();
  return [x, y] {
    Tensor h = x;
    for (int i = 0; i < 5; ++i) h = exp(tanh(h * y + x));
    std::vector<Tensor> grads = autograd::grad({sum(h)}, {x, y});
  };
}

Step transpose_copy_step(int64_t n) {
  Tensor a = uniform({n, n}, 1);
  return [a] { Tensor copy = a.t().contiguous(); };
}

// Forward and backward of one op that the training rows spend time in
// (bench/README.md): d(op)/d(inputs) for a given output gradient.
Step op_gradient_step(std::function<Tensor(const std::vector<Tensor>&)> op, std::vector<Tensor> inputs) {
  for (Tensor& input : inputs) input.requires_grad_();
  Tensor grad_output = uniform(op(inputs).shape(), 9);
  return [op, inputs, grad_output] { std::vector<Tensor> grads = autograd::grad({op(inputs)}, inputs, {grad_output}); };
}

Step relu_gradient_step() {
  return op_gradient_step([](const std::vector<Tensor>& x) { return relu(x[0]); }, {uniform({2048, 1024}, 1)});
}

Step gelu_gradient_step() {
  return op_gradient_step([](const std::vector<Tensor>& x) { return gelu(x[0]); }, {uniform({2048, 1024}, 1)});
}

Step max_pool_gradient_step() {
  return op_gradient_step([](const std::vector<Tensor>& x) { return max_pool2d(x[0], {.kernel_size = {2, 2}}); },
                          {uniform({64, 32, 28, 28}, 1)});
}

// The CNN's second convolution: d(input), d(weight) and d(bias).
Step conv_gradient_step() {
  return op_gradient_step(
      [](const std::vector<Tensor>& x) { return conv2d(x[0], x[1], x[2], {.padding = {1, 1}}); },
      {uniform({64, 32, 14, 14}, 1), uniform({64, 32, 3, 3}, 2), uniform({64}, 3)});
}

const std::vector<Workload> kWorkloads = {
    {"gemm_f32_64", [] { return matmul_step(64); }},
    {"gemm_f32_256", [] { return matmul_step(256); }},
    {"gemm_f32_1024", [] { return matmul_step(1024); }},
    {"add_f32_1M", [] { return add_step(int64_t(1) << 20); }},
    {"add_f32_16M", [] { return add_step(int64_t(1) << 24); }},
    {"add_overhead_1", [] { return add_step(1); }},
    {"softmax_last_dim_1M", [] { return softmax_step(1024, 1024); }},
    {"sum_last_dim_1M", [] { return sum_step(1024, 1024, 1); }},
    {"sum_first_dim_1M", [] { return sum_step(1024, 1024, 0); }},
    {"autograd_chain20_1", [] { return chain_step({1}); }},
    {"autograd_chain20_64x64", [] { return chain_step({64, 64}); }},
    {"transpose_copy_f32_1024", [] { return transpose_copy_step(1024); }},
    {"relu_fwd_bwd_2M", relu_gradient_step},
    {"gelu_fwd_bwd_2M", gelu_gradient_step},
    {"maxpool2d_fwd_bwd_64x32x28x28", max_pool_gradient_step},
    {"conv2d_fwd_bwd_64x32x14x14", conv_gradient_step},
};

}  // namespace
}  // namespace ember::compare

int main(int argc, char** argv) {
  return ember::compare::worker_main(argc, argv, "ember", ember::compare::kWorkloads,
                                     ember::compare::training_workloads(), ember::set_num_threads);
}
