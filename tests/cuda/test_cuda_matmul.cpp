// cuBLAS matrix products against the CPU oracle: every floating dtype, strided
// and transposed operands, broadcast batches, addmm's fused bias, gradients,
// and TF32 only when asked for. Label `cuda`: skips without a GPU.
#include "cuda_compare.h"

namespace ember::testing {
namespace {

constexpr DType kFloatingTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

TEST(CudaMatmul, MatchesTheOracleForEveryLayoutAndDtype) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatingTypes) {
    for (const Layout& a : layouts_of(random_tensor({7, 5}, dtype))) {
      for (const Layout& b : layouts_of(random_tensor({5, 3}, dtype))) {
        // k = 5 products: the per-dtype tolerance times a few roundings.
        EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return matmul(x[0], x[1]); }, {a.tensor, b.tensor}, 8))
            << dtype_name(dtype) << " " << a.name << " x " << b.name;
      }
    }
  }
}

TEST(CudaMatmul, BatchedAndBroadcastBatches) {
  EMBER_REQUIRE_GPU();
  Tensor a = random_tensor({2, 3, 4, 6}, DType::f32), b = random_tensor({3, 6, 5}, DType::f32);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return matmul(x[0], x[1]); }, {a, b}, 8));
  // A transposed batch layout that no single strided batch describes.
  Tensor c = random_tensor({3, 2, 4, 6}, DType::bf16).transpose(0, 1);
  Tensor d = random_tensor({2, 3, 6, 5}, DType::bf16);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return matmul(x[0], x[1]); }, {c, d}, 4));
  Tensor e = random_tensor({4, 1, 7}, DType::f16), f = random_tensor({7}, DType::f16);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return matmul(x[0], x[1]); }, {e, f}, 4));
}

TEST(CudaMatmul, AddmmFusesTheBroadcastBias) {
  EMBER_REQUIRE_GPU();
  Tensor bias = random_tensor({3}, DType::f32), a = random_tensor({6, 4}, DType::f32), b = random_tensor({4, 3}, DType::f32);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return addmm(x[0], x[1], x[2]); }, {bias, a, b}, 8));
  EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& x) { return addmm(x[0], x[1], x[2]); }, {bias, a, b}, 8));
}

TEST(CudaMatmul, GradientsMatchTheOracle) {
  EMBER_REQUIRE_GPU();
  Tensor a = random_tensor({2, 5, 4}, DType::f32), b = random_tensor({2, 4, 3}, DType::f32);
  EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& x) { return matmul(x[0], x[1]); }, {a, b}, 8));
}

TEST(CudaMatmul, Tf32OnlyWhenAskedFor) {
  EMBER_REQUIRE_GPU();
  // 1 + 2^-12 is exact in f32 and rounds to 1 in TF32's 10-bit mantissa.
  Tensor a = full({1, 1}, 1.0 + std::ldexp(1.0, -12), {.device = kGpu});
  Tensor one = full({1, 1}, 1.0, {.device = kGpu});
  EXPECT_EQ(matmul(a, one).to(kCPU).item<double>(), 1.0 + std::ldexp(1.0, -12));
  set_float32_matmul_precision("high");
  const double tf32 = matmul(a, one).to(kCPU).item<double>();
  set_float32_matmul_precision("highest");
  EXPECT_EQ(tf32, 1.0);
}

TEST(CudaMatmul, LargeProductsStayWithinTolerance) {
  EMBER_REQUIRE_GPU();
  Tensor a = random_tensor({256, 512}, DType::bf16, -1, 1), b = random_tensor({512, 128}, DType::bf16, -1, 1);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return matmul(x[0], x[1]); }, {a, b}, 16));
}

}  // namespace
}  // namespace ember::testing
