// causal_attention where no fused kernel serves (the CPU here): against
// scaled_dot_product_attention with an explicit lower-triangular mask (the
// other path through nn), on non-contiguous operands, in f64 and f32;
// gradients by finite differences; and bad operands. The fused GPU kernel is
// tested in tests/cuda/test_cuda_attention.cpp.
#include <cmath>

#include "support/test_support.h"

namespace ember::testing {
namespace {

namespace F = nn::functional;

TEST(CausalAttention, MatchesMaskedScaledDotProductAttentionOnTheCpu) {
  for (DType dtype : {DType::f64, DType::f32}) {
    // [batch, heads, length, head_dim] from transposed storage, as a model's head split makes them
    Tensor q = random_tensor({2, 5, 3, 4}, dtype).transpose(1, 2), k = random_tensor({2, 5, 3, 4}, dtype).transpose(1, 2);
    Tensor v = random_tensor({2, 3, 5, 4}, dtype);
    Tensor mask = tril(ones({5, 5}, {.dtype = DType::boolean}));
    const double scale = 0.37;
    Tensor expected = F::scaled_dot_product_attention(q, k, v, {.attn_mask = mask, .scale = scale});
    Tensor y = causal_attention(q, k, v, scale);
    EXPECT_EQ(y.shape(), (Shape{2, 3, 5, 4}));
    EXPECT_TRUE(all_close(y, expected)) << dtype_name(dtype);
    // the first query sees only the first key: its output is the first value row
    EXPECT_TRUE(all_close(y.select(2, 0), v.select(2, 0))) << dtype_name(dtype);
  }
  Tensor q = random_tensor({7, 8}, DType::f32);  // no leading dims
  EXPECT_TRUE(all_close(causal_attention(q, q, q, 1.0),
                        F::scaled_dot_product_attention(q, q, q, {.is_causal = true, .scale = 1.0})));
  EXPECT_EQ(causal_attention(zeros({2, 0, 4}), zeros({2, 0, 4}), zeros({2, 0, 4}), 0.5).shape(), (Shape{2, 0, 4}));
}

TEST(CausalAttention, GradcheckOnTheCpu) {
  using V = const std::vector<Tensor>&;
  // the query from transposed storage
  std::vector<Tensor> inputs = {random_tensor({4, 2, 3}, DType::f64), random_tensor({2, 4, 3}, DType::f64),
                                random_tensor({2, 4, 3}, DType::f64)};
  auto result = autograd::gradcheck([](V x) { return causal_attention(x[0].transpose(0, 1), x[1], x[2], 0.6); }, inputs);
  EXPECT_TRUE(result.ok) << result.report;
  // the gradients equal the other path's, scaled_dot_product_attention with is_causal
  Tensor q = inputs[0].clone().requires_grad_(), k = inputs[1].clone().requires_grad_(), v = inputs[2].clone().requires_grad_();
  Tensor g = random_tensor({2, 4, 3}, DType::f64);
  sum(causal_attention(q.transpose(0, 1), k, v, 0.6) * g).backward();
  Tensor q2 = inputs[0].clone().requires_grad_(), k2 = inputs[1].clone().requires_grad_(), v2 = inputs[2].clone().requires_grad_();
  sum(F::scaled_dot_product_attention(q2.transpose(0, 1), k2, v2, {.is_causal = true, .scale = 0.6}) * g).backward();
  EXPECT_TRUE(all_close(q.grad(), q2.grad()));
  EXPECT_TRUE(all_close(k.grad(), k2.grad()));
  EXPECT_TRUE(all_close(v.grad(), v2.grad()));
}

TEST(CausalAttention, BadOperandsAreErrors) {
  Tensor q = zeros({2, 4, 3});
  EXPECT_EMBER_ERROR(causal_attention(q, zeros({2, 5, 3}), q, 1.0), "must share one [..., length, head_dim] shape");
  EXPECT_EMBER_ERROR(causal_attention(q, q, q.to(DType::f64), 1.0), "dtypes");
  Tensor i = zeros({2, 4, 3}, {.dtype = DType::i64});
  EXPECT_EMBER_ERROR(causal_attention(i, i, i, 1.0), "causal_attention: expected floating query, key and value, got int64");
  EXPECT_EMBER_ERROR(causal_attention(zeros({3}), zeros({3}), zeros({3}), 1.0), "causal_attention");
}

}  // namespace
}  // namespace ember::testing
