// DistributedSampler: each rank's share of a dataset, as torch's
// DistributedSampler. Every rank builds the same epoch order (a shuffle that
// depends only on seed and epoch), pads it by repeating its first indices to
// a multiple of num_replicas (or drops the tail with drop_last), and takes
// every num_replicas-th index starting at its rank. Used with DataLoader:
//
//   data::DataLoader loader(dataset, {.batch_size = 64,
//       .sampler = std::make_shared<data::DistributedSampler>(dataset.size(), world_size, rank)});
//
// DataLoader calls set_epoch at every begin(), so each epoch reshuffles the
// same way on every rank; a set_epoch(e) of your own between epochs (PyTorch's
// habit) picks the epoch the next begin() runs (Note [Epoch order], data/README.md). Tests: tests/data/test_distributed_sampler.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sampler.h"

namespace ember::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;       // must be the same on every rank
  bool drop_last = false;  // drop the tail instead of padding to a multiple of num_replicas
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, int64_t num_replicas, int64_t rank, DistributedSamplerOptions options = {});
  // Indices this rank visits per epoch (the same on every rank).
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;
  // num_samples * num_replicas: the padded (or truncated) length of the epoch order.
  int64_t total_size() const { return num_samples_ * num_replicas_; }

 private:
  int64_t dataset_size_;
  int64_t num_replicas_;
  int64_t rank_;
  DistributedSamplerOptions options_;
  int64_t num_samples_;
};

}  // namespace ember::data
