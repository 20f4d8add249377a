// DistributedSampler against torch's: the ranks' shares cover the dataset
// exactly (padding repeats the first indices, drop_last drops the tail), each
// rank strides the same order, epochs reshuffle identically on every rank,
// and DataLoader takes it as its sampler.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace ember::data {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), int64_t(0));
  return values;
}

std::vector<std::vector<int64_t>> shares(int64_t size, int64_t replicas, DistributedSamplerOptions options,
                                         int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(size, replicas, rank, options);
    sampler.set_epoch(epoch);
    out.push_back(sampler.indices());
    EXPECT_EQ(int64_t(out.back().size()), sampler.size());
  }
  return out;
}

// Rank r's i-th index is position i * replicas + r of the epoch order.
std::vector<int64_t> interleave(const std::vector<std::vector<int64_t>>& per_rank) {
  std::vector<int64_t> order;
  for (size_t i = 0; i < per_rank[0].size(); ++i)
    for (const auto& share : per_rank) order.push_back(share[i]);
  return order;
}

TEST(DistributedSampler, WithoutShuffleRanksStrideThePaddedRange) {
  // torch: DistributedSampler(range(10), num_replicas=3, rank=r, shuffle=False)
  auto per_rank = shares(10, 3, {.shuffle = false});
  EXPECT_EQ(per_rank[0], (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(per_rank[1], (std::vector<int64_t>{1, 4, 7, 0}));  // padded with index 0
  EXPECT_EQ(per_rank[2], (std::vector<int64_t>{2, 5, 8, 1}));
  DistributedSampler sampler(10, 3, 0, {.shuffle = false});
  EXPECT_EQ(sampler.size(), 4);
  EXPECT_EQ(sampler.total_size(), 12);
}

TEST(DistributedSampler, DropLastLeavesTheTailOut) {
  auto per_rank = shares(10, 3, {.shuffle = false, .drop_last = true});
  EXPECT_EQ(per_rank[0], (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(per_rank[1], (std::vector<int64_t>{1, 4, 7}));
  EXPECT_EQ(per_rank[2], (std::vector<int64_t>{2, 5, 8}));
  // Shuffled: 9 distinct indices, one left out.
  std::vector<int64_t> order = interleave(shares(10, 3, {.seed = 5, .drop_last = true}));
  std::sort(order.begin(), order.end());
  EXPECT_EQ(std::unique(order.begin(), order.end()), order.end());
  EXPECT_EQ(order.size(), 9u);
}

TEST(DistributedSampler, UnionOverRanksIsTheWholeDatasetPlusPadding) {
  for (int64_t replicas : {1, 2, 3, 4, 7}) {
    for (int64_t size : {0, 1, 5, 12, 13}) {
      std::vector<int64_t> order = interleave(shares(size, replicas, {.seed = 11}));
      ASSERT_EQ(int64_t(order.size()) % replicas, 0);
      // The epoch order is one permutation of the dataset followed by padding
      // that repeats its beginning.
      size_t head_size = std::min(size_t(size), order.size());
      std::vector<int64_t> head(order.begin(), order.begin() + ptrdiff_t(head_size));
      std::vector<int64_t> sorted = head;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_EQ(sorted, iota(size)) << "size " << size << " replicas " << replicas;
      for (size_t i = head.size(); i < order.size(); ++i) EXPECT_EQ(order[i], head[i % head.size()]);
    }
  }
  // More replicas than samples: the padding cycles through the dataset.
  EXPECT_EQ(interleave(shares(2, 5, {.shuffle = false})), (std::vector<int64_t>{0, 1, 0, 1, 0}));
}

TEST(DistributedSampler, EpochsReshuffleTheSameWayOnEveryRank) {
  auto epoch0 = shares(100, 4, {.seed = 3}, 0);
  auto epoch1 = shares(100, 4, {.seed = 3}, 1);
  EXPECT_NE(interleave(epoch0), interleave(epoch1));
  EXPECT_NE(interleave(epoch0), iota(100));
  // Every rank computes the same order by itself: a rebuilt sampler on any
  // rank agrees, and a different seed gives a different order.
  EXPECT_EQ(shares(100, 4, {.seed = 3}, 1), epoch1);
  EXPECT_NE(shares(100, 4, {.seed = 4}, 1), epoch1);
  // The order is the data layer's permutation for (seed, epoch): the one a
  // RandomSampler with the same seed visits in that epoch.
  RandomSampler random(100, {.seed = 3});
  random.set_epoch(1);
  EXPECT_EQ(interleave(epoch1), random.indices());
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), Error);
  EXPECT_THROW(DistributedSampler(10, 2, 2), Error);
  EXPECT_THROW(DistributedSampler(10, 2, -1), Error);
  EXPECT_THROW(DistributedSampler(-1, 2, 0), Error);
}

TEST(DistributedSampler, DataLoaderBatchesEachRanksShareAndReshufflesPerEpoch) {
  Tensor inputs = arange(0, 10).to(DType::f32).reshape({10, 1});
  Tensor targets = arange(0, 10);
  TensorDataset dataset(inputs, targets);
  std::vector<std::vector<int64_t>> seen(2);
  std::vector<std::vector<int64_t>> first_epoch(2);
  for (int64_t rank = 0; rank < 2; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(dataset.size(), 2, rank, DistributedSamplerOptions{.seed = 9});
    DataLoader loader(dataset, {.batch_size = 2, .sampler = sampler});
    EXPECT_EQ(loader.size(), 3);  // 5 samples per rank
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> order;
      for (auto& [x, y] : loader) {
        std::vector<int64_t> batch = y.to_vector<int64_t>();
        order.insert(order.end(), batch.begin(), batch.end());
      }
      (epoch == 0 ? first_epoch : seen)[size_t(rank)] = order;
    }
    EXPECT_NE(first_epoch[size_t(rank)], seen[size_t(rank)]);  // DataLoader called set_epoch(1)
  }
  std::vector<int64_t> all = first_epoch[0];
  all.insert(all.end(), first_epoch[1].begin(), first_epoch[1].end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, iota(10));
}

}  // namespace
}  // namespace ember::data
