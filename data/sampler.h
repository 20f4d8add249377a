// Samplers: the order in which a DataLoader visits a dataset, one epoch at a
// time. An epoch's order is a pure function of (seed, epoch), so set_epoch(e)
// reshuffles reproducibly and a resumed run sees the same order (Note [Epoch
// order] in data/README.md). Tests: tests/data/test_sampler.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace ember {
class Generator;
}

namespace ember::data {

namespace detail {
// ceil(numerator / denominator) without overflow, for numerator >= 0 and
// denominator >= 1 (batch and shard counts near INT64_MAX).
int64_t divide_rounding_up(int64_t numerator, int64_t denominator);
}  // namespace detail

// A permutation of [0, n) determined by (seed, stream): Fisher-Yates driven by
// Philox 4x32-10 with key = seed and counter = (draw, stream). RandomSampler,
// random_split and the distributed sampler all use it. Note [Philox permutations].
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream = 0);
// A 64-bit seed drawn from `generator` (the default generator when null).
uint64_t draw_seed(Generator* generator = nullptr);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Indices per epoch.
  virtual int64_t size() const = 0;
  // This epoch's indices, in order.
  virtual std::vector<int64_t> indices() const = 0;
  // DataLoader calls this at the start of every epoch. An override must
  // call this one: the loader tells a set_epoch of the user's from its own
  // by the count of calls, since the user's may repeat an epoch (the same
  // order every pass, or an epoch run again after a break).
  virtual void set_epoch(int64_t epoch) {
    epoch_ = epoch;
    ++epoch_sets_;
  }
  int64_t epoch() const { return epoch_; }
  uint64_t epoch_sets() const { return epoch_sets_; }
  // The seed of a sampler whose order is random, none for one whose order is
  // not; set_seed replaces it, so that processes that drew different seeds
  // agree on process 0's (the Accelerator's prepare broadcasts it).
  virtual std::optional<uint64_t> seed() const { return std::nullopt; }
  virtual void set_seed(uint64_t) {}

 protected:
  int64_t epoch_ = 0;

 private:
  uint64_t epoch_sets_ = 0;
};

// 0, 1, ..., size - 1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size);
  int64_t size() const override { return size_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t size_;
};

struct RandomSamplerOptions {
  bool replacement = false;                     // draw with replacement (indices may repeat)
  int64_t num_samples = -1;                     // indices per epoch; -1: the dataset size
  std::optional<uint64_t> seed = std::nullopt;  // none: drawn once from the generator at construction
};

// A random order each epoch, as torch's RandomSampler. Without replacement,
// num_samples > data_size gives whole permutations back to back, then part of
// one (as PyTorch does).
class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(int64_t data_size, RandomSamplerOptions options = {}, Generator* generator = nullptr);
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;
  std::optional<uint64_t> seed() const override { return seed_; }
  void set_seed(uint64_t seed) override { seed_ = seed; }

 private:
  int64_t data_size_;
  int64_t num_samples_;
  bool replacement_;
  uint64_t seed_;
};

// The given indices in a random order each epoch (torch's SubsetRandomSampler).
class SubsetRandomSampler : public Sampler {
 public:
  explicit SubsetRandomSampler(std::vector<int64_t> indices, std::optional<uint64_t> seed = std::nullopt,
                               Generator* generator = nullptr);
  int64_t size() const override { return int64_t(indices_.size()); }
  std::vector<int64_t> indices() const override;
  std::optional<uint64_t> seed() const override { return seed_; }
  void set_seed(uint64_t seed) override { seed_ = seed; }

 private:
  std::vector<int64_t> indices_;
  uint64_t seed_;
};

struct BatchSamplerOptions {
  int64_t batch_size = 1;
  bool drop_last = false;  // drop a last batch smaller than batch_size
};

// Groups a sampler's indices into batches. A custom batch sampler (batches of
// varying size, bucketing by length) derives from this and overrides size(),
// batches() and set_epoch(), using the protected constructor.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<Sampler> sampler, BatchSamplerOptions options);
  virtual ~BatchSampler() = default;
  // Batches per epoch.
  virtual int64_t size() const;
  // This epoch's batches, in order.
  virtual std::vector<std::vector<int64_t>> batches() const;
  virtual void set_epoch(int64_t epoch);
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  // 0 for a custom batch sampler, whose batches have no one size.
  int64_t batch_size() const { return options_.batch_size; }
  bool drop_last() const { return options_.drop_last; }

 protected:
  BatchSampler() : options_{.batch_size = 0, .drop_last = false} {}
  // One of its own kind that draws from `watched`'s order (ShardedBatchSampler):
  // sampler() is `watched`, whose epoch a DataLoader follows (Note [Epoch order]).
  explicit BatchSampler(std::shared_ptr<Sampler> watched)
      : sampler_(std::move(watched)), options_{.batch_size = 0, .drop_last = false} {}

 private:
  std::shared_ptr<Sampler> sampler_;
  BatchSamplerOptions options_;
};

}  // namespace ember::data
