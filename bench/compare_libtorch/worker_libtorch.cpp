// libtorch's side of the comparison: the same workload table as
// worker_ember.cpp (same names, shapes and dtypes) and the training rows
// (training_libtorch.cpp), timed by worker.cpp.
// Run by the driver compare_libtorch with libtorch's best environment.
#include <torch/torch.h>

#include "training_workloads.h"
#include "worker.h"

namespace ember::compare {
namespace {

torch::Tensor uniform(at::IntArrayRef shape) { return torch::rand(shape) * 2 - 1; }

// [n, n] x [n, n] -> [n, n]
Step matmul_step(int64_t n) {
  torch::Tensor a = uniform({n, n}), b = uniform({n, n});
  return [a, b] { torch::Tensor c = torch::mm(a, b); };
}

Step add_step(int64_t count) {
  torch::Tensor a = uniform({count}), b = uniform({count});
  return [a, b] { torch::Tensor c = torch::add(a, b); };
}

Step softmax_step(int64_t rows, int64_t columns) {
  torch::Tensor input = uniform({rows, columns});
  return [input] { torch::Tensor probabilities = torch::softmax(input, 1); };
}

Step sum_step(int64_t rows, int64_t columns, int64_t dim) {
  torch::Tensor input = uniform({rows, columns});
  return [input, dim] { torch::Tensor total = torch::sum(input, {dim}); };
}

// worker_ember.cpp's chain_step: 20 small ops forward and backward. Autograd
// must run, so these leave the process-wide InferenceMode for both the leaves
// (inference tensors cannot be saved for backward) and the step.
Step chain_step(at::IntArrayRef shape) {
  c10::InferenceMode grad_mode_on(false);
  torch::Tensor x = uniform(shape).requires_grad_(), y = uniform(shape).requires_grad_();
  return [x, y] {
    c10::InferenceMode grad_mode_on(false);
    torch::Tensor h = x;
    for (int i = 0; i < 5; ++i) h = torch::exp(torch::tanh(h * y + x));
    std::vector<torch::Tensor> grads = torch::autograd::grad({h.sum()}, {x, y});
  };
}

Step transpose_copy_step(int64_t n) {
  torch::Tensor a = uniform({n, n});
  return [a] { torch::Tensor copy = a.t().contiguous(); };
}

// worker_ember.cpp's op_gradient_step: forward and backward of one op.
Step op_gradient_step(std::function<torch::Tensor(const std::vector<torch::Tensor>&)> op,
                      std::vector<torch::Tensor> inputs) {
  c10::InferenceMode grad_mode_on(false);
  for (torch::Tensor& input : inputs) input = input.clone().requires_grad_();
  torch::Tensor grad_output = uniform(op(inputs).sizes());
  return [op, inputs, grad_output] {
    c10::InferenceMode grad_mode_on(false);
    std::vector<torch::Tensor> grads = torch::autograd::grad({op(inputs)}, inputs, {grad_output});
  };
}

Step relu_gradient_step() {
  return op_gradient_step([](const std::vector<torch::Tensor>& x) { return torch::relu(x[0]); },
                          {uniform({2048, 1024})});
}

Step gelu_gradient_step() {
  return op_gradient_step([](const std::vector<torch::Tensor>& x) { return torch::gelu(x[0]); },
                          {uniform({2048, 1024})});
}

Step max_pool_gradient_step() {
  return op_gradient_step([](const std::vector<torch::Tensor>& x) { return torch::max_pool2d(x[0], {2, 2}); },
                          {uniform({64, 32, 28, 28})});
}

Step conv_gradient_step() {
  return op_gradient_step(
      [](const std::vector<torch::Tensor>& x) { return torch::conv2d(x[0], x[1], x[2], 1, 1); },
      {uniform({64, 32, 14, 14}), uniform({64, 32, 3, 3}), uniform({64})});
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
  // The peer at its best: inference mode skips autograd bookkeeping, which
  // ember's raw ops never do either (the autograd and training rows leave it).
  c10::InferenceMode inference_mode;
  return ember::compare::worker_main(argc, argv, "libtorch", ember::compare::kWorkloads,
                                     ember::compare::training_workloads(),
                                     [](int threads) { torch::set_num_threads(threads); });
}
