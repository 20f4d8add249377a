// The primitive cache (core/primitive_cache.h) that keeps oneDNN's primitives
// and cuDNN's convolution plans, and the convolution geometry key
// (add_conv2d_geometry, core/ops/conv_kernels.h) that both backends' caches
// use: no GPU needed. A key that missed a field would hand one problem
// another's primitive, a silent wrong result, so every field is checked.
#include "support/test_support.h"

#include <functional>
#include <thread>

#include "core/ops/conv_kernels.h"
#include "core/primitive_cache.h"

namespace ember::testing {
namespace {

PrimitiveKey key_of(std::initializer_list<int64_t> values) {
  PrimitiveKey key;
  for (int64_t value : values) key.add(value);
  return key;
}

TEST(PrimitiveCache, KeysAreEqualOnlyForTheSameValuesInTheSameOrder) {
  EXPECT_TRUE(key_of({1, 2, 3}) == key_of({1, 2, 3}));
  EXPECT_EQ(key_of({1, 2, 3}).hash(), key_of({1, 2, 3}).hash());
  EXPECT_FALSE(key_of({1, 2, 3}) == key_of({3, 2, 1}));
  EXPECT_FALSE(key_of({1, 2}) == key_of({1, 2, 0}));  // a trailing zero still counts
  EXPECT_FALSE(key_of({}) == key_of({0}));
  EXPECT_FALSE(key_of({-1}) == key_of({int64_t(1) << 40}));
}

// An entry remembers the key it was made for; `made` counts the makes.
struct Entry {
  int64_t made_for;
};

class PrimitiveCacheTest : public ::testing::Test {
 protected:
  // One lookup site, so every call shares the cache's per-thread memo.
  std::shared_ptr<Entry> get(PrimitiveCache<Entry>& cache, int64_t key) {
    return cache.get(key_of({key}), [&] {
      ++made;
      return std::make_shared<Entry>(Entry{key});
    });
  }
  int made = 0;
};

TEST_F(PrimitiveCacheTest, MakesAnEntryOnceAndReturnsItAgain) {
  PrimitiveCache<Entry> cache(4);
  std::shared_ptr<Entry> first = get(cache, 7);
  EXPECT_EQ(first->made_for, 7);
  EXPECT_EQ(get(cache, 7), first);
  std::shared_ptr<Entry> other = get(cache, 8);
  EXPECT_EQ(other->made_for, 8);
  EXPECT_EQ(get(cache, 7), first);  // found in the map, not the memo of the last lookup
  EXPECT_EQ(made, 2);
}

TEST_F(PrimitiveCacheTest, EvictsTheLeastRecentlyUsedEntry) {
  PrimitiveCache<Entry> cache(2);
  std::shared_ptr<Entry> a = get(cache, 1);
  get(cache, 2);
  EXPECT_EQ(get(cache, 1), a);  // 1 is now the most recently used
  get(cache, 3);                // evicts 2
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(cache, 1), a);
  EXPECT_EQ(made, 3);
  EXPECT_EQ(get(cache, 2)->made_for, 2);  // made again
  EXPECT_EQ(made, 4);
  EXPECT_EQ(get(cache, 1), a);  // 2 evicted 3, the least recently used
  EXPECT_EQ(made, 4);
  get(cache, 3);
  EXPECT_EQ(made, 5);
}

TEST_F(PrimitiveCacheTest, AnEvictedEntryStaysAliveForItsHolders) {
  PrimitiveCache<Entry> cache(1);
  std::shared_ptr<Entry> held = get(cache, 1);
  get(cache, 2);
  EXPECT_EQ(held->made_for, 1);
  EXPECT_NE(get(cache, 1), held);  // a new entry: the old one left the cache
}

TEST(PrimitiveCache, AFailedMakeLeavesNothingBehind) {
  PrimitiveCache<Entry> cache(2);
  EXPECT_THROW(cache.get(key_of({1}), []() -> std::shared_ptr<Entry> { throw Error("no algorithm"); }), Error);
  std::shared_ptr<Entry> made = cache.get(key_of({1}), [] { return std::make_shared<Entry>(Entry{1}); });
  EXPECT_EQ(made->made_for, 1);
}

// Threads that race on a few keys all get the one entry of each key.
TEST(PrimitiveCache, ConcurrentCallersShareOneEntryPerKey) {
  constexpr int kThreads = 8, kKeys = 4, kRounds = 500;
  PrimitiveCache<Entry> cache(kKeys);
  std::vector<std::vector<Entry*>> seen(kThreads, std::vector<Entry*>(kKeys * kRounds));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round)
        for (int key = 0; key < kKeys; ++key) {
          const int64_t k = (key + t) % kKeys;
          seen[t][round * kKeys + key] = cache.get(key_of({k}), [&] { return std::make_shared<Entry>(Entry{k}); }).get();
        }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<Entry*> entry_of(kKeys, nullptr);
  for (int t = 0; t < kThreads; ++t)
    for (int round = 0; round < kRounds; ++round)
      for (int key = 0; key < kKeys; ++key) {
        const int64_t k = (key + t) % kKeys;
        Entry* entry = seen[t][round * kKeys + key];
        ASSERT_EQ(entry->made_for, k);
        if (entry_of[k] == nullptr) entry_of[k] = entry;
        EXPECT_EQ(entry, entry_of[k]) << "thread " << t << " round " << round << " key " << k;
      }
}

PrimitiveKey geometry_key(const Conv2dProblem& p) {
  PrimitiveKey key;
  add_conv2d_geometry(key, p);
  return key;
}

// Every geometry field changes the key; the data pointers do not.
TEST(PrimitiveCache, ConvolutionKeysTellEveryGeometryApart) {
  int data = 0;
  Conv2dProblem base{.batch = 2, .in_channels = 4, .out_channels = 6, .groups = 2, .in_size = {9, 11},
                     .out_size = {5, 6}, .kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {1, 1}};
  const std::vector<std::pair<const char*, std::function<void(Conv2dProblem&)>>> changes = {
      {"batch", [](Conv2dProblem& p) { p.batch = 3; }},
      {"in_channels", [](Conv2dProblem& p) { p.in_channels = 8; }},
      {"out_channels", [](Conv2dProblem& p) { p.out_channels = 4; }},
      {"groups", [](Conv2dProblem& p) { p.groups = 1; }},
      {"in height", [](Conv2dProblem& p) { p.in_size[0] = 10; }},
      {"in width", [](Conv2dProblem& p) { p.in_size[1] = 12; }},
      {"out height", [](Conv2dProblem& p) { p.out_size[0] = 4; }},
      {"out width", [](Conv2dProblem& p) { p.out_size[1] = 5; }},
      {"kernel height", [](Conv2dProblem& p) { p.kernel[0] = 2; }},
      {"kernel width", [](Conv2dProblem& p) { p.kernel[1] = 3; }},
      {"stride height", [](Conv2dProblem& p) { p.stride[0] = 1; }},
      {"stride width", [](Conv2dProblem& p) { p.stride[1] = 1; }},
      {"padding height", [](Conv2dProblem& p) { p.padding[0] = 0; }},
      {"padding width", [](Conv2dProblem& p) { p.padding[1] = 2; }},
      {"dilation height", [](Conv2dProblem& p) { p.dilation[0] = 2; }},
      {"dilation width", [](Conv2dProblem& p) { p.dilation[1] = 2; }},
      {"bias", [&](Conv2dProblem& p) { p.bias = &data; }},
  };
  for (const auto& [name, change] : changes) {
    Conv2dProblem changed = base;
    change(changed);
    EXPECT_FALSE(geometry_key(changed) == geometry_key(base)) << name;
  }
  // Swapping height and width is another geometry too.
  Conv2dProblem swapped = base;
  swapped.kernel = {2, 3};
  EXPECT_FALSE(geometry_key(swapped) == geometry_key(base));

  Conv2dProblem moved = base;
  moved.input = &data, moved.weight = &data, moved.out = &data;
  EXPECT_TRUE(geometry_key(moved) == geometry_key(base));
}

}  // namespace
}  // namespace ember::testing
