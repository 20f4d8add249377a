// Samplers and the Philox permutation behind every random order in data/.
// Called by DataLoader (data/dataloader.cpp) and random_split; tests in
// tests/data/test_sampler.cpp.
#include "data/sampler.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/random.h"

namespace ember::data {

namespace {

// 64-bit draws from Philox with key = seed and counter = (draw / 2, stream):
// each block of four 32-bit words gives two draws.
class PhiloxDraws {
 public:
  PhiloxDraws(uint64_t seed, uint64_t stream) : key_(philox_key(seed)), stream_(stream) {}
  uint64_t next() {
    if (half_ == 0) {
      block_ = philox4x32(
          {uint32_t(block_index_), uint32_t(block_index_ >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)}, key_);
      ++block_index_;
    }
    uint64_t value = (uint64_t(block_[2 * half_]) << 32) | block_[2 * half_ + 1];
    half_ ^= 1;
    return value;
  }
  // Uniform in [0, bound). The modulo bias is below bound / 2^64, far under
  // anything an epoch of sampling can detect.
  int64_t below(int64_t bound) { return int64_t(next() % uint64_t(bound)); }

 private:
  std::array<uint32_t, 2> key_;
  uint64_t stream_;
  uint64_t block_index_ = 0;
  std::array<uint32_t, 4> block_{};
  int half_ = 0;
};

// The stream of permutation `part` of epoch `epoch`: the two words of the
// counter that do not count draws. Note [Epoch order].
uint64_t epoch_stream(int64_t epoch, int64_t part) {
  EMBER_CHECK(epoch >= 0 && epoch <= int64_t(UINT32_MAX), "RandomSampler: epoch {} is outside [0, 2^32)", epoch);
  EMBER_ASSERT(part >= 0 && part <= int64_t(UINT32_MAX), "permutation part {} out of range", part);
  return (uint64_t(epoch) << 32) | uint64_t(part);
}

uint64_t seed_or_draw(std::optional<uint64_t> seed, Generator* generator) {
  return seed ? *seed : draw_seed(generator);
}

}  // namespace

namespace detail {

// (numerator + denominator - 1) / denominator overflows near INT64_MAX: a
// batch_size of INT64_MAX gave 0 batches (PyTorch's len() says 1).
int64_t divide_rounding_up(int64_t numerator, int64_t denominator) {
  return numerator / denominator + (numerator % denominator != 0 ? 1 : 0);
}

}  // namespace detail

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, uint64_t stream) {
  EMBER_CHECK(n >= 0, "random_permutation: n must be non-negative, got {}", n);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t(0));
  PhiloxDraws draws(seed, stream);
  for (int64_t i = n - 1; i > 0; --i) std::swap(order[size_t(i)], order[size_t(draws.below(i + 1))]);
  return order;
}

uint64_t draw_seed(Generator* generator) {
  Generator& source = generator ? *generator : default_generator();
  uint64_t seed = source.seed();
  uint64_t offset = source.reserve(1);
  std::array<uint32_t, 4> block = philox4x32(philox_counter(offset, 0), philox_key(seed));
  return (uint64_t(block[0]) << 32) | block[1];
}

SequentialSampler::SequentialSampler(int64_t size) : size_(size) {
  EMBER_CHECK(size >= 0, "SequentialSampler: size must be non-negative, got {}", size);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> order(static_cast<size_t>(size_));
  std::iota(order.begin(), order.end(), int64_t(0));
  return order;
}

RandomSampler::RandomSampler(int64_t data_size, RandomSamplerOptions options, Generator* generator)
    : data_size_(data_size),
      num_samples_(options.num_samples < 0 ? data_size : options.num_samples),
      replacement_(options.replacement),
      seed_(seed_or_draw(options.seed, generator)) {
  EMBER_CHECK(data_size >= 0, "RandomSampler: data_size must be non-negative, got {}", data_size);
  EMBER_CHECK(options.num_samples == -1 || options.num_samples >= 1,
              "RandomSampler: num_samples must be positive or -1 (the dataset's size), got {}", options.num_samples);
  EMBER_CHECK(num_samples_ == 0 || data_size > 0, "RandomSampler: {} samples requested from an empty dataset",
              num_samples_);
}

std::vector<int64_t> RandomSampler::indices() const {
  std::vector<int64_t> order;
  order.reserve(size_t(num_samples_));
  if (replacement_) {
    PhiloxDraws draws(seed_, epoch_stream(epoch_, 0));
    for (int64_t i = 0; i < num_samples_; ++i) order.push_back(draws.below(data_size_));
    return order;
  }
  for (int64_t part = 0; int64_t(order.size()) < num_samples_; ++part) {
    std::vector<int64_t> permutation = random_permutation(data_size_, seed_, epoch_stream(epoch_, part));
    size_t take = size_t(std::min<int64_t>(data_size_, num_samples_ - int64_t(order.size())));
    order.insert(order.end(), permutation.begin(), permutation.begin() + ptrdiff_t(take));
  }
  return order;
}

SubsetRandomSampler::SubsetRandomSampler(std::vector<int64_t> indices, std::optional<uint64_t> seed,
                                         Generator* generator)
    : indices_(std::move(indices)), seed_(seed_or_draw(seed, generator)) {}

std::vector<int64_t> SubsetRandomSampler::indices() const {
  std::vector<int64_t> permutation = random_permutation(int64_t(indices_.size()), seed_, epoch_stream(epoch_, 0));
  for (int64_t& position : permutation) position = indices_[size_t(position)];
  return permutation;
}

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, BatchSamplerOptions options)
    : sampler_(std::move(sampler)), options_(options) {
  EMBER_CHECK(sampler_ != nullptr, "BatchSampler: sampler is null");
  EMBER_CHECK(options.batch_size >= 1, "BatchSampler: batch_size must be positive, got {}", options.batch_size);
}

int64_t BatchSampler::size() const {
  EMBER_ASSERT(sampler_ != nullptr, "a derived BatchSampler must override size()");
  int64_t samples = sampler_->size();
  return options_.drop_last ? samples / options_.batch_size : detail::divide_rounding_up(samples, options_.batch_size);
}

std::vector<std::vector<int64_t>> BatchSampler::batches() const {
  EMBER_ASSERT(sampler_ != nullptr, "a derived BatchSampler must override batches()");
  std::vector<int64_t> order = sampler_->indices();
  std::vector<std::vector<int64_t>> result;
  result.reserve(size_t(size()));
  for (size_t start = 0; start < order.size(); start += size_t(options_.batch_size)) {
    size_t stop = std::min(order.size(), start + size_t(options_.batch_size));
    if (options_.drop_last && stop - start < size_t(options_.batch_size)) break;
    result.emplace_back(order.begin() + ptrdiff_t(start), order.begin() + ptrdiff_t(stop));
  }
  return result;
}

void BatchSampler::set_epoch(int64_t epoch) {
  if (sampler_) sampler_->set_epoch(epoch);
}

}  // namespace ember::data
