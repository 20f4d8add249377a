// The CUDA caching allocator on a real GPU (ctest label `cuda`): cudaMalloc
// behind the policy that tests/core/test_caching_allocator.cpp checks on a
// fake device. Skips, saying why, without a CUDA build or a GPU.
#include "support/test_support.h"

namespace ember::testing {
namespace {

#define SKIP_WITHOUT_GPU()                                                                          \
  do {                                                                                              \
    if (!cuda::is_available()) GTEST_SKIP() << "no CUDA GPU on this machine (cudaGetDeviceCount found none)"; \
  } while (0)

TEST(CudaAllocator, CachesBlocksAndReturnsThemOnEmptyCache) {
  SKIP_WITHOUT_GPU();
  const Device gpu("cuda:0");
  empty_cache(gpu);
  MemoryStats before = memory_stats(gpu);
  {
    Tensor t = empty({1000}, {.dtype = DType::f32, .device = gpu});  // 4000 bytes: one 4 KiB block
    EXPECT_NE(t.data_ptr(), nullptr);
    EXPECT_EQ(memory_allocated(gpu) - before.allocated, 4096);
  }
  EXPECT_EQ(memory_allocated(gpu), before.allocated);
  EXPECT_GE(memory_reserved(gpu) - before.reserved, 2 << 20);  // the block's segment stays cached
  int64_t system_allocations = memory_stats(gpu).system_allocations;
  { Tensor again = empty({1000}, {.dtype = DType::f32, .device = gpu}); }
  EXPECT_EQ(memory_stats(gpu).system_allocations, system_allocations);  // served from the cache
  empty_cache(gpu);
  EXPECT_EQ(memory_reserved(gpu), before.reserved);
}

TEST(CudaAllocator, OutOfMemoryIsAnErrorAndTheDeviceStaysUsable) {
  SKIP_WITHOUT_GPU();
  const Device gpu("cuda:0");
  EXPECT_EMBER_ERROR(empty({int64_t(1) << 46}, {.dtype = DType::f32, .device = gpu}),
                     "CUDA out of memory: tried to allocate 262144.00 GiB on cuda:0; ");
  Tensor after = empty({1000}, {.dtype = DType::f32, .device = gpu});  // the failed cudaMalloc left no sticky error
  EXPECT_NE(after.data_ptr(), nullptr);
}

}  // namespace
}  // namespace ember::testing
