// The CUDA sort, topk (kernels/cuda/sorting.cu) and multinomial
// (kernels/cuda/random.cu) kernels: every dtype and layout, ties and nans,
// rows longer than a shared-memory tile, sort and topk gradients, against the
// CPU's reference kernels exactly (values and indices: the order is total);
// multinomial's samples equal the CPU's for the same generator state. Skips
// without a GPU, except the coverage test.
#include <cmath>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

// Values and indices of a sort as one f64 tensor, to compare in one go.
Tensor joined(const ValuesIndices& s) { return cat({s.values.to(DType::f64).flatten(), s.indices.to(DType::f64).flatten()}); }

// A tensor with many ties and, for floats, nans and infinities.
Tensor tied(const Shape& shape, DType dtype) {
  Tensor t = random_tensor(shape, DType::i64, -3, 3).to(DType::f64);
  if (is_floating(dtype)) t = where(eq(t, 3), full_like(t, NAN), where(eq(t, -3), full_like(t, -INFINITY), t));
  return t.to(dtype);
}

TEST(CudaSorting, EveryCpuDtypeHasACudaKernel) {
  EXPECT_TRUE(cuda_registers_cpu_dtypes({"sort", "topk", "multinomial"}));
}

TEST(CudaSorting, SortAndTopkEqualTheCpu) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{9}, Shape{4, 7, 5}, Shape{3, 2500}, Shape{0, 4}}) {
      for (const Layout& layout : layouts_of(tied(shape, dtype))) {
        for (int dim = 0; dim < shape.ndim(); ++dim) {
          for (bool descending : {false, true}) {
            SCOPED_TRACE(fmt::format("{} {} {} dim {} descending {}", dtype, shape, layout.name, dim, descending));
            EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return joined(sort(x[0], dim, descending)); }, {layout.tensor}, 0));
            const int64_t k = std::min<int64_t>(shape[dim], 3);
            EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return joined(topk(x[0], k, dim, descending)); }, {layout.tensor}, 0));
          }
        }
      }
    }
  }
}

TEST(CudaSorting, GradientsEqualTheCpu) {
  EMBER_REQUIRE_GPU();
  Tensor x = random_tensor({6, 40}, DType::f32);
  EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& t) { return sort(t[0], 1, true).values; }, {x}));
  EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& t) { return topk(t[0].t(), 4, 0).values; }, {x}));
}

TEST(CudaMultinomial, SamplesEqualTheCpuForTheSameSeed) {
  EMBER_REQUIRE_GPU();
  Tensor weights = random_tensor({37, 50}, DType::f32, 0, 1) * gt(random_tensor({37, 50}, DType::f32, 0, 1), 0.3);
  for (bool replacement : {true, false}) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
      Generator cpu(9), gpu(9);
      Tensor w = weights.to(dtype);
      Tensor expected = multinomial(w, 5, replacement, &cpu);
      Tensor actual = multinomial(w.to(kGpu), 5, replacement, &gpu);
      ASSERT_TRUE(actual.device().is_cuda());
      EXPECT_EQ(actual.to(kCPU).to_vector<int64_t>(), expected.to_vector<int64_t>()) << dtype_name(dtype) << replacement;
      EXPECT_EQ(gpu.state().offset, cpu.state().offset);
    }
  }
  EXPECT_EMBER_ERROR(multinomial(from_vector<float>({1, -2}).to(kGpu), 1), "weight -2 at row 0, category 1");
}

}  // namespace
}  // namespace ember::testing
