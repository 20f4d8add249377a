// A user's op with its own kernels and a gradient (README.md, "Extending
// ember"): an Op in the dispatch table, a CPU kernel, an entry point and a
// custom Function. And what the dispatch table says when an op has no kernel
// for a device, or none for a dtype. These ops are declared here, not in
// tests/core: test_core's op table requires a case for every op it can list.
#include "support/test_support.h"

namespace ember::testing {
namespace {

using V = const std::vector<Tensor>&;

// y = x^3 over dense memory.
Op<void(const void* x, void* y, int64_t n)> cube_op("test_cube");

template <class T>
void cube_cpu(const void* x_data, void* y_data, int64_t n) {
  const T* x = static_cast<const T*>(x_data);
  T* y = static_cast<T*>(y_data);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i];
}

struct Cube : autograd::Function<Cube> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    Tensor dense = x.contiguous();
    Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
    if (y.numel() > 0) cube_op(x.device().type, x.dtype(), dense.data_ptr(), y.data_ptr(), y.numel());
    return y;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
    Tensor x = ctx.saved_tensors()[0];
    return {grads[0] * x * x * 3.0};
  }
};

Tensor cube(const Tensor& x) {
  static const bool registered = (register_for<float, double>(cube_op, DeviceType::cpu,
                                                              [](auto tag) { return &cube_cpu<decltype(tag)>; }),
                                  true);
  static_cast<void>(registered);
  return Cube::apply(x);
}

TEST(CustomOp, MatchesTheCompositeOnEveryLayout) {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Layout& layout : layouts_of(random_tensor({4, 6}, dtype)))
      EXPECT_TRUE(all_close(cube(layout.tensor), layout.tensor * layout.tensor * layout.tensor))
          << dtype_name(dtype) << " " << layout.name;
  EXPECT_EQ(cube(zeros({0, 3})).shape(), (Shape{0, 3}));
}

TEST(CustomOp, GradientPassesGradcheck) {
  auto result = autograd::gradcheck([](V x) { return cube(x[0].t()); }, {randn({3, 4})});
  EXPECT_TRUE(result.ok) << result.report;
}

TEST(CustomOp, ADtypeWithoutAKernelNamesTheOpDeviceDtypeAndTheKernelsThere) {
  EXPECT_EMBER_ERROR(cube(ones({2}, {.dtype = DType::bf16})),
                     "test_cube: no CPU kernel for dtype bfloat16 (its CPU kernels take float32, float64)");
  EXPECT_EMBER_ERROR(cube_op.lookup(DeviceType::cuda, DType::f32),
                     "test_cube: no CUDA kernel (for any dtype; called with float32); it has CPU kernels only");
}

void gpu_only_kernel() {}
Op<void()> gpu_only_op("test_gpu_only");
Op<void()> kernel_less_op("test_kernel_less");

TEST(CustomOp, AnOpWithoutKernelsOnADeviceSaysSo) {
  gpu_only_op.set(DeviceType::cuda, DType::f32, &gpu_only_kernel);
  EXPECT_EMBER_ERROR(gpu_only_op.lookup(DeviceType::cpu, DType::f32),
                     "test_gpu_only: no CPU kernel (for any dtype; called with float32); it has CUDA kernels only");
  EXPECT_EMBER_ERROR(gpu_only_op.lookup(DeviceType::cuda, DType::f64),
                     "test_gpu_only: no CUDA kernel for dtype float64 (its CUDA kernels take float32)");
  EXPECT_EMBER_ERROR(kernel_less_op.lookup(DeviceType::cpu, DType::i64),
                     "test_kernel_less: no CPU kernel (for any dtype; called with int64); this build has no kernel "
                     "for it");
}

// A kernel that runs out of its own scratch memory (a sort's entries over a
// 2^31-element row did) raised std::bad_alloc, which is no ember::Error.
// Mutation caught: the catch in Op::operator() removed -> std::bad_alloc.
void scratch_hungry_kernel() { throw std::bad_alloc(); }
Op<void()> scratch_hungry_op("test_scratch_hungry");

TEST(CustomOp, AKernelOutOfScratchMemoryRaisesAnErrorNamingTheOp) {
  scratch_hungry_op.set(DeviceType::cpu, DType::f32, &scratch_hungry_kernel);
  EXPECT_EMBER_ERROR(scratch_hungry_op(DeviceType::cpu, DType::f32),
                     "test_scratch_hungry: out of memory for the scratch space of its CPU float32 kernel");
}

}  // namespace
}  // namespace ember::testing
