// The CUDA runtime: moves between the host and the GPU (every dtype, every
// layout, blocking or not), copy_ across devices, gradients moved back,
// streams and events, and strict device copies. Label `cuda`: skips without a GPU.
#include "cuda_compare.h"

namespace ember::testing {
namespace {

TEST(CudaRuntime, RoundTripKeepsEveryDtypeAndLayoutBitForBit) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kAllDTypes) {
    for (const Layout& layout : layouts_of(random_tensor({3, 5}, dtype))) {
      Tensor on_gpu = layout.tensor.to(kGpu);
      EXPECT_TRUE(on_gpu.device().is_cuda());
      EXPECT_TRUE(on_gpu.is_contiguous());
      EXPECT_TRUE(all_close(on_gpu.to(kCPU), layout.tensor, 0, 0)) << dtype_name(dtype) << " " << layout.name;
    }
  }
}

TEST(CudaRuntime, NonBlockingCopiesAreOrderedOnTheStream) {
  EMBER_REQUIRE_GPU();
  Tensor host = random_tensor({1 << 20}, DType::f32);
  Tensor on_gpu = host.to(kGpu, /*non_blocking=*/true);
  host.fill_(0);  // the copy staged the values: overwriting the source is safe at once
  Tensor back = (on_gpu * 2).to(kCPU);
  EXPECT_TRUE(all_close(back, reference([&] { return on_gpu.to(kCPU) * 2; }), 0, 0));
  EXPECT_NE(sum(abs(back)).item<double>(), 0.0);
}

TEST(CudaRuntime, EmptyTensorsMoveWithoutTouchingTheDevice) {
  EMBER_REQUIRE_GPU();
  Tensor empty_gpu = zeros({0, 3}).to(kGpu);
  EXPECT_EQ(empty_gpu.shape(), Shape({0, 3}));
  EXPECT_EQ(empty_gpu.to(kCPU).numel(), 0);
}

TEST(CudaRuntime, CopyAcrossDevicesConvertsAndBroadcasts) {
  EMBER_REQUIRE_GPU();
  Tensor target = zeros({4, 3}, {.dtype = DType::bf16, .device = kGpu});
  Tensor row = random_tensor({3}, DType::f32);
  target.copy_(row);
  EXPECT_TRUE(all_close(target.to(kCPU), expand(row.to(DType::bf16), {4, 3}), 0, 0));
  Tensor host = zeros({4, 3});
  host.copy_(target);
  EXPECT_TRUE(all_close(host, target.to(kCPU).to(DType::f32), 0, 0));
}

TEST(CudaRuntime, GradientsMoveBackToTheInputsDevice) {
  EMBER_REQUIRE_GPU();
  Tensor x = random_tensor({5}, DType::f32).requires_grad_(true);
  Tensor y = (x.to(kGpu) * 3).to(kCPU);
  sum(y).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().device().is_cpu());
  EXPECT_TRUE(all_close(x.grad(), full({5}, 3.0), 0, 0));
}

TEST(CudaRuntime, StreamsAndEventsOrderWork) {
  EMBER_REQUIRE_GPU();
  Stream side = Stream::create(kGpu);
  EXPECT_FALSE(side == current_stream(kGpu));
  Tensor a = random_tensor({1 << 16}, DType::f32).to(kGpu);
  Event ready(kGpu);
  ready.record();
  Tensor b;
  {
    StreamGuard guard(side);
    EXPECT_TRUE(current_stream(kGpu) == side);
    side.wait(ready);
    b = a * 2;
  }
  EXPECT_FALSE(current_stream(kGpu) == side);
  Event done(kGpu, /*timing=*/true);
  done.record(side);
  current_stream(kGpu).wait(done);
  done.synchronize();
  EXPECT_TRUE(done.query());
  EXPECT_TRUE(side.query());
  EXPECT_TRUE(all_close(b.to(kCPU), reference([&] { return a.to(kCPU) * 2; }), 0, 0));
}

TEST(CudaRuntime, TimingEventsMeasureElapsedTime) {
  EMBER_REQUIRE_GPU();
  Event start(kGpu, true), end(kGpu, true);
  start.record();
  Tensor x = random_tensor({1 << 20}, DType::f32).to(kGpu);
  for (int i = 0; i < 10; ++i) x = x * 1.0001;
  end.record();
  end.synchronize();
  EXPECT_GE(start.elapsed_ms(end), 0.0);
}

TEST(CudaRuntime, StrictModeRefusesImplicitCopiesButNotExplicitOnes) {
  EMBER_REQUIRE_GPU();
  Tensor x = full({2}, 3.0, {.device = kGpu});
  set_strict_device_copies(true);
  EXPECT_EMBER_ERROR(sum(x).item<double>(), "item: implicit copy from cuda:0");
  EXPECT_EMBER_ERROR(x.to_vector<float>(), "to_vector: implicit copy");
  Tensor explicit_copy = x.to(kCPU);  // asked for: allowed
  set_strict_device_copies(false);
  EXPECT_EQ(explicit_copy.to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST(CudaRuntime, StrictModeDefersIndexErrorsToTheNextSynchronisation) {
  EMBER_REQUIRE_GPU();
  Tensor table = random_tensor({5, 3}, DType::f32).to(kGpu);
  Tensor bad = from_vector<int64_t>({1, 7}).to(kGpu);
  EXPECT_EMBER_ERROR(embedding(bad, table), "index 7 is out of bounds for dimension with size 5");
  set_strict_device_copies(true);
  Tensor rows = embedding(bad, table);  // no wait for the kernel: nothing raised yet
  EXPECT_EMBER_ERROR(synchronize(kGpu), "found by a GPU kernel queued earlier");
  synchronize(kGpu);  // raised once, then gone
  set_strict_device_copies(false);
  EXPECT_EQ(rows.shape(), Shape({2, 3}));
}

TEST(CudaRuntime, BadDevicesAreErrorsNamingThem) {
  EMBER_REQUIRE_GPU();
  const int missing = cuda::device_count();
  EXPECT_EMBER_ERROR(zeros({2}).to(Device(DeviceType::cuda, missing)), "cuda:");
  EXPECT_EMBER_ERROR(cuda::set_device(missing), "no device cuda:");
  EXPECT_EMBER_ERROR(add(zeros({2}), zeros({2}).to(kGpu)), "cuda");
}

}  // namespace
}  // namespace ember::testing
