// Dataset's default batch fetch, TensorDataset, Subset and random_split.
// Tests: tests/data/test_dataset.cpp.
#include "data/dataset.h"

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/ops/creation.h"
#include "core/ops/indexing.h"
#include "data/sampler.h"

namespace ember::data {

namespace {
void check_index(int64_t index, int64_t size, const char* op) {
  EMBER_CHECK(index >= 0 && index < size, "{}: index {} is out of range for a dataset of size {}", op, index, size);
}
}  // namespace

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (int64_t index : indices) examples.push_back(get(index));
  return default_collate(examples);
}

std::shared_ptr<const Dataset> borrow(const Dataset& dataset) {
  return std::shared_ptr<const Dataset>(std::shared_ptr<const Dataset>(), &dataset);
}

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  EMBER_CHECK(!tensors_.empty(), "TensorDataset: expected at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    EMBER_CHECK(tensors_[i].defined(), "TensorDataset: tensor {} is undefined", i);
    EMBER_CHECK(tensors_[i].dim() >= 1, "TensorDataset: tensor {} is 0-d; tensors are indexed along dim 0", i);
    EMBER_CHECK(tensors_[i].size(0) == tensors_[0].size(0),
                "TensorDataset: size mismatch between tensors: tensor 0 has shape {}, tensor {} has shape {}",
                tensors_[0].shape(), i, tensors_[i].shape());
  }
  size_ = tensors_[0].size(0);
}

TensorDataset::TensorDataset(Tensor input, Tensor target)
    : TensorDataset(std::vector<Tensor>{std::move(input), std::move(target)}) {}

namespace {
// Fields 0, 1, 2.. of an example from one tensor per field.
Example example_of(std::vector<Tensor> fields) {
  Example example;
  example.input = std::move(fields[0]);
  if (fields.size() > 1) example.target = std::move(fields[1]);
  for (size_t i = 2; i < fields.size(); ++i) example.extra.push_back(std::move(fields[i]));
  return example;
}
}  // namespace

Example TensorDataset::get(int64_t index) const {
  check_index(index, size_, "TensorDataset::get");
  std::vector<Tensor> fields;
  for (const Tensor& t : tensors_) fields.push_back(t.select(0, index));
  return example_of(std::move(fields));
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t index : indices) check_index(index, size_, "TensorDataset::get_batch");
  Tensor index = from_vector(indices);
  std::vector<Tensor> fields;
  for (const Tensor& t : tensors_) fields.push_back(index_select(t, 0, index));  // [N, ...] -> [B, ...]
  return example_of(std::move(fields));
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  EMBER_CHECK(dataset_ != nullptr, "Subset: dataset is null");
  int64_t size = dataset_->size();
  for (int64_t index : indices_) check_index(index, size, "Subset");
}

Example Subset::get(int64_t index) const {
  check_index(index, size(), "Subset::get");
  return dataset_->get(indices_[size_t(index)]);
}

Example Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> mapped;
  mapped.reserve(indices.size());
  for (int64_t index : indices) {
    check_index(index, size(), "Subset::get_batch");
    mapped.push_back(indices_[size_t(index)]);
  }
  return dataset_->get_batch(mapped);
}

namespace {
// Whole lengths from `lengths`, or from fractions of `size` as torch does:
// fractions are used when they sum to 1 (within rounding) and not above.
std::vector<int64_t> split_lengths(int64_t size, const std::vector<double>& lengths) {
  double sum = std::accumulate(lengths.begin(), lengths.end(), 0.0);
  std::vector<int64_t> result;
  if (std::abs(sum - 1.0) <= 1e-9 && sum <= 1.0) {
    for (double fraction : lengths) {
      EMBER_CHECK(fraction >= 0.0 && fraction <= 1.0, "random_split: fraction {} is not within [0, 1]", fraction);
      result.push_back(int64_t(std::floor(double(size) * fraction)));
    }
    int64_t remainder = size - std::accumulate(result.begin(), result.end(), int64_t(0));
    for (int64_t i = 0; i < remainder; ++i) ++result[size_t(i) % result.size()];
    return result;
  }
  for (double length : lengths) {
    EMBER_CHECK(length >= 0.0 && length == std::floor(length),
                "random_split: lengths must be non-negative whole numbers or fractions summing to 1, got {}", length);
    result.push_back(int64_t(length));
  }
  EMBER_CHECK(std::accumulate(result.begin(), result.end(), int64_t(0)) == size,
              "random_split: sum of input lengths {} does not equal the length of the input dataset ({})",
              fmt::join(lengths, ", "), size);
  return result;
}
}  // namespace

std::vector<Subset> random_split(std::shared_ptr<const Dataset> dataset, const std::vector<double>& lengths,
                                 Generator* generator) {
  EMBER_CHECK(dataset != nullptr, "random_split: dataset is null");
  EMBER_CHECK(!lengths.empty(), "random_split: expected at least one length");
  std::vector<int64_t> sizes = split_lengths(dataset->size(), lengths);
  std::vector<int64_t> order = random_permutation(dataset->size(), draw_seed(generator));
  std::vector<Subset> subsets;
  auto start = order.begin();
  for (int64_t length : sizes) {
    subsets.emplace_back(dataset, std::vector<int64_t>(start, start + ptrdiff_t(length)));
    start += ptrdiff_t(length);
  }
  return subsets;
}

std::vector<Subset> random_split(const Dataset& dataset, const std::vector<double>& lengths, Generator* generator) {
  return random_split(borrow(dataset), lengths, generator);
}

}  // namespace ember::data
