// DistributedSampler (see distributed_sampler.h): PyTorch's padding and
// striding over the Philox permutation every sampler in data/ uses.
#include "data/distributed_sampler.h"

#include <numeric>

#include "core/error.h"

namespace ember::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  EMBER_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size must be non-negative, got {}", dataset_size);
  EMBER_CHECK(num_replicas >= 1, "DistributedSampler: num_replicas must be positive, got {}", num_replicas);
  EMBER_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: invalid rank {}, rank should be in [0, {}]", rank,
              num_replicas - 1);
  // drop_last: every rank gets the same whole number of samples and the
  // remainder is left out; otherwise round up and pad.
  num_samples_ =
      options.drop_last ? dataset_size / num_replicas : detail::divide_rounding_up(dataset_size, num_replicas);
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    // The stream RandomSampler uses for (epoch, part 0), Note [Epoch order]:
    // the same seed gives every rank the same permutation.
    EMBER_CHECK(epoch_ >= 0 && epoch_ <= int64_t(UINT32_MAX), "DistributedSampler: epoch {} is outside [0, 2^32)",
                epoch_);
    order = random_permutation(dataset_size_, options_.seed, uint64_t(epoch_) << 32);
  } else {
    order.resize(size_t(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  size_t total = size_t(total_size());
  if (order.size() > total) {
    order.resize(total);
  } else {
    // Pad with the order's own first indices, cycling when the padding is
    // longer than the dataset (more replicas than samples), as PyTorch does.
    for (size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);
  }
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (size_t i = size_t(rank_); i < total; i += size_t(num_replicas_)) mine.push_back(order[i]);
  return mine;
}

}  // namespace ember::data
