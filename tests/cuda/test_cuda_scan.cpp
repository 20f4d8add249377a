// CUDA scan kernels (kernels/cuda/scan.cu) and the reorder/einsum composites
// on the GPU, against the CPU's reference kernels: both kernel layouts (a
// block per long dense slice, a thread per slice), every dtype, layouts and
// dims, empty inputs. Skips without a GPU.
#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

TEST(CudaScan, EveryCpuDtypeHasACudaKernel) {
  EXPECT_TRUE(cuda_registers_cpu_dtypes({"cumsum", "cumprod"}));
}

TEST(CudaScan, CumsumAndCumprodMatchTheCpuForEveryDtypeLayoutAndDim) {
  EMBER_REQUIRE_GPU();
  // {3, 1000}: long dense slices (a block each, many chunks); {1000, 3} and {4, 5, 6}: a thread per slice.
  const std::vector<Shape> shapes = {{7}, {4, 5, 6}, {3, 1000}, {1000, 3}, {2, 33, 5}, {0, 4}};
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : shapes) {
      for (const Layout& layout : layouts_of(random_tensor(shape, dtype, -2, 2))) {
        for (int64_t dim = -shape.ndim(); dim < shape.ndim(); ++dim) {
          SCOPED_TRACE(fmt::format("{} {} {} dim {}", dtype, shape, layout.name, dim));
          // Long float sums add in a different order on the GPU: a tolerance scaled with the length.
          double scale = std::max<int64_t>(1, shape.numel() / 100);
          EXPECT_TRUE(same_on_gpu([dim](const Tensors& x) { return cumsum(x[0], dim); }, {layout.tensor}, scale));
        }
      }
      Tensor near_one = random_tensor(shape, dtype, 0.99, 1.01);
      for (int64_t dim = 0; dim < shape.ndim(); ++dim)
        EXPECT_TRUE(same_on_gpu([dim](const Tensors& x) { return cumprod(x[0], dim); }, {near_one}, 4));
    }
  }
}

TEST(CudaScan, ReorderAndEinsumRunOnTheGpu) {
  EMBER_REQUIRE_GPU();
  Tensor x = random_tensor({4, 5, 6}, DType::f32);
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return flip(v[0], {0, 2}); }, {x}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return flip(v[0].transpose(0, 2), {1}); }, {x}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return roll(v[0], {2, -3}, {0, 2}); }, {x}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return roll(v[0], 7); }, {x}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return repeat_interleave(v[0], 2, 1); }, {x}));
  EXPECT_TRUE(same_on_gpu(
      [](const Tensors& v) { return repeat_interleave(v[0], from_vector<int64_t>({1, 0, 2, 3}).to(v[0].device()), 0); },
      {x}));
  Tensor q = random_tensor({2, 3, 5, 8}, DType::f32), k = random_tensor({2, 3, 6, 8}, DType::f32);
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return einsum("bhqd,bhkd->bhqk", v); }, {q, k}, 10));
  EXPECT_TRUE(same_on_gpu([](const Tensors& v) { return einsum("ii->i", {v[0]}); }, {random_tensor({4, 4}, DType::f32)}));
}

}  // namespace
}  // namespace ember::testing
