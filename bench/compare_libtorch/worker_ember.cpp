// ember's side of the libtorch comparison: the shared workload table (names
// and sizes must match worker_libtorch.cpp), timed by worker.cpp.
// Run by the driver compare_libtorch, never directly by scripts.
#include "bench_support.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/reduction.h"
#include "core/parallel.h"
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

// Forward and backward of a chain of 20 recorded ops on [n, n] leaves:
// (y * w + b, tanh, * 0.5) five times, then sum and backward. Measures the
// autograd overhead per recorded op when n is small.
Step autograd_chain_step(int64_t n) {
  Tensor x = uniform({n, n}, 1), w = uniform({n, n}, 2), b = uniform({n, n}, 3);
  for (Tensor* leaf : {&x, &w, &b}) leaf->requires_grad_(true);
  return [x, w, b] {
    Tensor y = x;
    for (int i = 0; i < 5; ++i) y = tanh(y * w + b) * 0.5;
    sum(y).backward();
    for (const Tensor& leaf : {x, w, b}) leaf.set_grad(Tensor());
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
    {"autograd_chain20_1", [] { return autograd_chain_step(1); }},
    {"autograd_chain20_64x64", [] { return autograd_chain_step(64); }},
};

}  // namespace
}  // namespace ember::compare

int main(int argc, char** argv) {
  return ember::compare::worker_main(argc, argv, "ember", ember::compare::kWorkloads, ember::set_num_threads);
}
