// DataLoader: batches and their order equal for every worker count, worker
// exceptions at their batch, early break and destruction mid-epoch, drop_last,
// seeded shuffles, the prefetch bound, resuming mid-epoch from state()
// without reading earlier batches again, batch hooks and replacing the batch
// sampler (what the Accelerator's prepare uses).
#include <ember/ember.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>

#include "support/test_support.h"

namespace ember::data {
namespace {

using ember::testing::all_close;
using namespace std::chrono_literals;

// Example i is (input [i, -i] as f32, target i as i64). Counts every read and
// how many get_batch calls run at once; can sleep per batch (a varying time,
// so workers finish out of order) and throw when it meets `poison`.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t size, bool slow = false, int64_t poison = -1)
      : size_(size), slow_(slow), poison_(poison) {}
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override {
    gets_.fetch_add(1);
    return {from_vector<float>({float(index), -float(index)}), scalar_tensor(index, {.dtype = DType::i64}), {}};
  }
  Example get_batch(const std::vector<int64_t>& indices) const override {
    int now = running_.fetch_add(1) + 1;
    for (int seen = max_running_.load(); now > seen && !max_running_.compare_exchange_weak(seen, now);) {
    }
    batches_started_.fetch_add(1);
    {
      std::lock_guard lock(mutex_);
      read_.insert(indices.begin(), indices.end());
    }
    if (slow_) std::this_thread::sleep_for(std::chrono::microseconds(200 + 700 * (indices[0] * 7919 % 5)));
    running_.fetch_sub(1);
    for (int64_t index : indices) EMBER_CHECK(index != poison_, "CountingDataset: poisoned index {}", index);
    return Dataset::get_batch(indices);
  }

  int64_t gets() const { return gets_.load(); }
  int64_t batches_started() const { return batches_started_.load(); }
  int max_running() const { return max_running_.load(); }
  std::set<int64_t> read() const {
    std::lock_guard lock(mutex_);
    return read_;
  }

 private:
  int64_t size_;
  bool slow_;
  int64_t poison_;
  mutable std::atomic<int64_t> gets_{0}, batches_started_{0};
  mutable std::atomic<int> running_{0}, max_running_{0};
  mutable std::mutex mutex_;
  mutable std::set<int64_t> read_;
};

// The targets of each batch of one epoch: they identify the examples.
std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (auto& [inputs, targets] : loader) {
    // The input rows belong to the targets: row b is [t_b, -t_b].
    std::vector<float> expected;
    for (int64_t t : targets.to_vector<int64_t>()) expected.insert(expected.end(), {float(t), -float(t)});
    EXPECT_EQ(inputs.to_vector<float>(), expected);
    batches.push_back(targets.to_vector<int64_t>());
  }
  return batches;
}

static_assert(!std::is_constructible_v<DataLoader, TensorDataset, DataLoaderOptions>,
              "a temporary dataset would dangle");

TEST(DataLoader, SequentialBatchesWithTheLastPartial) {
  CountingDataset dataset(10);
  DataLoader loader(dataset, {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  using Batches = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(epoch_targets(loader), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9}}));
  DataLoader dropping(dataset, {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(dropping.size(), 2);
  EXPECT_EQ(epoch_targets(dropping), (Batches{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  DataLoader whole(dataset, {.batch_size = 5, .drop_last = true});
  EXPECT_EQ(epoch_targets(whole).size(), 2u);
}

TEST(DataLoader, TensorDatasetBatchesHaveTheStackedShapes) {
  Tensor images = ember::testing::random_tensor({9, 1, 4, 4}, DType::f32);
  Tensor labels = arange(0, 9);
  TensorDataset dataset(images, labels);
  DataLoader loader(dataset, {.batch_size = 4, .shuffle = true, .seed = 3});
  int64_t seen = 0;
  for (auto& [inputs, targets] : loader) {
    EXPECT_EQ(inputs.shape(), (Shape{targets.size(0), 1, 4, 4}));
    EXPECT_TRUE(all_close(inputs, index_select(images, 0, targets)));
    seen += targets.size(0);
  }
  EXPECT_EQ(seen, 9);
}

TEST(DataLoader, SameBatchesInTheSameOrderWhateverTheWorkerCount) {
  CountingDataset dataset(53, /*slow=*/true);
  std::vector<std::vector<std::vector<int64_t>>> reference;
  for (int workers : {0, 1, 2, 4}) {
    DataLoader loader(dataset, {.batch_size = 5, .shuffle = true, .num_workers = workers, .seed = 11});
    std::vector<std::vector<std::vector<int64_t>>> epochs = {epoch_targets(loader), epoch_targets(loader)};
    ASSERT_EQ(epochs[0].size(), 11u);
    EXPECT_NE(epochs[0], epochs[1]);  // a new begin() reshuffles
    if (reference.empty()) reference = epochs;
    EXPECT_EQ(epochs, reference) << workers << " workers";
  }
}

TEST(DataLoader, ShuffleIsReproducibleBySeedAndFollowsRandomSampler) {
  CountingDataset dataset(20);
  DataLoader a(dataset, {.batch_size = 20, .shuffle = true, .seed = 5});
  DataLoader b(dataset, {.batch_size = 20, .shuffle = true, .seed = 5});
  DataLoader c(dataset, {.batch_size = 20, .shuffle = true, .seed = 6});
  auto first = epoch_targets(a);
  EXPECT_EQ(first, epoch_targets(b));
  EXPECT_NE(first, epoch_targets(c));
  RandomSampler sampler(20, {.seed = 5});
  EXPECT_EQ(first[0], sampler.indices());
  sampler.set_epoch(1);
  EXPECT_EQ(epoch_targets(a)[0], sampler.indices());
  EXPECT_EQ(a.state(), (DataLoaderState{2, 0}));
}

TEST(DataLoader, WorkerExceptionIsRethrownAtItsBatch) {
  for (int workers : {0, 1, 3}) {
    CountingDataset dataset(30, /*slow=*/false, /*poison=*/13);
    DataLoader loader(dataset, {.batch_size = 4, .num_workers = workers});
    int64_t batches = 0;
    try {
      for (auto& [inputs, targets] : loader) {
        EXPECT_EQ(targets.to_vector<int64_t>()[0], 4 * batches);
        ++batches;
      }
      ADD_FAILURE() << "no exception with " << workers << " workers";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("poisoned index 13"), std::string::npos) << e.what();
    }
    EXPECT_EQ(batches, 3) << workers << " workers";  // batch 3 holds 12..15
    // The state still names the failed batch, so it can be retried.
    EXPECT_EQ(loader.state(), (DataLoaderState{0, 3}));
  }
}

TEST(DataLoader, BreakingEarlyStopsTheWorkersAndTheNextBeginStartsANewEpoch) {
  CountingDataset dataset(400, /*slow=*/true);
  DataLoader loader(dataset, {.batch_size = 2, .shuffle = true, .num_workers = 4, .prefetch_factor = 2, .seed = 1});
  int64_t taken = 0;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.target.size(0), 2);
    if (++taken == 3) break;
  }
  // The iterators are gone, so the workers were joined: nothing more is read.
  int64_t started = dataset.batches_started();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(dataset.batches_started(), started);
  EXPECT_LE(started, 3 + 4 * 2);
  EXPECT_EQ(loader.state(), (DataLoaderState{0, 3}));
  auto next = epoch_targets(loader);
  EXPECT_EQ(next.size(), 200u);
  EXPECT_EQ(loader.state(), (DataLoaderState{2, 0}));
}

TEST(DataLoader, DestroyingTheLoaderOrANewBeginMidEpochIsSafe) {
  CountingDataset dataset(200, /*slow=*/true);
  DataLoader::Iterator survivor;
  {
    DataLoader loader(dataset, {.batch_size = 2, .num_workers = 3});
    survivor = loader.begin();
    DataLoader::Iterator first = loader.begin();  // stops the first iteration
    EXPECT_EQ(survivor, loader.end());
    EXPECT_THROW(*survivor, Error);
    ++first;
    EXPECT_EQ((*first).target.to_vector<int64_t>(), (std::vector<int64_t>{2, 3}));
    survivor = first;
  }
  // The loader is gone; its iteration was stopped and reads as ended.
  EXPECT_EQ(survivor, DataLoader::Iterator());
}

TEST(DataLoader, PrefetchBoundsTheBatchesInFlight) {
  CountingDataset dataset(120);
  const int workers = 2, factor = 3, capacity = workers * factor;
  DataLoader loader(dataset, {.batch_size = 2, .num_workers = workers, .prefetch_factor = factor});
  int64_t taken = 0;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.target.to_vector<int64_t>()[0], 2 * taken);
    ++taken;
    // Batches started but not handed out never exceed the capacity; given
    // time, the workers fill it.
    int64_t expected = std::min<int64_t>(60, taken + capacity);
    for (int wait = 0; wait < 200 && dataset.batches_started() < expected; ++wait) std::this_thread::sleep_for(1ms);
    EXPECT_EQ(dataset.batches_started(), expected) << "after " << taken << " batches";
    if (taken == 10) break;
  }
  EXPECT_LE(dataset.max_running(), workers);
}

TEST(DataLoader, ResumingFromStateReadsOnlyTheRemainingBatches) {
  CountingDataset reference_data(23);
  DataLoader reference(reference_data, {.batch_size = 3, .shuffle = true, .seed = 8});
  auto epoch0 = epoch_targets(reference), epoch1 = epoch_targets(reference), epoch2 = epoch_targets(reference);

  // An interrupted run: all of epoch 0, then 3 batches of epoch 1, then a checkpoint.
  CountingDataset interrupted_data(23);
  DataLoader interrupted(interrupted_data, {.batch_size = 3, .shuffle = true, .seed = 8});
  EXPECT_EQ(epoch_targets(interrupted), epoch0);
  DataLoaderState saved;
  int64_t taken = 0;
  for (auto& [inputs, targets] : interrupted) {
    EXPECT_EQ(targets.to_vector<int64_t>(), epoch1[size_t(taken)]);
    if (++taken == 3) {
      saved = interrupted.state();
      break;
    }
  }
  EXPECT_EQ(saved, (DataLoaderState{1, 3}));

  for (int workers : {0, 2}) {
    CountingDataset resumed_data(23);
    DataLoader resumed(resumed_data, {.batch_size = 3, .shuffle = true, .num_workers = workers, .seed = 8});
    resumed.set_state(saved);
    auto rest = epoch_targets(resumed);
    EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(epoch1.begin() + 3, epoch1.end()));
    // The first three batches of epoch 1 were never read.
    std::set<int64_t> expected_reads;
    for (const auto& batch : rest) expected_reads.insert(batch.begin(), batch.end());
    EXPECT_EQ(resumed_data.read(), expected_reads);
    EXPECT_EQ(resumed_data.batches_started(), int64_t(rest.size()));
    EXPECT_EQ(epoch_targets(resumed), epoch2);
  }
}

TEST(DataLoader, StateAtTheEndOfAnEpochPointsAtTheNext) {
  CountingDataset dataset(6);
  DataLoader loader(dataset, {.batch_size = 3});
  EXPECT_EQ(loader.state(), (DataLoaderState{0, 0}));
  std::vector<DataLoaderState> during;
  for (auto& batch : loader) {
    EXPECT_EQ(batch.input.size(0), 3);
    during.push_back(loader.state());
  }
  EXPECT_EQ(during, (std::vector<DataLoaderState>{{0, 1}, {1, 0}}));
  loader.set_state({4, 2});  // the whole epoch already handed out: epoch 5 is next
  EXPECT_EQ(loader.state(), (DataLoaderState{5, 0}));
  EXPECT_EMBER_ERROR(loader.set_state({0, 3}), "batch 3 is not a position in an epoch of 2 batches");
  EXPECT_EMBER_ERROR(loader.set_state({-1, 0}), "epoch -1");
}

TEST(DataLoader, CustomCollateSamplerAndBatchSampler) {
  CountingDataset dataset(8);
  // collate: per-example get, then the user's function.
  DataLoader summing(dataset, {.batch_size = 4, .collate = [](const std::vector<Example>& examples) {
                                 Example batch = default_collate(examples);
                                 batch.target = ember::sum(batch.target);
                                 return batch;
                               }});
  std::vector<int64_t> sums;
  for (auto& [inputs, targets] : summing) sums.push_back(targets.item<int64_t>());
  EXPECT_EQ(sums, (std::vector<int64_t>{6, 22}));
  EXPECT_EQ(dataset.gets(), 8);

  DataLoader subset(
      dataset, {.batch_size = 2, .sampler = std::make_shared<SubsetRandomSampler>(std::vector<int64_t>{1, 3, 5}, 4)});
  EXPECT_EQ(subset.size(), 2);
  std::set<int64_t> seen;
  for (const auto& batch : epoch_targets(subset)) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(seen, (std::set<int64_t>{1, 3, 5}));

  // A batch sampler of its own: batches of growing size.
  class GrowingBatches : public BatchSampler {
   public:
    int64_t size() const override { return 3; }
    std::vector<std::vector<int64_t>> batches() const override { return {{0}, {1, 2}, {3, 4, 5}}; }
    void set_epoch(int64_t) override {}
  };
  DataLoader growing(dataset, {.batch_sampler = std::make_shared<GrowingBatches>()});
  using Batches = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(epoch_targets(growing), (Batches{{0}, {1, 2}, {3, 4, 5}}));
}

TEST(DataLoader, RejectsContradictoryOptions) {
  CountingDataset dataset(8);
  auto sampler = std::make_shared<SequentialSampler>(8);
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.shuffle = true, .sampler = sampler}), "mutually exclusive with shuffle");
  EXPECT_EMBER_ERROR(
      DataLoader(dataset,
                 {.batch_size = 2, .batch_sampler = std::make_shared<BatchSampler>(sampler, BatchSamplerOptions{})}),
      "batch_sampler option is mutually exclusive");
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.batch_size = 0}), "batch_size must be positive");
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.num_workers = -1}), "num_workers must be non-negative");
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.prefetch_factor = 0}), "prefetch_factor must be positive");
}

TEST(DataLoader, BatchHooksSeeEveryBatchWithItsPositionAndMayChangeIt) {
  CountingDataset dataset(7);
  DataLoader loader(dataset, {.batch_size = 3, .num_workers = 2});
  std::vector<std::tuple<int64_t, int64_t, int64_t, bool>> seen;
  HookId record = loader.register_batch_hook([&](Example&, const BatchInfo& info) {
    seen.emplace_back(info.epoch, info.index, info.num_batches, info.is_last());
  });
  loader.register_batch_hook([](Example& batch, const BatchInfo&) { batch.target = batch.target * 10; });
  std::vector<std::vector<int64_t>> targets;
  for (auto& [inputs, target] : loader) targets.push_back(target.to_vector<int64_t>());
  EXPECT_EQ(targets, (std::vector<std::vector<int64_t>>{{0, 10, 20}, {30, 40, 50}, {60}}));
  using Seen = std::tuple<int64_t, int64_t, int64_t, bool>;
  EXPECT_EQ(seen, (std::vector<Seen>{{0, 0, 3, false}, {0, 1, 3, false}, {0, 2, 3, true}}));

  // Resuming mid-epoch: the hook sees the positions of the batches it gets.
  loader.set_state({.epoch = 4, .batch = 2});
  seen.clear();
  for (auto& batch : loader) (void)batch;
  EXPECT_EQ(seen, (std::vector<Seen>{{4, 2, 3, true}}));

  loader.remove_hook(record);
  EXPECT_EMBER_ERROR(loader.remove_hook(record), "no hook with id");
  EXPECT_EMBER_ERROR(loader.register_batch_hook(nullptr), "the hook is empty");
}

// An iteration ends once: past its last batch, at a break (its iterators
// dropped), or when a newer begin() stops it; a failing end hook at a break
// is reported, never std::terminate from the destructor. Catches: no end
// event at a break (the Accelerator's gradient state kept the loader).
TEST(DataLoader, IterationEndHooksRunOnceAtEveryKindOfEnd) {
  CountingDataset dataset(5);
  DataLoader loader(dataset, {.batch_size = 2});
  int ends = 0;
  HookId counting = loader.register_iteration_end_hook([&] { ++ends; });
  for (auto& batch : loader) (void)batch;
  EXPECT_EQ(ends, 1);
  for (auto& batch : loader) {
    (void)batch;
    break;
  }
  EXPECT_EQ(ends, 2);
  {
    auto first = loader.begin();
    auto second = loader.begin();  // stops the first
    EXPECT_EQ(ends, 3);
  }
  EXPECT_EQ(ends, 4);
  loader.remove_hook(counting);
  loader.register_iteration_end_hook([] { throw Error("end hook failed"); });
  ::testing::internal::CaptureStderr();
  for (auto& batch : loader) {
    (void)batch;
    break;
  }
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("an iteration-end hook failed as its iteration was dropped: "
                                                          "end hook failed"),
            std::string::npos);
  EXPECT_EMBER_ERROR(loader.register_iteration_end_hook(nullptr), "the hook is empty");
}

TEST(DataLoader, AThrowingBatchHookEndsTheIterationAtThatBatch) {
  CountingDataset dataset(6);
  DataLoader loader(dataset, {.batch_size = 2});
  loader.register_batch_hook([](Example&, const BatchInfo& info) {
    EMBER_CHECK(info.index != 1, "hook refuses batch {}", info.index);
  });
  auto it = loader.begin();
  EXPECT_EMBER_ERROR(++it, "hook refuses batch 1");
  EXPECT_EQ(it, loader.end());
  EXPECT_EQ(loader.state(), (DataLoaderState{0, 1}));  // still names the batch that failed
}

TEST(DataLoader, ReplacingTheBatchSamplerBetweenEpochs) {
  CountingDataset dataset(6);
  DataLoader loader(dataset, {.batch_size = 2});
  // Every other batch of the original sampler: what a shard of two ranks would take.
  class EveryOtherBatch : public BatchSampler {
   public:
    explicit EveryOtherBatch(std::shared_ptr<BatchSampler> inner) : inner_(std::move(inner)) {}
    int64_t size() const override { return (inner_->size() + 1) / 2; }
    std::vector<std::vector<int64_t>> batches() const override {
      std::vector<std::vector<int64_t>> all = inner_->batches(), mine;
      for (size_t b = 0; b < all.size(); b += 2) mine.push_back(all[b]);
      return mine;
    }
    void set_epoch(int64_t epoch) override { inner_->set_epoch(epoch); }

   private:
    std::shared_ptr<BatchSampler> inner_;
  };
  loader.set_batch_sampler(std::make_shared<EveryOtherBatch>(loader.batch_sampler()));
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(epoch_targets(loader), (std::vector<std::vector<int64_t>>{{0, 1}, {4, 5}}));

  auto it = loader.begin();  // mid-epoch now
  (void)it;
  EXPECT_EMBER_ERROR(loader.set_batch_sampler(loader.batch_sampler()), "only be replaced between epochs");
  EXPECT_EMBER_ERROR(loader.set_batch_sampler(nullptr), "batch sampler is null");
}

// Options the loader would not use were accepted and ignored: a seed with no shuffle
// of the loader's own (two loaders with .seed = 5 and RandomSamplers of their own gave
// different orders), prefetch_factor without workers. Both refused, as PyTorch 1.13
// refuses the second. Mutation caught: either check removed.
TEST(DataLoader, OptionsItWouldNotUseAreRefused) {
  CountingDataset dataset(8);
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.batch_size = 2, .seed = 5}), "DataLoader: seed 5 seeds the shuffle");
  auto sampler = std::make_shared<RandomSampler>(8);
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.batch_size = 2, .seed = 5, .sampler = sampler}),
                     "give your sampler the seed instead");
  EXPECT_EMBER_ERROR(DataLoader(dataset, {.batch_size = 2, .prefetch_factor = 8}),
                     "DataLoader: prefetch_factor 8 bounds the batches that workers prepare; it needs num_workers > 0");
  DataLoader fine(dataset, {.batch_size = 2, .shuffle = true, .num_workers = 1, .prefetch_factor = 8, .seed = 5});
  EXPECT_EQ(fine.size(), 4);
}

// PyTorch's habit, sampler->set_epoch(epoch) before the epoch's loop, was overwritten
// by the loader's own count at begin(): a run resumed at epoch 5 that way got epoch
// 0's order again. Now the user's epoch is the one begin() runs, and the count goes on
// from it. Mutation caught: adopt_epoch_set_by_user() returning at once.
TEST(DataLoader, ASamplerEpochSetByTheUserPicksTheEpochItRuns) {
  using Batches = std::vector<std::vector<int64_t>>;
  CountingDataset dataset(16);
  auto order_of = [](int64_t epoch) {
    DistributedSampler reference(16, 2, 1, {.seed = 3});
    reference.set_epoch(epoch);
    std::vector<int64_t> order = reference.indices();
    return Batches{{order[0], order[1], order[2], order[3]}, {order[4], order[5], order[6], order[7]}};
  };
  ASSERT_NE(order_of(5), order_of(0));
  auto sampler = std::make_shared<DistributedSampler>(16, 2, 1, DistributedSamplerOptions{.seed = 3});
  DataLoader loader(dataset, {.batch_size = 4, .sampler = sampler});
  sampler->set_epoch(5);
  EXPECT_EQ(epoch_targets(loader), order_of(5));
  EXPECT_EQ(epoch_targets(loader), order_of(6));  // and the loader's count goes on from it
  EXPECT_EQ(loader.state().epoch, 7);
  sampler->set_epoch(2);
  EXPECT_EQ(epoch_targets(loader), order_of(2));
  // Against a mid-epoch resume of another epoch: which one is meant is unclear.
  loader.set_state({.epoch = 3, .batch = 1});
  sampler->set_epoch(4);
  EXPECT_EMBER_ERROR(loader.begin(), "the sampler's epoch was set to 4, but set_state asked to resume epoch 3 at batch 1");
  loader.set_state({.epoch = 3, .batch = 1});
  sampler->set_epoch(3);
  EXPECT_EQ(epoch_targets(loader), Batches{order_of(3)[1]});
}

// set_epoch with the epoch the loader ran last (the same order every pass, or
// an epoch run again after a break) looked like no call at all: the loader
// ran the next epoch. Catches: the user's call told by its value instead of
// by the sampler's count of calls.
TEST(DataLoader, ASamplerEpochSetAgainToTheLastEpochRunsItAgain) {
  CountingDataset dataset(12);
  auto sampler = std::make_shared<RandomSampler>(12, RandomSamplerOptions{.seed = 4});
  DataLoader loader(dataset, {.batch_size = 4, .sampler = sampler});
  sampler->set_epoch(0);
  const auto first = epoch_targets(loader);
  sampler->set_epoch(0);
  EXPECT_EQ(epoch_targets(loader), first);
  for (auto& batch : loader) {  // epoch 1, abandoned after one batch, then run again
    (void)batch;
    break;
  }
  sampler->set_epoch(1);
  const auto second = epoch_targets(loader);
  EXPECT_NE(second, first);
  EXPECT_EQ(loader.state().epoch, 2);
  DataLoader fresh(dataset, {.batch_size = 4, .sampler = std::make_shared<RandomSampler>(12, RandomSamplerOptions{.seed = 4})});
  fresh.set_state({.epoch = 2, .batch = 0});
  EXPECT_EQ(epoch_targets(loader), epoch_targets(fresh));  // and the loader's count goes on from it
}

// A nested loop over one loader ends the outer loop (one iteration at a
// time); the outer iterator says why instead of "at the end". And an epoch of
// no batches is over, as one whose last batch went out. Catches: the
// cancelled iteration's generic message; the state left at {e, 0} after an
// empty epoch.
TEST(DataLoader, ANestedLoopSaysItStoppedTheOuterAndAnEmptyEpochEnds) {
  CountingDataset dataset(10);
  DataLoader loader(dataset, {.batch_size = 5});
  auto outer = loader.begin();
  for (auto& batch : loader) (void)batch;
  EXPECT_EMBER_ERROR(++outer, "its iteration was stopped by a newer begin() on the same loader");
  DataLoader none(dataset, {.batch_size = 16, .drop_last = true});
  EXPECT_EQ(none.size(), 0);
  for (auto& batch : none) (void)batch;
  EXPECT_EQ(none.state(), (DataLoaderState{1, 0}));
}

// PyTorch's loop: sampler->set_epoch(e), then a new loader for the epoch (or
// one made after a resumed run set its first epoch). Catches: the loader
// taking the sampler's epoch at construction as its own, then running epoch 0
// (the same order every epoch, without a word).
TEST(DataLoader, ALoaderMadeAfterSetEpochRunsThatEpoch) {
  using Batches = std::vector<std::vector<int64_t>>;
  CountingDataset dataset(16);
  auto sampler = std::make_shared<DistributedSampler>(16, 2, 1, DistributedSamplerOptions{.seed = 3});
  auto order_of = [](int64_t epoch) {
    DistributedSampler reference(16, 2, 1, {.seed = 3});
    reference.set_epoch(epoch);
    std::vector<int64_t> order = reference.indices();
    return Batches{{order[0], order[1], order[2], order[3]}, {order[4], order[5], order[6], order[7]}};
  };
  for (int64_t epoch : {0, 1, 2}) {
    sampler->set_epoch(epoch);
    DataLoader loader(dataset, {.batch_size = 4, .sampler = sampler});
    EXPECT_EQ(loader.state().epoch, epoch);
    EXPECT_EQ(epoch_targets(loader), order_of(epoch)) << "epoch " << epoch;
  }
  EXPECT_NE(order_of(1), order_of(0));
}

// A batch sampler of one's own with no sampler() has no epoch the loader can
// read: the loader's count drives it (as Accelerate's iteration count drives a
// prepared loader's batch sampler), and set_state picks another epoch (Note
// [Epoch order]). Mutation caught: begin() not calling batch_sampler->set_epoch ->
// every epoch in epoch 0's order, and set_state({5, 0}) running epoch 0 too.
TEST(DataLoader, TheLoadersCountDrivesTheEpochOfABatchSamplerOfOnesOwn) {
  using Batches = std::vector<std::vector<int64_t>>;
  class Pairs : public BatchSampler {
   public:
    int64_t size() const override { return 4; }
    std::vector<std::vector<int64_t>> batches() const override {
      const std::vector<int64_t> order = random_permutation(8, 42, uint64_t(epoch_));
      Batches pairs;
      for (size_t i = 0; i < order.size(); i += 2) pairs.push_back({order[i], order[i + 1]});
      return pairs;
    }
    void set_epoch(int64_t epoch) override { epoch_ = epoch; }

   private:
    int64_t epoch_ = 0;
  };
  auto order_of = [](int64_t epoch) {
    Pairs reference;
    reference.set_epoch(epoch);
    return reference.batches();
  };
  ASSERT_NE(order_of(0), order_of(1));
  CountingDataset dataset(8);
  auto pairs = std::make_shared<Pairs>();
  DataLoader loader(dataset, {.batch_sampler = pairs});
  EXPECT_EQ(epoch_targets(loader), order_of(0));
  EXPECT_EQ(epoch_targets(loader), order_of(1));
  loader.set_state({.epoch = 5, .batch = 0});
  EXPECT_EQ(epoch_targets(loader), order_of(5));
  EXPECT_EQ(epoch_targets(loader), order_of(6));
}

// set_state can only check the batch against the epoch the sampler is at; the
// epoch it resumes may be shorter. Catches: begin() not checking again (the
// iteration read past its batches: a segfault, with workers or without).
TEST(DataLoader, ResumingPastTheEndOfAShorterEpochIsAnError) {
  class Shrinking : public BatchSampler {
   public:
    int64_t size() const override { return std::max<int64_t>(1, 10 - 3 * epoch_); }
    std::vector<std::vector<int64_t>> batches() const override {
      std::vector<std::vector<int64_t>> out;
      for (int64_t b = 0; b < size(); ++b) out.push_back({b});
      return out;
    }
    void set_epoch(int64_t epoch) override { epoch_ = epoch; }

   private:
    int64_t epoch_ = 0;
  };
  CountingDataset dataset(10);
  for (int workers : {0, 2}) {
    DataLoader loader(dataset, {.num_workers = workers, .batch_sampler = std::make_shared<Shrinking>()});
    loader.set_state({.epoch = 2, .batch = 8});
    EXPECT_EMBER_ERROR(loader.begin(), "DataLoader: set_state asked to resume epoch 2 at batch 8, but that epoch has 4 "
                                       "batches");
  }
}

// PyTorch's own samplers read the dataset's size every epoch; the loader's are
// made once. Catches: a grown dataset read at its old size (the new examples
// never visited), a shrunk one handing out indices past its end.
TEST(DataLoader, ADatasetThatChangedSizeIsAnErrorForTheLoadersOwnSampler) {
  class Resizable : public Dataset {
   public:
    int64_t size() const override { return size_; }
    Example get(int64_t index) const override { return {scalar_tensor(index, {}), scalar_tensor(index, {}), {}}; }
    int64_t size_ = 4;
  };
  for (bool shuffle : {false, true}) {
    Resizable dataset;
    DataLoader loader(dataset, {.batch_size = 4, .shuffle = shuffle});
    EXPECT_EQ(loader.size(), 1);
    for (auto& batch : loader) EXPECT_EQ(batch.target.numel(), 4);
    dataset.size_ = 8;
    EXPECT_EMBER_ERROR(loader.begin(), "DataLoader: the dataset has 8 examples now, but the loader's sampler was made "
                                       "for 4; make a new DataLoader");
    // A batch sampler of the new size takes over; the check was the old sampler's.
    loader.set_batch_sampler(std::make_shared<BatchSampler>(std::make_shared<SequentialSampler>(8),
                                                            BatchSamplerOptions{4, false}));
    int64_t seen = 0;
    for (auto& batch : loader) seen += batch.target.numel();
    EXPECT_EQ(seen, 8);
  }
}

// prefetch_factor bounds the batches in flight; it is no allocation. Catches:
// the ring sized workers x prefetch_factor up front (std::bad_alloc, not an
// ember::Error, or gigabytes, for an epoch of two batches).
TEST(DataLoader, AHugePrefetchFactorAllocatesOnlyForTheBatchesThereAre) {
  CountingDataset dataset(4);
  DataLoader loader(dataset, {.batch_size = 2, .num_workers = 1, .prefetch_factor = 1 << 30});
  EXPECT_EQ(epoch_targets(loader), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
}

// Note [Random numbers in workers]. Catches: workers drawing from the shared
// default generator in the order the threads ran (the same seed gave other
// numbers from run to run, and shuffled among the batches).
TEST(DataLoader, RandomNumbersAWorkerDrawsDependOnlyOnTheSeedAndTheBatch) {
  class Augmenting : public Dataset {
   public:
    int64_t size() const override { return 24; }
    Example get(int64_t index) const override {
      std::this_thread::sleep_for(std::chrono::microseconds(100 + 400 * (index * 7919 % 5)));
      return {rand({1}), scalar_tensor(index, {.dtype = DType::i64}), {}};
    }
  } dataset;
  auto draws = [&](int workers) {
    manual_seed(11);
    DataLoader loader(dataset, {.batch_size = 2, .num_workers = workers});
    std::vector<float> values;
    for (auto& [inputs, targets] : loader)
      for (float value : inputs.to_vector<float>()) values.push_back(value);
    return values;
  };
  const std::vector<float> one = draws(1);
  EXPECT_EQ(draws(3), one);
  EXPECT_EQ(draws(3), one);
  EXPECT_EQ(std::set<float>(one.begin(), one.end()).size(), one.size());  // every example its own number
  // Making a loader draws nothing from the default generator, with workers or
  // without: what the program draws next does not depend on num_workers.
  // Catches: the worker seed drawn (model initialisation and dropout then
  // changed with num_workers).
  auto next_draws = [&](int workers) {
    manual_seed(11);
    DataLoader loader(dataset, {.batch_size = 2, .num_workers = workers});
    return rand({3}).to_vector<float>();
  };
  EXPECT_EQ(next_draws(2), next_draws(0));
}

TEST(DataLoader, EmptyDatasetYieldsNoBatches) {
  CountingDataset dataset(0);
  DataLoader loader(dataset, {.batch_size = 3, .shuffle = true, .num_workers = 2, .seed = 1});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_EQ(loader.begin(), loader.end());
  EXPECT_TRUE(epoch_targets(loader).empty());
}

}  // namespace
}  // namespace ember::data
