// libtorch's side of the comparison: the same workload table as
// worker_ember.cpp (same names, shapes and dtypes), timed by worker.cpp.
// Run by the driver compare_libtorch with libtorch's best environment.
#include <torch/torch.h>

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
};

}  // namespace
}  // namespace ember::compare

int main(int argc, char** argv) {
  // The peer at its best: inference mode skips autograd bookkeeping, which
  // ember's raw ops never do either (the autograd rows leave it: chain_step).
  c10::InferenceMode inference_mode;
  return ember::compare::worker_main(argc, argv, "libtorch", ember::compare::kWorkloads,
                                     [](int threads) { torch::set_num_threads(threads); });
}
