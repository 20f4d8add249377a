// What a kernel's arguments tell the profiler (kernel_span.h): operand shapes,
// bytes moved and floating-point operations, per argument type. FLOPs count a
// multiply-add as two, as torch.profiler and the GEMM literature do; bytes are
// each operand read or written once.
// Tests: tests/core/test_profiler.cpp (exact matmul and conv FLOPs).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "core/elementwise_loop.h"
#include "core/ops/attention_kernels.h"
#include "core/ops/conv_kernels.h"
#include "core/ops/linalg_kernels.h"
#include "core/ops/reduction_kernels.h"
#include "core/profiler/profiler.h"
#include "core/tensor.h"

namespace ember::profiler {
namespace {

using Sizes = std::vector<int64_t>;

void set_shapes(KernelFacts& facts, const std::vector<Sizes>& shapes) {
  if (recording(kRecordShapes)) facts.shapes = fmt::format("{}", shapes);
}

}  // namespace

void describe_kernel_call(KernelFacts& facts, const Tensor& first) {
  if (recording(kRecordShapes)) facts.shapes = fmt::format("[{}]", first.shape());
}

void describe_kernel_call(KernelFacts& facts, const ElementwiseLoop& loop) {
  int64_t bytes = 0;
  for (int i = 0; i < loop.num_operands; ++i) {
    // An operand broadcast along a dim (stride 0: a bias, a scalar) is read
    // once there, not once per output element.
    int64_t elements = 1;
    for (int d = 0; d < loop.ndim; ++d)
      if (loop.strides[i][d] != 0) elements *= loop.shape[d];
    bytes += elements * element_size(loop.dtypes[i]);
  }
  facts.bytes = bytes;
  // The loop's shape after merging dims, the same for every operand.
  set_shapes(facts, {Sizes(loop.shape, loop.shape + loop.ndim)});
}

void describe_kernel_call(KernelFacts& facts, const ReductionLoop& loop) {
  facts.bytes = loop.kept_numel * loop.reduced_numel * element_size(loop.input_dtype) +
                loop.kept_numel * element_size(facts.dtype);
  Sizes kept(loop.kept_shape, loop.kept_shape + loop.kept_ndim);
  Sizes reduced(loop.reduced_shape, loop.reduced_shape + loop.reduced_ndim);
  set_shapes(facts, {kept, reduced});
}

void describe_kernel_call(KernelFacts& facts, const SoftmaxLoop& loop) {
  facts.bytes = 2 * loop.outer * loop.size * loop.inner * element_size(facts.dtype);
  set_shapes(facts, {{loop.outer, loop.size, loop.inner}});
}

// [batch..., m, k] x [batch..., k, n] -> [batch..., m, n]
void describe_kernel_call(KernelFacts& facts, const MatmulProblem& p) {
  const int64_t batch = p.batch_count();
  facts.flops = 2 * batch * p.m * p.n * p.k;
  int64_t elements = batch * (p.m * p.k + p.k * p.n + p.m * p.n);
  if (p.bias.data != nullptr) elements += p.m * p.n;
  facts.bytes = elements * element_size(facts.dtype);
  if (recording(kRecordShapes)) {
    Sizes batch_shape(p.batch_shape, p.batch_shape + p.batch_ndim);
    auto with_batch = [&](int64_t rows, int64_t columns) {
      Sizes sizes = batch_shape;
      sizes.push_back(rows);
      sizes.push_back(columns);
      return sizes;
    };
    set_shapes(facts, {with_batch(p.m, p.k), with_batch(p.k, p.n)});
  }
}

// Every output element is a dot product of (in_channels / groups) * kernel
// window taps: one multiply-add each.
void describe_kernel_call(KernelFacts& facts, const Conv2dProblem& p) {
  const int64_t out_elements = p.batch * p.out_channels * p.out_size[0] * p.out_size[1];
  facts.flops = 2 * out_elements * (p.in_channels / p.groups) * p.kernel[0] * p.kernel[1];
  const int64_t in_elements = p.batch * p.in_channels * p.in_size[0] * p.in_size[1];
  const int64_t weight_elements = p.out_channels * (p.in_channels / p.groups) * p.kernel[0] * p.kernel[1];
  facts.bytes = (in_elements + weight_elements + out_elements) * element_size(facts.dtype);
  set_shapes(facts, {{p.batch, p.in_channels, p.in_size[0], p.in_size[1]},
                     {p.out_channels, p.in_channels / p.groups, p.kernel[0], p.kernel[1]}});
}

// The gradient of the input and that of the weight are each one convolution
// of the forward's size.
void describe_kernel_call(KernelFacts& facts, const Conv2dBackwardProblem& p) {
  describe_kernel_call(facts, p.forward);
}

// Both gradients at once: two convolutions of the forward's size, reading
// input, weight and grad_output and writing gradients of the first two.
void describe_kernel_call(KernelFacts& facts, const Conv2dBackwardBothProblem& p) {
  describe_kernel_call(facts, p.forward);
  const Conv2dProblem& f = p.forward;
  const int64_t in_elements = f.batch * f.in_channels * f.in_size[0] * f.in_size[1];
  const int64_t weight_elements = f.out_channels * (f.in_channels / f.groups) * f.kernel[0] * f.kernel[1];
  facts.flops *= 2;
  facts.bytes += (in_elements + weight_elements) * element_size(facts.dtype);
}

// Attention computes the scores q k^T (2 * heads * Lq * Lk * head_dim) and
// then probabilities times v (2 * heads * Lq * Lk * value_dim); a causal mask
// keeps half of the square. It reads q, k and v and writes out.
void describe_kernel_call(KernelFacts& facts, const AttentionProblem& p) {
  const int64_t products = 2 * p.heads * p.query_length * p.key_length * (p.head_dim + p.value_dim);
  facts.flops = p.causal ? products / 2 : products;
  facts.bytes = p.heads *
                (p.query_length * p.head_dim + p.key_length * p.head_dim + p.key_length * p.value_dim +
                 p.query_length * p.value_dim) *
                element_size(facts.dtype);
  set_shapes(facts, {{p.heads, p.query_length, p.head_dim},
                     {p.heads, p.key_length, p.head_dim},
                     {p.heads, p.key_length, p.value_dim}});
}

// Backward recomputes the scores and computes four products of the same
// size: 2.5 times the forward, as FlashAttention counts it.
void describe_kernel_call(KernelFacts& facts, const AttentionBackwardProblem& p) {
  describe_kernel_call(facts, p.forward);
  facts.flops = facts.flops * 5 / 2;
  facts.bytes *= 2;
}

}  // namespace ember::profiler
