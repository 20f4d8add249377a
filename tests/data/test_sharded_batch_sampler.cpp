// ShardedBatchSampler against Accelerate's BatchSamplerShard: exact hand cases
// for both modes, and a sweep over shard counts, dataset and batch sizes and
// every option checking that the shards together are the inner epoch (each
// sample once, padding only at the last round's end, recycled from the
// epoch's start), that even_batches evens them out, and that size() is exact.
// Then custom batch samplers, errors, epochs, and a sharded DataLoader
// resuming mid-epoch.
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <numeric>
#include <set>

#include "support/test_support.h"

namespace ember::data {
namespace {

using Batches = std::vector<std::vector<int64_t>>;

struct Config {
  int64_t size = 0;
  int64_t batch_size = 1;
  int64_t shards = 1;
  bool split_batches = false;
  bool even_batches = true;
  bool drop_last = false;
  bool shuffle = false;
};

std::string describe(const Config& c) {
  return fmt::format("size {} batch_size {} shards {} split {} even {} drop_last {} shuffle {}", c.size, c.batch_size,
                     c.shards, c.split_batches, c.even_batches, c.drop_last, c.shuffle);
}

// A fresh inner batch sampler, as each rank builds its own.
std::shared_ptr<BatchSampler> make_inner(const Config& c) {
  std::shared_ptr<Sampler> sampler;
  if (c.shuffle)
    sampler = std::make_shared<RandomSampler>(c.size, RandomSamplerOptions{.seed = 1234});
  else
    sampler = std::make_shared<SequentialSampler>(c.size);
  return std::make_shared<BatchSampler>(sampler, BatchSamplerOptions{c.batch_size, c.drop_last});
}

std::vector<std::shared_ptr<ShardedBatchSampler>> make_shards(const Config& c) {
  std::vector<std::shared_ptr<ShardedBatchSampler>> shards;
  for (int64_t shard = 0; shard < c.shards; ++shard)
    shards.push_back(std::make_shared<ShardedBatchSampler>(
        make_inner(c), c.shards, shard,
        ShardingOptions{.split_batches = c.split_batches, .even_batches = c.even_batches}));
  return shards;
}

Batches shard_batches(const std::shared_ptr<BatchSampler>& inner, int64_t shards, int64_t shard,
                      ShardingOptions options = {}, int64_t epoch = 0) {
  ShardedBatchSampler sampler(inner, shards, shard, options);
  sampler.set_epoch(epoch);
  Batches batches = sampler.batches();
  EXPECT_EQ(sampler.size(), int64_t(batches.size()));
  return batches;
}

Batches sequential_shard(int64_t size, int64_t batch_size, int64_t shards, int64_t shard,
                         ShardingOptions options = {}) {
  auto inner =
      std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(size), BatchSamplerOptions{batch_size});
  return shard_batches(inner, shards, shard, options);
}

std::vector<int64_t> flatten(const Batches& batches) {
  std::vector<int64_t> flat;
  for (const auto& batch : batches) flat.insert(flat.end(), batch.begin(), batch.end());
  return flat;
}

// The shards' k-th batches in shard order, k = 0, 1, ...: the order the
// ranks' batches make together.
Batches interleave(const std::vector<Batches>& per_shard) {
  Batches order;
  for (size_t k = 0;; ++k) {
    bool any = false;
    for (const Batches& batches : per_shard)
      if (k < batches.size()) {
        order.push_back(batches[k]);
        any = true;
      }
    if (!any) return order;
  }
}

// Every property of one configuration's epoch, against the inner sampler's
// epoch as the oracle.
::testing::AssertionResult check_epoch(const Config& c, int64_t epoch = 0) {
  auto failure = [&] { return ::testing::AssertionFailure() << describe(c) << " epoch " << epoch << ": "; };
  std::shared_ptr<BatchSampler> oracle = make_inner(c);
  oracle->set_epoch(epoch);
  Batches inner = oracle->batches();

  std::vector<Batches> per_shard;
  std::set<int64_t> paddings;
  for (const auto& shard : make_shards(c)) {
    shard->set_epoch(epoch);
    per_shard.push_back(shard->batches());
    paddings.insert(shard->num_padded());
    // (d) size() is exact, known before the epoch is made.
    if (shard->size() != int64_t(per_shard.back().size()))
      return failure() << "shard " << shard->shard() << " size() " << shard->size() << " but "
                       << per_shard.back().size() << " batches";
  }
  if (paddings.size() != 1) return failure() << "the shards disagree on num_padded()";
  int64_t num_padded = *paddings.begin();
  if (!c.even_batches && num_padded != 0) return failure() << "padding without even_batches";

  // (c) Together, round by round, the shards hold the inner epoch in its order
  // (whole rounds only with drop_last), then num_padded samples recycled from
  // the epoch's start, cycling.
  int64_t per_shard_batch = c.split_batches ? c.batch_size / c.shards : c.batch_size;
  int64_t round_samples = c.shards * per_shard_batch;
  std::vector<int64_t> expected = flatten(inner);
  if (c.drop_last && !c.split_batches) expected.resize(expected.size() / size_t(round_samples) * size_t(round_samples));
  std::vector<int64_t> real = expected;
  for (int64_t i = 0; i < num_padded; ++i) expected.push_back(real[size_t(i) % real.size()]);
  Batches together = interleave(per_shard);
  if (flatten(together) != expected) return failure() << "the shards' batches together are not the epoch's order";
  if (c.even_batches && int64_t(expected.size()) % round_samples != 0)
    return failure() << "the last round is not complete: " << expected.size() << " samples";
  if (num_padded >= round_samples) return failure() << "a whole round of padding";

  // (a) Minus the padding, each sample of the epoch once.
  std::vector<int64_t> samples = flatten(together);
  samples.resize(samples.size() - size_t(num_padded));
  std::sort(samples.begin(), samples.end());
  std::vector<int64_t> sorted_real = real;
  std::sort(sorted_real.begin(), sorted_real.end());
  if (samples != sorted_real) return failure() << "the shards' samples are not the epoch's";
  if (!c.drop_last) {
    std::vector<int64_t> all(size_t(c.size));
    std::iota(all.begin(), all.end(), int64_t(0));
    if (samples != all) return failure() << "a sample is missing or repeated";
  }

  // (b) Full batches everywhere but the very last one without even_batches;
  // with even_batches (or whole rounds) the same number on every shard.
  for (size_t b = 0; b < together.size(); ++b) {
    bool is_last = b + 1 == together.size();
    int64_t size = int64_t(together[b].size());
    if (size != per_shard_batch && (c.even_batches || c.drop_last || !is_last || size == 0 || size > per_shard_batch))
      return failure() << "batch " << b << " of the rounds has " << size << " samples";
  }
  if (c.even_batches || c.drop_last)
    for (const Batches& batches : per_shard)
      if (batches.size() != per_shard[0].size()) return failure() << "shards with different numbers of batches";
  return ::testing::AssertionSuccess();
}

TEST(ShardedBatchSampler, RoundRobinAsAccelerate) {
  // accelerate: BatchSamplerShard(BatchSampler(range(24), batch_size=3, drop_last=False), 2, i)
  EXPECT_EQ(sequential_shard(24, 3, 2, 0), (Batches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(sequential_shard(24, 3, 2, 1), (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21, 22, 23}}));
  // 21 samples: the second shard's last batch recycles the epoch's first.
  EXPECT_EQ(sequential_shard(21, 3, 2, 1), (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {0, 1, 2}}));
  // 22: the short last batch is completed, then the next shard's batch follows.
  EXPECT_EQ(sequential_shard(22, 3, 2, 0).back(), (std::vector<int64_t>{18, 19, 20}));
  EXPECT_EQ(sequential_shard(22, 3, 2, 1).back(), (std::vector<int64_t>{21, 0, 1}));
  EXPECT_EQ(sequential_shard(20, 3, 2, 0).back(), (std::vector<int64_t>{18, 19, 0}));
  EXPECT_EQ(sequential_shard(20, 3, 2, 1).back(), (std::vector<int64_t>{1, 2, 3}));
  // Fewer samples than a round: the padding cycles through the epoch again.
  EXPECT_EQ(sequential_shard(3, 2, 4, 0), (Batches{{0, 1}}));
  EXPECT_EQ(sequential_shard(3, 2, 4, 1), (Batches{{2, 0}}));
  EXPECT_EQ(sequential_shard(3, 2, 4, 2), (Batches{{1, 2}}));
  EXPECT_EQ(sequential_shard(3, 2, 4, 3), (Batches{{0, 1}}));

  // Without even_batches: no padding, the last shards may get fewer batches.
  ShardingOptions uneven{.even_batches = false};
  EXPECT_EQ(sequential_shard(22, 3, 2, 0, uneven), (Batches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}, {18, 19, 20}}));
  EXPECT_EQ(sequential_shard(22, 3, 2, 1, uneven), (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}, {21}}));
  EXPECT_EQ(sequential_shard(20, 3, 2, 1, uneven), (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}));

  // drop_last on the inner sampler: whole rounds only.
  auto dropping = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(22),
                                                 BatchSamplerOptions{.batch_size = 3, .drop_last = true});
  EXPECT_EQ(shard_batches(dropping, 2, 0), (Batches{{0, 1, 2}, {6, 7, 8}, {12, 13, 14}}));
  EXPECT_EQ(shard_batches(dropping, 2, 1), (Batches{{3, 4, 5}, {9, 10, 11}, {15, 16, 17}}));
}

TEST(ShardedBatchSampler, SplitBatchesAsAccelerate) {
  ShardingOptions split{.split_batches = true};
  // accelerate: BatchSamplerShard(BatchSampler(range(24), batch_size=4), 2, i, split_batches=True)
  EXPECT_EQ(sequential_shard(24, 4, 2, 0, split), (Batches{{0, 1}, {4, 5}, {8, 9}, {12, 13}, {16, 17}, {20, 21}}));
  EXPECT_EQ(sequential_shard(24, 4, 2, 1, split), (Batches{{2, 3}, {6, 7}, {10, 11}, {14, 15}, {18, 19}, {22, 23}}));
  // 22 samples: the last inner batch [20, 21] is completed with [0, 1].
  EXPECT_EQ(sequential_shard(22, 4, 2, 0, split).back(), (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(sequential_shard(22, 4, 2, 1, split).back(), (std::vector<int64_t>{0, 1}));
  // 3 samples, batch 4: the one batch cycles through the epoch to fill up.
  EXPECT_EQ(sequential_shard(3, 4, 2, 1, split), (Batches{{2, 0}}));

  ShardingOptions uneven{.split_batches = true, .even_batches = false};
  EXPECT_EQ(sequential_shard(21, 4, 2, 0, uneven).back(), (std::vector<int64_t>{20}));
  EXPECT_EQ(sequential_shard(21, 4, 2, 1, uneven).size(), 5u);  // no part of the last batch
  EXPECT_EQ(sequential_shard(23, 6, 3, 1, uneven).back(), (std::vector<int64_t>{20, 21}));
  EXPECT_EQ(sequential_shard(23, 6, 3, 2, uneven).back(), (std::vector<int64_t>{22}));
}

TEST(ShardedBatchSampler, NumPaddedCountsTheRecycledSamplesOfAllShards) {
  auto inner = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(20), BatchSamplerOptions{3});
  ShardedBatchSampler sampler(inner, 2, 0);
  EXPECT_EQ(sampler.num_padded(), 0);  // no epoch made yet
  sampler.batches();
  EXPECT_EQ(sampler.num_padded(), 4);  // [18, 19] + [0, 1, 2, 3]
  auto divisible = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(24), BatchSamplerOptions{3});
  ShardedBatchSampler whole(divisible, 2, 1);
  whole.batches();
  EXPECT_EQ(whole.num_padded(), 0);
  ShardedBatchSampler split(inner, 3, 0, {.split_batches = true});  // batch 3 into 3 parts of 1
  split.batches();
  EXPECT_EQ(split.num_padded(), 1);  // [18, 19] + [0]
  ShardedBatchSampler uneven(inner, 2, 0, {.even_batches = false});
  uneven.batches();
  EXPECT_EQ(uneven.num_padded(), 0);
}

TEST(ShardedBatchSampler, EveryConfigurationCoversTheEpoch) {
  for (int64_t shards = 1; shards <= 4; ++shards)
    for (int64_t size = 0; size <= 40; ++size)
      for (int64_t batch_size = 1; batch_size <= 5; ++batch_size)
        for (bool split_batches : {false, true}) {
          if (split_batches && batch_size % shards != 0) continue;
          for (bool even_batches : {false, true})
            for (bool drop_last : {false, true})
              for (bool shuffle : {false, true}) {
                Config config{size, batch_size, shards, split_batches, even_batches, drop_last, shuffle};
                ASSERT_TRUE(check_epoch(config));
              }
        }
}

// Batches of the given sizes over 0, 1, 2, ...: a custom sampler (bucketing
// by length, say) whose batches do not share one size.
class FixedBatches : public BatchSampler {
 public:
  explicit FixedBatches(Batches batches, int64_t claimed_size = -1)
      : batches_(std::move(batches)), size_(claimed_size < 0 ? int64_t(batches_.size()) : claimed_size) {}
  int64_t size() const override { return size_; }
  std::vector<std::vector<int64_t>> batches() const override { return batches_; }
  void set_epoch(int64_t) override {}

 private:
  Batches batches_;
  int64_t size_;
};

TEST(ShardedBatchSampler, CustomBatchSamplerRecyclesWholeBatches) {
  auto custom = std::make_shared<FixedBatches>(Batches{{0}, {1, 2}, {3, 4, 5}, {6, 7}, {8}});
  EXPECT_EQ(shard_batches(custom, 2, 0), (Batches{{0}, {3, 4, 5}, {8}}));
  EXPECT_EQ(shard_batches(custom, 2, 1), (Batches{{1, 2}, {6, 7}, {0}}));
  EXPECT_EQ(shard_batches(custom, 3, 2), (Batches{{3, 4, 5}, {0}}));
  EXPECT_EQ(shard_batches(custom, 4, 0), (Batches{{0}, {8}}));
  EXPECT_EQ(shard_batches(custom, 4, 1), (Batches{{1, 2}, {0}}));
  EXPECT_EQ(shard_batches(custom, 4, 2), (Batches{{3, 4, 5}, {1, 2}}));
  EXPECT_EQ(shard_batches(custom, 4, 3), (Batches{{6, 7}, {3, 4, 5}}));
  ShardedBatchSampler padded(custom, 4, 3);
  padded.batches();
  EXPECT_EQ(padded.num_padded(), 6);  // [0] + [1, 2] + [3, 4, 5]

  ShardingOptions uneven{.even_batches = false};
  EXPECT_EQ(shard_batches(custom, 2, 0, uneven), (Batches{{0}, {3, 4, 5}, {8}}));
  EXPECT_EQ(shard_batches(custom, 2, 1, uneven), (Batches{{1, 2}, {6, 7}}));
  EXPECT_EQ(shard_batches(custom, 4, 3, uneven), (Batches{{6, 7}}));

  // Fewer batches than shards: the epoch's batches cycle.
  auto short_epoch = std::make_shared<FixedBatches>(Batches{{0, 1}, {2}});
  std::vector<Batches> per_shard;
  for (int64_t shard = 0; shard < 5; ++shard) per_shard.push_back(shard_batches(short_epoch, 5, shard));
  EXPECT_EQ(per_shard, (std::vector<Batches>{{{0, 1}}, {{2}}, {{0, 1}}, {{2}}, {{0, 1}}}));
  EXPECT_TRUE(shard_batches(std::make_shared<FixedBatches>(Batches{}), 3, 1).empty());
}

TEST(ShardedBatchSampler, RejectsWhatItCannotShard) {
  auto inner = std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(10), BatchSamplerOptions{3});
  EXPECT_EMBER_ERROR(ShardedBatchSampler(inner, 2, 0, {.split_batches = true}),
                     "batch size divisible by the number of shards, got batch size 3 for 2 shards");
  auto custom = std::make_shared<FixedBatches>(Batches{{0}, {1, 2}});
  EXPECT_EMBER_ERROR(ShardedBatchSampler(custom, 1, 0, {.split_batches = true}),
                     "split_batches needs a batch sampler with a batch size");
  EXPECT_EMBER_ERROR(ShardedBatchSampler(inner, 0, 0), "num_shards must be positive, got 0");
  EXPECT_EMBER_ERROR(ShardedBatchSampler(inner, 2, 2), "shard 2 is outside [0, 2)");
  EXPECT_EMBER_ERROR(ShardedBatchSampler(inner, 3, -1), "shard -1 is outside [0, 3)");
  EXPECT_EMBER_ERROR(ShardedBatchSampler(nullptr, 2, 0), "inner batch sampler is null");
  // An inner sampler whose size() is wrong would make every rank's size() wrong.
  auto lying = std::make_shared<FixedBatches>(Batches{{0}, {1}, {2}}, 4);
  EXPECT_EMBER_ERROR(ShardedBatchSampler(lying, 2, 0).batches(), "made 3 batches but its size() says 4");
}

TEST(ShardedBatchSampler, EpochsReshuffleIdenticallyOnEveryShard) {
  Config config{.size = 29, .batch_size = 3, .shards = 3, .shuffle = true};
  Batches first_epoch;
  for (int64_t epoch : {0, 1, 2, 7}) {
    ASSERT_TRUE(check_epoch(config, epoch));
    auto oracle = make_inner(config);
    oracle->set_epoch(epoch);
    if (epoch == 0)
      first_epoch = oracle->batches();
    else
      EXPECT_NE(oracle->batches(), first_epoch);
  }
  // set_epoch reaches the inner sampler.
  auto random = std::make_shared<RandomSampler>(10, RandomSamplerOptions{.seed = 3});
  ShardedBatchSampler sampler(std::make_shared<BatchSampler>(random, BatchSamplerOptions{2}), 2, 1);
  sampler.set_epoch(5);
  EXPECT_EQ(random->epoch(), 5);
}

TEST(ShardedBatchSampler, ShardsWithDifferentSeedsAgreeOnceSeededAlike) {
  // Each rank drew its own seed; the Accelerator makes them take rank 0's.
  std::vector<std::shared_ptr<RandomSampler>> samplers;
  std::vector<std::shared_ptr<ShardedBatchSampler>> shards;
  for (int64_t shard = 0; shard < 2; ++shard) {
    samplers.push_back(std::make_shared<RandomSampler>(16, RandomSamplerOptions{.seed = 100 + uint64_t(shard)}));
    shards.push_back(std::make_shared<ShardedBatchSampler>(
        std::make_shared<BatchSampler>(samplers.back(), BatchSamplerOptions{2}), 2, shard));
  }
  samplers[1]->set_seed(*samplers[0]->seed());
  std::vector<int64_t> together = flatten(interleave({shards[0]->batches(), shards[1]->batches()}));
  EXPECT_EQ(together, samplers[0]->indices());
}

// Example i has input [i] and target i; remembers which indices were read.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    {
      std::lock_guard lock(mutex_);
      read_.insert(index);
    }
    return {from_vector<float>({float(index)}), scalar_tensor(index, {.dtype = DType::i64}), {}};
  }
  std::set<int64_t> read() const {
    std::lock_guard lock(mutex_);
    return read_;
  }

 private:
  int64_t size_;
  mutable std::mutex mutex_;
  mutable std::set<int64_t> read_;
};

std::vector<std::vector<int64_t>> loader_targets(DataLoader& loader, int64_t stop_after = -1) {
  std::vector<std::vector<int64_t>> batches;
  for (auto& [inputs, targets] : loader) {
    batches.push_back(targets.to_vector<int64_t>());
    if (int64_t(batches.size()) == stop_after) break;
  }
  return batches;
}

// What Accelerator::prepare does to a loader on rank `shard` of 3.
void shard_loader(DataLoader& loader, int64_t shard) {
  loader.set_batch_sampler(std::make_shared<ShardedBatchSampler>(loader.batch_sampler(), 3, shard));
}

TEST(ShardedBatchSampler, ShardedDataLoaderResumesMidEpoch) {
  auto expected_epoch = [](int64_t epoch) {
    auto inner = std::make_shared<BatchSampler>(std::make_shared<RandomSampler>(23, RandomSamplerOptions{.seed = 8}),
                                                BatchSamplerOptions{2});
    return shard_batches(inner, 3, 1, {}, epoch);
  };
  Batches epoch1 = expected_epoch(1);
  for (int workers : {0, 2}) {
    SCOPED_TRACE(fmt::format("num_workers {}", workers));
    const DataLoaderOptions with_workers{.batch_size = 2, .shuffle = true, .num_workers = workers, .seed = 8};
    IndexDataset dataset(23);
    DataLoader loader(dataset, with_workers);
    shard_loader(loader, 1);
    EXPECT_EQ(loader.size(), 4);  // 12 batches of 2 (the last padded), 3 shards
    EXPECT_EQ(loader_targets(loader), expected_epoch(0));
    EXPECT_EQ(loader_targets(loader, 2), Batches(epoch1.begin(), epoch1.begin() + 2));
    DataLoaderState saved = loader.state();
    EXPECT_EQ(saved, (DataLoaderState{1, 2}));

    IndexDataset resumed_data(23);
    DataLoader resumed(resumed_data, with_workers);
    shard_loader(resumed, 1);
    resumed.set_state(saved);
    Batches rest = loader_targets(resumed);
    EXPECT_EQ(rest, Batches(epoch1.begin() + 2, epoch1.end()));
    std::vector<int64_t> rest_samples = flatten(rest);
    EXPECT_EQ(resumed_data.read(), std::set<int64_t>(rest_samples.begin(), rest_samples.end()));
    EXPECT_EQ(loader_targets(resumed), expected_epoch(2));
  }
}

// even_batches rounds the inner batch count up to whole rounds; done as
// (batches + shards - 1) / shards it overflowed for an inner sampler of
// INT64_MAX batches. Mutation caught: ShardedBatchSampler::size() back to
// (inner_batches + num_shards_ - 1) / num_shards_ -> a negative size.
TEST(ShardedBatchSampler, SizeNearInt64MaxDoesNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto huge = std::make_shared<FixedBatches>(Batches{{0}}, kMax);
  EXPECT_EQ(ShardedBatchSampler(huge, 2, 0).size(), kMax / 2 + 1);
  EXPECT_EQ(ShardedBatchSampler(huge, 2, 1, {.even_batches = false}).size(), kMax / 2);
  EXPECT_EQ(ShardedBatchSampler(huge, 1, 0).size(), kMax);
}

}  // namespace
}  // namespace ember::data
