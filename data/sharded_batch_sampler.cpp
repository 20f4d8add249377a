// ShardedBatchSampler (see sharded_batch_sampler.h): one rank's share of the
// inner batch sampler's epoch, round-robin or split, with the last round
// padded by recycling the epoch's first samples. Note [Sharding a data loader]
// in data/README.md. Tests: tests/data/test_sharded_batch_sampler.cpp.
#include "data/sharded_batch_sampler.h"

#include <algorithm>

#include "core/error.h"

namespace ember::data {

namespace {

using Batches = std::vector<std::vector<int64_t>>;

// The first `count` samples of the epoch's order, cycling through the epoch
// again when it holds fewer.
std::vector<int64_t> recycled_samples(const Batches& epoch, int64_t count) {
  std::vector<int64_t> samples;
  samples.reserve(size_t(count));
  while (int64_t(samples.size()) < count) {
    size_t before = samples.size();
    for (const std::vector<int64_t>& batch : epoch)
      for (int64_t index : batch) {
        if (int64_t(samples.size()) == count) return samples;
        samples.push_back(index);
      }
    EMBER_ASSERT(samples.size() > before, "recycling samples from an epoch that has none");
  }
  return samples;
}

// A batch sampler that has a batch size makes full batches but for a shorter
// last one; the padding and the split rely on it.
void check_batch_sizes(const Batches& epoch, int64_t batch_size) {
  for (size_t b = 0; b < epoch.size(); ++b) {
    bool is_last = b + 1 == epoch.size();
    int64_t size = int64_t(epoch[b].size());
    EMBER_CHECK(size == batch_size || (is_last && size >= 1 && size < batch_size),
                "ShardedBatchSampler: batch {} of {} from the inner batch sampler has {} samples; with batch size {} "
                "only the last may be shorter",
                b, epoch.size(), size, batch_size);
  }
}

}  // namespace

ShardedBatchSampler::ShardedBatchSampler(std::shared_ptr<BatchSampler> inner, int64_t num_shards, int64_t shard,
                                         ShardingOptions options)
    : BatchSampler(inner ? inner->sampler() : nullptr),
      inner_(std::move(inner)),
      num_shards_(num_shards),
      shard_(shard),
      options_(options) {
  EMBER_CHECK(inner_ != nullptr, "ShardedBatchSampler: the inner batch sampler is null");
  EMBER_CHECK(num_shards >= 1, "ShardedBatchSampler: num_shards must be positive, got {}", num_shards);
  EMBER_CHECK(shard >= 0 && shard < num_shards, "ShardedBatchSampler: shard {} is outside [0, {}) for {} shards",
              shard, num_shards, num_shards);
  if (options.split_batches) {
    EMBER_CHECK(inner_->batch_size() > 0,
                "ShardedBatchSampler: split_batches needs a batch sampler with a batch size; a custom batch sampler "
                "(batch_size() {}) can only be sharded whole",
                inner_->batch_size());
    EMBER_CHECK(inner_->batch_size() % num_shards == 0,
                "ShardedBatchSampler: split_batches needs a batch size divisible by the number of shards, got batch "
                "size {} for {} shards",
                inner_->batch_size(), num_shards);
  }
}

int64_t ShardedBatchSampler::size() const {
  int64_t inner_batches = inner_->size();
  if (options_.split_batches) {
    // Every inner batch gives this shard a part, except that without padding
    // a short last batch may end before this shard's part begins.
    if (inner_->drop_last() || options_.even_batches) return inner_batches;
    int64_t batch_size = inner_->batch_size();
    int64_t last_size = inner_->sampler()->size() % batch_size;
    if (last_size == 0) return inner_batches;
    bool has_part_of_last = last_size > batch_size / num_shards_ * shard_;
    return inner_batches - 1 + (has_part_of_last ? 1 : 0);
  }
  int64_t whole_rounds = inner_batches / num_shards_;
  if (inner_->drop_last()) return whole_rounds;
  if (options_.even_batches) return detail::divide_rounding_up(inner_batches, num_shards_);
  return whole_rounds + (shard_ < inner_batches % num_shards_ ? 1 : 0);
}

std::vector<std::vector<int64_t>> ShardedBatchSampler::batches() const {
  Batches epoch = inner_->batches();
  EMBER_CHECK(int64_t(epoch.size()) == inner_->size(),
              "ShardedBatchSampler: the inner batch sampler made {} batches but its size() says {}", epoch.size(),
              inner_->size());
  int64_t batch_size = inner_->batch_size();
  if (batch_size > 0) check_batch_sizes(epoch, batch_size);
  num_padded_ = 0;
  if (epoch.empty()) return {};
  return options_.split_batches ? split(std::move(epoch)) : round_robin(std::move(epoch));
}

void ShardedBatchSampler::set_epoch(int64_t epoch) { inner_->set_epoch(epoch); }

// A round is one inner batch, cut into num_shards parts; a short last batch
// is first completed with recycled samples (even_batches) or cut as it is.
ShardedBatchSampler::Batches ShardedBatchSampler::split(Batches epoch) const {
  int64_t batch_size = inner_->batch_size();
  int64_t part = batch_size / num_shards_;
  std::vector<int64_t>& last = epoch.back();
  if (int64_t(last.size()) < batch_size && options_.even_batches) {
    num_padded_ = batch_size - int64_t(last.size());
    std::vector<int64_t> padding = recycled_samples(epoch, num_padded_);
    last.insert(last.end(), padding.begin(), padding.end());
  }
  Batches mine;
  mine.reserve(epoch.size());
  for (const std::vector<int64_t>& batch : epoch) {
    int64_t begin = part * shard_;
    int64_t end = std::min(int64_t(batch.size()), begin + part);
    if (begin < end) mine.emplace_back(batch.begin() + ptrdiff_t(begin), batch.begin() + ptrdiff_t(end));
  }
  return mine;
}

// A round is num_shards consecutive inner batches, shard r taking the r-th.
ShardedBatchSampler::Batches ShardedBatchSampler::round_robin(Batches epoch) const {
  if (inner_->drop_last())
    epoch.resize(epoch.size() / size_t(num_shards_) * size_t(num_shards_));
  else if (options_.even_batches)
    complete_last_round(epoch);
  Batches mine;
  mine.reserve(epoch.size() / size_t(num_shards_) + 1);
  for (size_t b = size_t(shard_); b < epoch.size(); b += size_t(num_shards_)) mine.push_back(std::move(epoch[b]));
  return mine;
}

// Fills the last round up to num_shards batches, all full: its real samples
// keep their order and recycled ones follow them, so the padding is at the
// round's end whichever shard holds it.
void ShardedBatchSampler::complete_last_round(Batches& epoch) const {
  size_t round_start = (epoch.size() - 1) / size_t(num_shards_) * size_t(num_shards_);
  int64_t batch_size = inner_->batch_size();
  if (batch_size == 0) {
    // A custom sampler's batches have no size to fill up to: whole batches
    // from the epoch's start take the missing places.
    size_t real_batches = epoch.size();
    for (size_t b = 0; epoch.size() - round_start < size_t(num_shards_); ++b) {
      std::vector<int64_t> batch = epoch[b % real_batches];
      num_padded_ += int64_t(batch.size());
      epoch.push_back(std::move(batch));
    }
    return;
  }
  std::vector<int64_t> round;
  for (size_t b = round_start; b < epoch.size(); ++b) round.insert(round.end(), epoch[b].begin(), epoch[b].end());
  num_padded_ = num_shards_ * batch_size - int64_t(round.size());
  if (num_padded_ == 0) return;
  std::vector<int64_t> padding = recycled_samples(epoch, num_padded_);
  round.insert(round.end(), padding.begin(), padding.end());
  epoch.resize(round_start);
  for (size_t start = 0; start < round.size(); start += size_t(batch_size))
    epoch.emplace_back(round.begin() + ptrdiff_t(start), round.begin() + ptrdiff_t(start + size_t(batch_size)));
}

}  // namespace ember::data
