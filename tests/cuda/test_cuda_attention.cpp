// Fused causal attention on the GPU against the CPU in f32 (whose fused
// kernel tests/core/test_attention.cpp checks against the composite and a
// naive loop): values and gradients, both head dims,
// lengths that are not a multiple of the tiles, and the dispatch from
// scaled_dot_product_attention. Label `cuda`: skips without a GPU.
#include "cuda_compare.h"
#include "nn/functional/attention.h"

namespace ember::testing {
namespace {

// The CPU in f32: the oracle.
Tensor composite_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  return nn::functional::scaled_dot_product_attention(q, k, v, {.is_causal = true});
}

struct Case {
  int64_t batch, heads, length, head_dim;
  DType dtype;
};

class CudaAttention : public ::testing::TestWithParam<Case> {};

TEST_P(CudaAttention, ValuesAndGradientsMatchTheComposite) {
  EMBER_REQUIRE_GPU();
  const Case c = GetParam();
  const Shape shape{c.batch, c.heads, c.length, c.head_dim};
  Tensors inputs = {random_tensor(shape, c.dtype, -1, 1), random_tensor(shape, c.dtype, -1, 1),
                    random_tensor(shape, c.dtype, -1, 1)};
  Tensor grad_out = random_tensor(shape, DType::f32, -1, 1);

  Tensors cpu_leaves, gpu_leaves;
  for (const Tensor& x : inputs) {
    cpu_leaves.push_back(x.to(DType::f32).detach().requires_grad_(true));
    gpu_leaves.push_back(x.to(kGpu).detach().requires_grad_(true));
  }
  Tensor expected = composite_attention(cpu_leaves[0], cpu_leaves[1], cpu_leaves[2]);
  sum(expected * grad_out).backward();

  KernelCallCounter counter;
  Tensor actual = nn::functional::scaled_dot_product_attention(gpu_leaves[0], gpu_leaves[1], gpu_leaves[2],
                                                               {.is_causal = true});
  EXPECT_EQ(counter.calls("attention", DeviceType::cuda, c.dtype), 1);
  sum(actual.to(DType::f32) * grad_out.to(kGpu)).backward();
  EXPECT_EQ(counter.calls("attention_backward", DeviceType::cuda, c.dtype), 1);

  const double tol = 4 * tolerance(c.dtype);
  EXPECT_TRUE(all_close(actual.to(kCPU).to(DType::f32), expected.detach(), tol, tol));
  const char* names[] = {"query", "key", "value"};
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(all_close(gpu_leaves[i].grad().to(kCPU).to(DType::f32), cpu_leaves[i].grad(), 4 * tol, 4 * tol))
        << names[i];
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaAttention,
                         ::testing::Values(Case{1, 1, 1, 64, DType::bf16}, Case{2, 3, 65, 64, DType::bf16},
                                           Case{1, 2, 130, 128, DType::f16}, Case{2, 2, 200, 64, DType::f16},
                                           Case{1, 1, 33, 128, DType::bf16}),
                         // Named by value: the default printer shows the struct's bytes, padding included,
                         // which differ from build to build.
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return fmt::format("b{}_h{}_l{}_d{}_{}", c.batch, c.heads, c.length, c.head_dim,
                                              dtype_name(c.dtype));
                         });

TEST(CudaAttentionDispatch, OtherCasesUseTheComposite) {
  EMBER_REQUIRE_GPU();
  Tensor q = random_tensor({1, 2, 8, 32}, DType::bf16).to(kGpu);  // head_dim 32: not fused
  KernelCallCounter counter;
  Tensor y = nn::functional::scaled_dot_product_attention(q, q, q, {.is_causal = true});
  EXPECT_EQ(counter.calls("attention", DeviceType::cuda, DType::bf16), 0);
  EXPECT_EQ(y.shape(), q.shape());
}

TEST(CudaAttentionDispatch, OtherLengthsComposeAndMismatchedOperandsAreErrors) {
  EMBER_REQUIRE_GPU();
  Tensor q = random_tensor({2, 16, 64}, DType::bf16).to(kGpu);
  Tensor k = random_tensor({2, 8, 64}, DType::bf16).to(kGpu);
  // L != S: the CUDA kernel takes equal lengths only, so the composite serves
  KernelCallCounter counter;
  EXPECT_EQ(attention(q, k, k, {.scale = 0.125, .causal = true}).shape(), q.shape());
  EXPECT_EQ(counter.calls("attention", DeviceType::cuda, DType::bf16), 0);
  EXPECT_EMBER_ERROR(attention(q, k.transpose(0, 1), k, {.scale = 0.125, .causal = true}), "attention: query");
  EXPECT_EMBER_ERROR(attention(q, q, q.to(DType::f16), {.scale = 0.125, .causal = true}), "dtypes");
}

}  // namespace
}  // namespace ember::testing
