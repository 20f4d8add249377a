// Samplers: sequential order, seeded random orders (reproducible, different per
// epoch, with and without replacement), and BatchSampler's grouping.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>

#include "support/test_support.h"

namespace ember::data {
namespace {

std::vector<int64_t> iota(int64_t n, int64_t start = 0) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), start);
  return values;
}

bool is_permutation_of_range(std::vector<int64_t> values, int64_t n) {
  std::sort(values.begin(), values.end());
  return values == iota(n);
}

TEST(Sampler, SequentialIsZeroToNMinusOneEveryEpoch) {
  SequentialSampler sampler(5);
  EXPECT_EQ(sampler.size(), 5);
  EXPECT_EQ(sampler.indices(), iota(5));
  sampler.set_epoch(3);
  EXPECT_EQ(sampler.indices(), iota(5));
  EXPECT_TRUE(SequentialSampler(0).indices().empty());
}

TEST(Sampler, RandomPermutationIsAPermutationAndDependsOnSeedAndStream) {
  std::vector<int64_t> a = random_permutation(100, 7, 0);
  EXPECT_TRUE(is_permutation_of_range(a, 100));
  EXPECT_EQ(a, random_permutation(100, 7, 0));
  EXPECT_NE(a, random_permutation(100, 8, 0));
  EXPECT_NE(a, random_permutation(100, 7, 1));
  EXPECT_NE(a, iota(100));
  EXPECT_EQ(random_permutation(1, 7), std::vector<int64_t>{0});
  EXPECT_TRUE(random_permutation(0, 7).empty());
}

TEST(Sampler, RandomPermutationIsUniformOverPositions) {
  // Each value lands in each position about equally often: over 3000 seeds of
  // a permutation of 3, each of the 9 (value, position) cells expects 1000.
  int counts[3][3] = {};
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::vector<int64_t> p = random_permutation(3, seed);
    for (int position = 0; position < 3; ++position) ++counts[p[size_t(position)]][position];
  }
  for (auto& row : counts)
    for (int count : row) EXPECT_NEAR(count, 1000, 120);
}

TEST(Sampler, RandomSamplerIsReproducibleBySeedAndReshufflesPerEpoch) {
  RandomSampler sampler(50, {.seed = 42});
  RandomSampler same(50, {.seed = 42});
  RandomSampler other(50, {.seed = 43});
  std::vector<int64_t> epoch0 = sampler.indices();
  EXPECT_TRUE(is_permutation_of_range(epoch0, 50));
  EXPECT_EQ(epoch0, same.indices());
  EXPECT_NE(epoch0, other.indices());
  sampler.set_epoch(1);
  std::vector<int64_t> epoch1 = sampler.indices();
  EXPECT_TRUE(is_permutation_of_range(epoch1, 50));
  EXPECT_NE(epoch0, epoch1);
  // The order of epoch e depends on e only, not on the epochs visited before.
  same.set_epoch(5);
  same.set_epoch(1);
  EXPECT_EQ(same.indices(), epoch1);
  sampler.set_epoch(0);
  EXPECT_EQ(sampler.indices(), epoch0);
}

TEST(Sampler, RandomSamplerSeedsFromTheGenerator) {
  Generator first(123), second(123), third(124);
  RandomSampler a(20, {}, &first), b(20, {}, &second), c(20, {}, &third);
  EXPECT_EQ(a.seed(), b.seed());
  EXPECT_EQ(a.indices(), b.indices());
  EXPECT_NE(a.indices(), c.indices());
  // The next sampler from the same generator gets the next seed.
  RandomSampler d(20, {}, &first);
  EXPECT_NE(a.seed(), d.seed());
}

TEST(Sampler, RandomSamplerWithAnotherSeedFollowsThatSeed) {
  // What the Accelerator does at prepare: every rank takes rank 0's seed.
  RandomSampler rank0(30, {.seed = 7}), rank1(30, {.seed = 8});
  ASSERT_NE(rank0.indices(), rank1.indices());
  rank1.set_seed(*rank0.seed());
  EXPECT_EQ(rank1.seed(), 7u);
  for (int64_t epoch : {0, 1, 4}) {
    rank0.set_epoch(epoch);
    rank1.set_epoch(epoch);
    EXPECT_EQ(rank1.indices(), rank0.indices()) << "epoch " << epoch;
  }
}

TEST(Sampler, RandomSamplerNumSamplesWithoutReplacementChainsPermutations) {
  // As PyTorch: num_samples // n whole permutations, then part of another.
  RandomSampler sampler(4, {.num_samples = 10, .seed = 1});
  std::vector<int64_t> order = sampler.indices();
  ASSERT_EQ(order.size(), 10u);
  EXPECT_EQ(sampler.size(), 10);
  EXPECT_TRUE(is_permutation_of_range({order.begin(), order.begin() + 4}, 4));
  EXPECT_TRUE(is_permutation_of_range({order.begin() + 4, order.begin() + 8}, 4));
  std::set<int64_t> tail(order.begin() + 8, order.end());
  EXPECT_EQ(tail.size(), 2u);
  RandomSampler fewer(10, {.num_samples = 3, .seed = 1});
  std::vector<int64_t> three = fewer.indices();
  EXPECT_EQ(three.size(), 3u);
  EXPECT_EQ(std::set<int64_t>(three.begin(), three.end()).size(), 3u);
}

TEST(Sampler, RandomSamplerWithReplacementRepeatsIndices) {
  RandomSampler sampler(10, {.replacement = true, .num_samples = 1000, .seed = 9});
  std::vector<int64_t> order = sampler.indices();
  ASSERT_EQ(order.size(), 1000u);
  std::vector<int> counts(10, 0);
  for (int64_t index : order) {
    ASSERT_GE(index, 0);
    ASSERT_LT(index, 10);
    ++counts[size_t(index)];
  }
  for (int count : counts) EXPECT_NEAR(count, 100, 40);  // repeats: far more than once each
  EXPECT_EQ(order, RandomSampler(10, {.replacement = true, .num_samples = 1000, .seed = 9}).indices());
  sampler.set_epoch(1);
  EXPECT_NE(sampler.indices(), order);
  // Replacement without num_samples draws the dataset size.
  EXPECT_EQ(RandomSampler(7, {.replacement = true, .seed = 2}).indices().size(), 7u);
}

TEST(Sampler, RandomSamplerRejectsBadOptions) {
  EXPECT_THROW(RandomSampler(-1, {.seed = 1}), Error);
  EXPECT_THROW(RandomSampler(5, {.num_samples = -2, .seed = 1}), Error);
  EXPECT_THROW(RandomSampler(0, {.num_samples = 3, .seed = 1}), Error);
  // Zero samples made every epoch empty without a word; torch refuses it too.
  EXPECT_EMBER_ERROR(RandomSampler(5, {.num_samples = 0, .seed = 1}), "num_samples must be positive or -1");
  EXPECT_EQ(RandomSampler(0, {.seed = 1}).size(), 0);  // an empty dataset's sampler still is one
}

TEST(Sampler, SubsetRandomSamplerPermutesTheGivenIndices) {
  SubsetRandomSampler sampler({10, 20, 30, 40}, 5);
  std::vector<int64_t> order = sampler.indices();
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(order, SubsetRandomSampler({10, 20, 30, 40}, 5).indices());
}

std::vector<std::vector<int64_t>> batches_of(int64_t n, int64_t batch_size, bool drop_last) {
  BatchSampler sampler(std::make_shared<SequentialSampler>(n), {.batch_size = batch_size, .drop_last = drop_last});
  auto batches = sampler.batches();
  EXPECT_EQ(int64_t(batches.size()), sampler.size());
  return batches;
}

TEST(Sampler, BatchSamplerGroupsAndDropsTheLastPartialBatch) {
  using Batches = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(batches_of(7, 3, false), (Batches{{0, 1, 2}, {3, 4, 5}, {6}}));
  EXPECT_EQ(batches_of(7, 3, true), (Batches{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(batches_of(6, 3, true), (Batches{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(batches_of(2, 3, true), Batches{});
  EXPECT_EQ(batches_of(2, 3, false), (Batches{{0, 1}}));
  EXPECT_EQ(batches_of(0, 3, false), Batches{});
  EXPECT_THROW(BatchSampler(std::make_shared<SequentialSampler>(3), {.batch_size = 0}), Error);
}

TEST(Sampler, BatchSamplerSaysItsBatchSizeAndDropLast) {
  BatchSampler sampler(std::make_shared<SequentialSampler>(3), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(sampler.batch_size(), 4);
  EXPECT_TRUE(sampler.drop_last());
  // A custom batch sampler has no one batch size.
  class Custom : public BatchSampler {
   public:
    int64_t size() const override { return 1; }
    std::vector<std::vector<int64_t>> batches() const override { return {{0, 1}}; }
  };
  Custom custom;
  EXPECT_EQ(custom.batch_size(), 0);
  EXPECT_FALSE(custom.drop_last());
}

TEST(Sampler, BatchSamplerForwardsTheEpoch) {
  auto random = std::make_shared<RandomSampler>(12, RandomSamplerOptions{.seed = 3});
  BatchSampler sampler(random, {.batch_size = 5});
  auto epoch0 = sampler.batches();
  sampler.set_epoch(1);
  EXPECT_EQ(random->epoch(), 1);
  auto epoch1 = sampler.batches();
  EXPECT_NE(epoch0, epoch1);
  ASSERT_EQ(epoch1.size(), 3u);
  EXPECT_EQ(epoch1[2].size(), 2u);
}

// PyTorch: len(DataLoader(ds, batch_size=sys.maxsize)) is 1. The batch count
// was (samples + batch_size - 1) / batch_size, which overflowed: 0 batches
// (then "made 1 batches but its size() says 0"), or a negative count for a
// sampler of INT64_MAX samples. Mutation caught: BatchSampler::size() back to
// (samples + batch_size - 1) / batch_size -> size() is 0 and the loop throws.
TEST(Sampler, BatchCountsNearInt64MaxDoNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  BatchSampler one_batch(std::make_shared<SequentialSampler>(10), {.batch_size = kMax});
  EXPECT_EQ(one_batch.size(), 1);
  EXPECT_EQ(one_batch.batches(), (std::vector<std::vector<int64_t>>{iota(10)}));
  auto many = std::make_shared<RandomSampler>(10, RandomSamplerOptions{.num_samples = kMax, .seed = 1});
  EXPECT_EQ(BatchSampler(many, {.batch_size = 5}).size(), kMax / 5 + 1);
  EXPECT_EQ(BatchSampler(many, {.batch_size = 1}).size(), kMax);
  EXPECT_EQ(BatchSampler(many, {.batch_size = 2, .drop_last = true}).size(), kMax / 2);
  // The distributed sampler's share, rounded up the same way.
  EXPECT_EQ(DistributedSampler(kMax, 2, 0).size(), kMax / 2 + 1);
  EXPECT_EQ(DistributedSampler(kMax, kMax, 0).size(), 1);
}

}  // namespace
}  // namespace ember::data
