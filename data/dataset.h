// Datasets: a size and a way to fetch examples by index, as torch.utils.data.
// DataLoader calls get_batch from several worker threads at once, so a
// dataset's const methods must be safe to call concurrently (the ones here
// only read). Tests: tests/data/test_dataset.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/example.h"

namespace ember {
class Generator;
}

namespace ember::data {

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, collated into one batch. The default gets each
  // and calls default_collate; in-memory datasets override it with one
  // gather per field, which is much faster than per-example get + stack.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// A shared_ptr that does not own `dataset`: the caller keeps it alive.
std::shared_ptr<const Dataset> borrow(const Dataset& dataset);

// N tensors indexed along dim 0 (all of the same length): an example is
// (tensors[0][i], tensors[1][i], extra = tensors[2..][i]).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  TensorDataset(Tensor input, Tensor target);

  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;  // one index_select per tensor
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t size_ = 0;
};

// The examples of `dataset` at `indices`, in that order.
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);

  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t index) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<int64_t>& indices() const { return indices_; }
  const std::shared_ptr<const Dataset>& dataset() const { return dataset_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// Splits `dataset` into non-overlapping random subsets, as torch's
// random_split: `lengths` are either whole lengths summing to size(), or
// fractions summing to 1 (floored, the remainder handed out one by one from
// the first subset). The permutation is drawn from `generator` (the default
// generator when null). Note [Philox permutations] in data/README.md.
std::vector<Subset> random_split(std::shared_ptr<const Dataset> dataset, const std::vector<double>& lengths,
                                 Generator* generator = nullptr);
// The subsets borrow `dataset`: it must outlive them.
std::vector<Subset> random_split(const Dataset& dataset, const std::vector<double>& lengths,
                                 Generator* generator = nullptr);

}  // namespace ember::data
