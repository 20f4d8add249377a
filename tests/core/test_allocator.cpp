// The CPU caching allocator: counters, reuse, and no system allocations in a
// steady-state loop of ops. The registry of allocators per device.
#include "support/test_support.h"

#include <cstdlib>
#include <cstring>

namespace ember::testing {
namespace {

bool caching() {
  const char* mode = std::getenv("EMBER_ALLOCATOR");
  return !(mode && std::strcmp(mode, "system") == 0);
}

// EMBER_ALLOCATOR took anything but the exact "system" for the caching
// allocator ("System", "malloc": a sanitizer run kept caching without a
// word). The choice is made once per process, so a fresh one decides here.
// Mutation caught: caching_requested without its check.
TEST(Allocator, AnUnknownAllocatorNameIsRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("EMBER_ALLOCATOR", "malloc", 1);
        try {
          (void)zeros({4});
        } catch (const Error& error) {
          std::fprintf(stderr, "%s\n", error.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "EMBER_ALLOCATOR='malloc' is not an allocator \\(use system or caching");
}

TEST(Allocator, CountsAllocatedAndPeak) {
  int64_t before = memory_allocated();
  reset_peak_memory_stats();
  {
    Tensor t = empty({1000}, {.dtype = DType::f64});
    EXPECT_GE(memory_allocated() - before, 8000);
    EXPECT_GE(max_memory_allocated() - before, 8000);
  }
  EXPECT_EQ(memory_allocated(), before);
  EXPECT_GE(max_memory_allocated() - before, 8000);
  reset_peak_memory_stats();
  EXPECT_EQ(max_memory_allocated(), memory_allocated());
}

TEST(Allocator, SteadyStateLoopAllocatesNothingFromTheSystem) {
  if (!caching()) GTEST_SKIP() << "EMBER_ALLOCATOR=system: the cache is bypassed on purpose";
  Tensor a = random_tensor({256, 300}, DType::f32), b = random_tensor({300}, DType::f32);
  auto step = [&] {
    Tensor c = a * b + 1.0;
    c += a;
    return (c - b).to(DType::bf16).to(DType::f32);
  };
  step();  // warm-up fills the cache with every size the loop needs
  int64_t system_before = memory_stats().system_allocations, reserved_before = memory_reserved();
  for (int i = 0; i < 50; ++i) step();
  EXPECT_EQ(memory_stats().system_allocations, system_before);
  EXPECT_EQ(memory_reserved(), reserved_before);
}

TEST(Allocator, EmptyCacheReleasesCachedBlocks) {
  if (!caching()) GTEST_SKIP() << "EMBER_ALLOCATOR=system: nothing is cached";
  { Tensor t = empty({1 << 20}); }
  EXPECT_GT(memory_reserved(), memory_allocated());
  empty_cache();
  EXPECT_EQ(memory_reserved(), memory_allocated());
}

TEST(Allocator, BlocksAreAlignedForVectorLoads) {
  for (int64_t n : {1, 3, 100, 5000, 1 << 18}) {
    Tensor t = empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % kAllocationAlignment, 0u) << n;
  }
}

// Hands out host memory and counts, standing in for a GPU's allocator.
class CountingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    stats_.allocated += int64_t(nbytes);
    return std::malloc(nbytes);
  }
  void deallocate(void* ptr, size_t nbytes) override {
    stats_.allocated -= int64_t(nbytes);
    std::free(ptr);
  }
  MemoryStats stats() const override { return stats_; }
  void reset_peak() override {}
  void empty_cache() override {}

 private:
  MemoryStats stats_;
};

TEST(AllocatorRegistry, EachGpuHasItsOwnAllocator) {
  // The last index ember supports: no machine has that GPU, so no real allocator is replaced.
  const Device device(DeviceType::cuda, kMaxDevicesPerType - 1);
  CountingAllocator counting;
  set_allocator(device, &counting);
  {
    Tensor t = empty({10}, {.dtype = DType::f32, .device = device});
    EXPECT_EQ(memory_allocated(device), 40);
    EXPECT_EMBER_ERROR(memory_allocated(Device("cuda:62")), "no allocator for cuda:62");  // another GPU's slot
  }
  EXPECT_EQ(memory_allocated(device), 0);
  set_allocator(device, nullptr);
  EXPECT_EMBER_ERROR(memory_allocated(device), "allocator: no allocator for cuda:63");
}

TEST(AllocatorRegistry, MissingGpuAndBadIndexAreErrors) {
  if (!cuda::is_available()) EXPECT_EMBER_ERROR(empty({2}, {.device = Device("cuda:0")}), "no allocator for cuda:0");
  EXPECT_EMBER_ERROR(memory_allocated(Device("cuda:64")), "cuda:64 is beyond the 64 devices");
  CountingAllocator counting;
  EXPECT_EMBER_ERROR(set_allocator(kCPU, &counting), "set_allocator: the CPU allocator is built in");
}

}  // namespace
}  // namespace ember::testing
