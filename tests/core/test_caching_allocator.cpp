// The CUDA caching allocator's policy (kernels/cuda/caching_allocator.h) on a
// fake device: no GPU needed. Hand cases check each rule of Note [CUDA caching
// allocator] with exact addresses and counters; a random sequence is checked
// against a naive model of the live blocks and segments.
#include "support/test_support.h"

#include <map>
#include <thread>

#include "kernels/cuda/caching_allocator.h"

namespace ember::testing {
namespace {

using cuda::CachingAllocator;
using cuda::StreamId;

constexpr size_t KiB = 1024, MiB = 1024 * KiB, GiB = 1024 * MiB;

// A device address space: segments are handed out back to back from a base,
// so segments that touch must still never merge. Refuses a reserve that would
// take more than `capacity` bytes in all; throws when told to fail otherwise.
class FakeDeviceMemory final : public cuda::DeviceMemory {
 public:
  explicit FakeDeviceMemory(size_t capacity = 64 * GiB) : capacity_(capacity) {}

  void* reserve(size_t nbytes) override {
    EMBER_CHECK(!broken, "fake device: broken");
    if (in_use + nbytes > capacity_) {
      ++refusals;
      return nullptr;
    }
    uintptr_t address = next_address_;
    next_address_ += nbytes;
    segments[address] = nbytes;
    in_use += nbytes;
    reserves.push_back(nbytes);
    return reinterpret_cast<void*>(address);
  }

  void release(void* ptr) override {
    auto found = segments.find(reinterpret_cast<uintptr_t>(ptr));
    if (found == segments.end()) {
      ADD_FAILURE() << "release of " << ptr << ", which is not a reserved segment";
      return;
    }
    in_use -= found->second;
    releases.push_back(found->second);
    segments.erase(found);
  }

  static constexpr uintptr_t kBase = uintptr_t(1) << 40;
  std::map<uintptr_t, size_t> segments;  // address -> size of each segment reserved now
  size_t in_use = 0;
  std::vector<size_t> reserves, releases;
  int refusals = 0;
  bool broken = false;

 private:
  const size_t capacity_;
  uintptr_t next_address_ = kBase;
};

uintptr_t address(void* ptr) { return reinterpret_cast<uintptr_t>(ptr); }
void* at(uintptr_t address) { return reinterpret_cast<void*>(address); }

void expect_stats(const CachingAllocator& cache, int64_t allocated, int64_t reserved, int64_t peak,
                  int64_t system_allocations) {
  MemoryStats stats = cache.stats();
  EXPECT_EQ(stats.allocated, allocated);
  EXPECT_EQ(stats.reserved, reserved);
  EXPECT_EQ(stats.peak_allocated, peak);
  EXPECT_EQ(stats.system_allocations, system_allocations);
}

std::string out_of_memory_message(CachingAllocator& cache, size_t nbytes) {
  try {
    cache.allocate(nbytes, 0);
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(CachingAllocator, RoundsToMultiplesOf512Bytes) {
  EXPECT_EQ(cuda::round_size(1), 512u);
  EXPECT_EQ(cuda::round_size(512), 512u);
  EXPECT_EQ(cuda::round_size(513), 1024u);
  EXPECT_EQ(cuda::round_size(1000 * KiB + 1), 1000 * KiB + 512);
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* ptr = cache.allocate(1, 0);
  expect_stats(cache, 512, 2 * MiB, 512, 1);
  cache.deallocate(ptr);
  expect_stats(cache, 0, 2 * MiB, 512, 1);
}

TEST(CachingAllocator, SegmentSizeDependsOnThePool) {
  EXPECT_EQ(cuda::segment_size(512), 2 * MiB);
  EXPECT_EQ(cuda::segment_size(1 * MiB), 2 * MiB);
  EXPECT_EQ(cuda::segment_size(1 * MiB + 512), 20 * MiB);
  EXPECT_EQ(cuda::segment_size(10 * MiB - 512), 20 * MiB);
  EXPECT_EQ(cuda::segment_size(10 * MiB), 10 * MiB);
  EXPECT_EQ(cuda::segment_size(10 * MiB + 512), 12 * MiB);
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  cache.allocate(1 * MiB, 0);
  cache.allocate(1 * MiB + 1, 0);
  cache.allocate(25 * MiB, 0);
  EXPECT_EQ(device.reserves, (std::vector<size_t>{2 * MiB, 20 * MiB, 26 * MiB}));
}

TEST(CachingAllocator, SmallRequestsNeverComeFromTheLargePool) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  cache.allocate(1536 * KiB, 0);  // 18.5 MiB of its 20 MiB segment stay free, in the large pool
  void* small = cache.allocate(4 * KiB, 0);
  EXPECT_EQ(device.reserves, (std::vector<size_t>{20 * MiB, 2 * MiB}));
  EXPECT_EQ(address(small), FakeDeviceMemory::kBase + 20 * MiB);
  expect_stats(cache, 1536 * KiB + 4 * KiB, 22 * MiB, 1536 * KiB + 4 * KiB, 2);
}

TEST(CachingAllocator, ReusesAFreedBlockOfTheSameSize) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* first = cache.allocate(4000, 0);
  expect_stats(cache, 4096, 2 * MiB, 4096, 1);
  cache.deallocate(first);
  expect_stats(cache, 0, 2 * MiB, 4096, 1);
  void* second = cache.allocate(4096, 0);
  EXPECT_EQ(second, first);
  expect_stats(cache, 4096, 2 * MiB, 4096, 1);
  EXPECT_EQ(device.reserves.size(), 1u);
}

TEST(CachingAllocator, TakesTheSmallestFreeBlockThatFits) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  const uintptr_t base = FakeDeviceMemory::kBase;
  // [a 8 KiB][512][c 4 KiB][512][rest]: freeing a and c leaves three free
  // blocks that cannot merge, of 8 KiB, 4 KiB and the rest of the segment.
  void* a = cache.allocate(8 * KiB, 0);
  cache.allocate(512, 0);
  void* c = cache.allocate(4 * KiB, 0);
  cache.allocate(512, 0);
  EXPECT_EQ(address(c), base + 8 * KiB + 512);
  cache.deallocate(a);
  cache.deallocate(c);
  expect_stats(cache, 1024, 2 * MiB, 13 * KiB, 1);
  EXPECT_EQ(cache.allocate(3 * KiB, 0), c);      // c fits best; its last 1 KiB stays free
  EXPECT_EQ(cache.allocate(5 * KiB, 0), a);      // the 1 KiB left of c is too small, a is next
  EXPECT_EQ(cache.allocate(1 * KiB, 0), at(base + 8 * KiB + 512 + 3 * KiB));  // c's remainder
  EXPECT_EQ(cache.allocate(3 * KiB, 0), at(base + 5 * KiB));                  // a's remainder
  expect_stats(cache, 13 * KiB, 2 * MiB, 13 * KiB, 1);
}

TEST(CachingAllocator, SplitsOnlyWhenTheRemainderIsWorthKeeping) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  // Small pool: a remainder of 512 bytes is kept.
  void* kilobyte = cache.allocate(1 * KiB, 0);
  cache.allocate(512, 0);  // keeps the freed 1 KiB block from merging with the rest
  cache.deallocate(kilobyte);
  EXPECT_EQ(cache.allocate(512, 0), kilobyte);
  EXPECT_EQ(cache.allocate(512, 0), at(address(kilobyte) + 512));
  expect_stats(cache, 1536, 2 * MiB, 1536, 1);
  // Large pool: a remainder of more than 1 MiB is kept, one of exactly 1 MiB is not.
  void* split = cache.allocate(11 * MiB - 512, 0);  // 12 MiB segment, 1 MiB + 512 left
  EXPECT_EQ(cache.allocate(1 * MiB + 512, 0), at(address(split) + 11 * MiB - 512));
  expect_stats(cache, 1536 + 12 * MiB, 14 * MiB, 1536 + 12 * MiB, 2);
  cache.allocate(11 * MiB, 0);  // 12 MiB segment, 1 MiB left: counted with the block
  expect_stats(cache, 1536 + 24 * MiB, 26 * MiB, 1536 + 24 * MiB, 3);
}

TEST(CachingAllocator, RemainderOfALargeSegmentServesTheNextRequest) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* first = cache.allocate(1536 * KiB, 0);
  void* second = cache.allocate(2 * MiB, 0);
  void* third = cache.allocate(9 * MiB, 0);
  EXPECT_EQ(address(second), address(first) + 1536 * KiB);
  EXPECT_EQ(address(third), address(second) + 2 * MiB);
  expect_stats(cache, 12 * MiB + 512 * KiB, 20 * MiB, 12 * MiB + 512 * KiB, 1);
}

TEST(CachingAllocator, FreedBlockMergesWithBothNeighbours) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* a = cache.allocate(4 * KiB, 0);
  void* b = cache.allocate(4 * KiB, 0);
  void* c = cache.allocate(4 * KiB, 0);
  cache.deallocate(a);
  cache.deallocate(c);  // merges with the free rest of the segment
  cache.empty_cache();  // b still lives in the segment: nothing goes back
  EXPECT_TRUE(device.releases.empty());
  expect_stats(cache, 4 * KiB, 2 * MiB, 12 * KiB, 1);
  cache.deallocate(b);  // a, b and c + rest become the whole segment again
  EXPECT_EQ(cache.allocate(1 * MiB, 0), a);  // the largest small request fits at the start
  EXPECT_EQ(device.reserves.size(), 1u);
}

TEST(CachingAllocator, WholeFreeSegmentsGoBackOnEmptyCache) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* a = cache.allocate(4 * KiB, 0);
  void* b = cache.allocate(4 * KiB, 0);
  void* large = cache.allocate(12 * MiB, 0);
  cache.deallocate(a);
  cache.deallocate(b);  // merges with a before it and the rest after it
  cache.deallocate(large);
  expect_stats(cache, 0, 14 * MiB, 12 * MiB + 8 * KiB, 2);
  cache.empty_cache();
  EXPECT_EQ(device.releases, (std::vector<size_t>{2 * MiB, 12 * MiB}));
  EXPECT_TRUE(device.segments.empty());
  expect_stats(cache, 0, 0, 12 * MiB + 8 * KiB, 2);
}

TEST(CachingAllocator, SegmentsThatTouchDoNotMerge) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* first = cache.allocate(1 * MiB, 0);
  cache.allocate(1 * MiB, 0);                      // fills the first 2 MiB segment
  void* second_segment = cache.allocate(1 * MiB, 0);  // the next segment, adjacent in the fake
  EXPECT_EQ(address(second_segment), address(first) + 2 * MiB);
  cache.deallocate(second_segment);
  cache.empty_cache();
  EXPECT_EQ(device.releases, (std::vector<size_t>{2 * MiB}));
  expect_stats(cache, 2 * MiB, 2 * MiB, 3 * MiB, 2);
}

TEST(CachingAllocator, BlocksAreReusedOnlyOnTheirStream) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  const StreamId stream_a = 9, stream_b = 7;  // b sorts first, so a lookup for b lands on a's blocks
  void* on_a = cache.allocate(4 * KiB, stream_a);
  cache.deallocate(on_a);
  void* on_b = cache.allocate(4 * KiB, stream_b);
  EXPECT_NE(on_b, on_a);
  EXPECT_EQ(device.reserves.size(), 2u);  // stream a's cached segment is not lent to stream b
  EXPECT_EQ(cache.allocate(4 * KiB, stream_a), on_a);
  expect_stats(cache, 8 * KiB, 4 * MiB, 8 * KiB, 2);
}

TEST(CachingAllocator, PeakFollowsAllocationsUntilReset) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* a = cache.allocate(100 * KiB, 0);
  void* b = cache.allocate(200 * KiB, 0);
  cache.deallocate(a);
  expect_stats(cache, 200 * KiB, 2 * MiB, 300 * KiB, 1);
  cache.reset_peak();
  expect_stats(cache, 200 * KiB, 2 * MiB, 200 * KiB, 1);
  cache.deallocate(b);
  expect_stats(cache, 0, 2 * MiB, 200 * KiB, 1);
}

TEST(CachingAllocator, OutOfMemoryReturnsTheCacheAndRetries) {
  FakeDeviceMemory device(21 * MiB);
  CachingAllocator cache(device, 0);
  cache.deallocate(cache.allocate(4 * KiB, 0));  // a cached, whole 2 MiB segment
  void* large = cache.allocate(1536 * KiB, 0);   // 2 + 20 MiB do not fit in 21 MiB
  EXPECT_NE(large, nullptr);
  EXPECT_EQ(device.refusals, 1);
  EXPECT_EQ(device.releases, (std::vector<size_t>{2 * MiB}));
  expect_stats(cache, 1536 * KiB, 20 * MiB, 1536 * KiB, 2);
}

TEST(CachingAllocator, OutOfMemoryErrorSaysWhatWasAskedAndWhereMemoryIs) {
  FakeDeviceMemory device(20 * MiB);
  CachingAllocator cache(device, 3);
  void* large = cache.allocate(1536 * KiB, 0);
  // The 20 MiB segment is split, so the retry has nothing to return.
  EXPECT_EQ(out_of_memory_message(cache, 4000),
            "CUDA out of memory: tried to allocate 3.91 KiB on cuda:3; 1.50 MiB allocated, 20.00 MiB reserved, "
            "18.50 MiB free in cache");
  EXPECT_EQ(device.refusals, 2);
  EXPECT_EQ(out_of_memory_message(cache, 100),
            "CUDA out of memory: tried to allocate 100 bytes on cuda:3; 1.50 MiB allocated, 20.00 MiB reserved, "
            "18.50 MiB free in cache");
  expect_stats(cache, 1536 * KiB, 20 * MiB, 1536 * KiB, 1);  // the failures changed nothing
  cache.deallocate(large);
  EXPECT_NE(cache.allocate(4 * KiB, 0), nullptr);  // the retry now returns the free 20 MiB segment
  EXPECT_EQ(device.releases, (std::vector<size_t>{20 * MiB}));
}

TEST(CachingAllocator, OutOfMemoryOnAnEmptyDevice) {
  FakeDeviceMemory device(4 * GiB);
  CachingAllocator cache(device, 0);
  EXPECT_EQ(out_of_memory_message(cache, 5 * GiB),
            "CUDA out of memory: tried to allocate 5.00 GiB on cuda:0; 0 bytes allocated, 0 bytes reserved, "
            "0 bytes free in cache");
}

TEST(CachingAllocator, DeviceErrorsOtherThanOutOfMemoryPassThrough) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  device.broken = true;
  EXPECT_EMBER_ERROR(cache.allocate(4 * KiB, 0), "fake device: broken");
  expect_stats(cache, 0, 0, 0, 0);
  device.broken = false;
  EXPECT_NE(cache.allocate(4 * KiB, 0), nullptr);
}

TEST(CachingAllocator, ZeroBytesGetNullAndTouchNothing) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  EXPECT_EQ(cache.allocate(0, 0), nullptr);
  cache.deallocate(nullptr);
  expect_stats(cache, 0, 0, 0, 0);
  EXPECT_TRUE(device.reserves.empty());
}

TEST(CachingAllocator, FreeingAPointerItDidNotAllocateIsAnInternalError) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  void* ptr = cache.allocate(4 * KiB, 0);
  EXPECT_EMBER_ERROR(cache.deallocate(at(address(ptr) + 512)), "was not allocated by it");
  cache.deallocate(ptr);
  EXPECT_EMBER_ERROR(cache.deallocate(ptr), "was not allocated by it");  // twice
}

// The model: the live blocks the allocator handed out (address -> block size)
// and the segments the device lent. Every live block lies inside one reserved
// segment, no two overlap, and the counters add up.
void check_against_model(const CachingAllocator& cache, const FakeDeviceMemory& device,
                         const std::map<uintptr_t, size_t>& live, int64_t peak) {
  int64_t allocated = 0;
  uintptr_t end_of_previous = 0;
  for (const auto& [start, block_size] : live) {
    ASSERT_GE(start, end_of_previous) << "live blocks overlap";
    end_of_previous = start + block_size;
    auto segment = device.segments.upper_bound(start);
    ASSERT_NE(segment, device.segments.begin()) << "block below every segment";
    --segment;
    ASSERT_LE(start + block_size, segment->first + segment->second) << "block outside its segment";
    allocated += int64_t(block_size);
  }
  MemoryStats stats = cache.stats();
  EXPECT_EQ(stats.allocated, allocated);
  EXPECT_EQ(stats.reserved, int64_t(device.in_use));
  EXPECT_EQ(stats.peak_allocated, peak);
  EXPECT_EQ(stats.system_allocations, int64_t(device.reserves.size()));
}

TEST(CachingAllocator, RandomSequencesMatchTheModel) {
  for (uint32_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(seed);
    std::mt19937 generator(seed);
    FakeDeviceMemory device(96 * MiB);  // tight enough that some requests run out of memory
    CachingAllocator cache(device, 0);
    std::map<uintptr_t, size_t> live;
    int64_t peak = 0, out_of_memory = 0;
    for (int step = 0; step < 3000; ++step) {
      int action = int(generator() % 10);
      if (action < 5 || live.empty()) {
        // Mostly small tensors, some medium and some large ones.
        size_t kind = generator() % 8;
        size_t nbytes = kind < 5 ? generator() % (1 * MiB) + 1 : kind < 7 ? generator() % (9 * MiB) + 1 : generator() % (30 * MiB) + 1;
        StreamId stream = generator() % 3;
        int64_t before = cache.stats().allocated;
        void* ptr = nullptr;
        try {
          ptr = cache.allocate(nbytes, stream);
        } catch (const Error& error) {
          EXPECT_TRUE(std::string(error.what()).starts_with("CUDA out of memory: tried to allocate ")) << error.what();
          ++out_of_memory;
          continue;
        }
        size_t block_size = size_t(cache.stats().allocated - before);
        size_t rounded = cuda::round_size(nbytes);
        EXPECT_EQ(address(ptr) % cuda::kMinBlockSize, 0u);
        if (rounded <= cuda::kSmallRequestLimit) EXPECT_EQ(block_size, rounded);
        else EXPECT_TRUE(block_size >= rounded && block_size <= rounded + cuda::kSmallRequestLimit) << block_size;
        live[address(ptr)] = block_size;
        peak = std::max(peak, cache.stats().allocated);
      } else if (action < 9) {
        auto victim = live.begin();
        std::advance(victim, generator() % live.size());
        cache.deallocate(at(victim->first));
        live.erase(victim);
      } else {
        cache.empty_cache();
      }
      check_against_model(cache, device, live, peak);
      if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(out_of_memory, 0);  // the run did go through the out-of-memory path
    for (const auto& [start, block_size] : live) cache.deallocate(at(start));
    cache.empty_cache();
    expect_stats(cache, 0, 0, peak, int64_t(device.reserves.size()));
    EXPECT_TRUE(device.segments.empty());
    EXPECT_EQ(device.in_use, 0u);
  }
}

TEST(CachingAllocator, ThreadsShareOneAllocator) {
  FakeDeviceMemory device;
  CachingAllocator cache(device, 0);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < 4; ++thread) {
    threads.emplace_back([&cache, thread] {
      std::vector<void*> blocks;
      for (int step = 0; step < 500; ++step) {
        blocks.push_back(cache.allocate(size_t(step % 7 + 1) * 3 * KiB, StreamId(thread % 2)));
        if (step % 3 == 2) {
          cache.deallocate(blocks.front());
          blocks.erase(blocks.begin());
        }
      }
      for (void* ptr : blocks) cache.deallocate(ptr);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(cache.stats().allocated, 0);
  cache.empty_cache();
  EXPECT_TRUE(device.segments.empty());
}

}  // namespace
}  // namespace ember::testing
