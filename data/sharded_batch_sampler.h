// ShardedBatchSampler: one rank's share of another batch sampler's batches,
// as Accelerate's BatchSamplerShard; what Accelerator::prepare puts into a
// user's DataLoader (DataLoader::set_batch_sampler). Every rank builds the
// same inner epoch (the inner sampler's order depends only on its seed and
// the epoch) and keeps its own share of it:
//
//   - split_batches = false: the inner batch size is each rank's; batches go
//     round-robin, rank r taking batches r, r + n, r + 2n, ... of the epoch
//     (n ranks). One "round" is n consecutive inner batches.
//   - split_batches = true: the inner batch size is the global one and must
//     be divisible by n; every inner batch is cut into n equal consecutive
//     parts and rank r takes part r. A round is one inner batch.
//
// even_batches = true pads the epoch's end by recycling samples from its
// start (the epoch's own order, cycling again if the epoch is shorter than a
// round): the last round is completed so that every rank gets the same number
// of batches, all of full size, and a rank never waits in a collective for
// one that ran out. The padding is all in the last round, at its end, so the
// last batches of the ranks, concatenated in rank order, hold the round's
// real samples first and num_padded() recycled ones after them; that is
// what gather_for_metrics drops. even_batches = false: no padding; ranks may
// get different numbers of batches and a short last one.
//
// An inner sampler with drop_last gives whole rounds only (a last incomplete
// round is dropped, nothing is padded). A custom batch sampler (batch_size()
// == 0, batches of any size) can be sharded without splitting; even_batches
// then recycles whole batches from the epoch's start to complete the last
// round.
//
// Tests: tests/data/test_sharded_batch_sampler.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/sampler.h"

namespace ember::data {

struct ShardingOptions {
  bool split_batches = false;
  bool even_batches = true;
};

class ShardedBatchSampler : public BatchSampler {
 public:
  // Errors (ember::Error naming the values): num_shards < 1, shard outside
  // [0, num_shards), split_batches with a custom inner sampler or a batch
  // size not divisible by num_shards.
  ShardedBatchSampler(std::shared_ptr<BatchSampler> inner, int64_t num_shards, int64_t shard,
                      ShardingOptions options = {});

  // This shard's batches per epoch, from the inner sampler's size() alone.
  int64_t size() const override;
  std::vector<std::vector<int64_t>> batches() const override;
  void set_epoch(int64_t epoch) override;

  // Recycled samples at the end of the last round of the epoch of the last
  // batches() call (summed over all shards; 0 without even_batches).
  int64_t num_padded() const { return num_padded_; }
  const std::shared_ptr<BatchSampler>& inner() const { return inner_; }
  int64_t num_shards() const { return num_shards_; }
  int64_t shard() const { return shard_; }
  const ShardingOptions& options() const { return options_; }

 private:
  using Batches = std::vector<std::vector<int64_t>>;
  Batches split(Batches epoch) const;
  Batches round_robin(Batches epoch) const;
  void complete_last_round(Batches& epoch) const;

  std::shared_ptr<BatchSampler> inner_;
  int64_t num_shards_;
  int64_t shard_;
  ShardingOptions options_;
  mutable int64_t num_padded_ = 0;
};

}  // namespace ember::data
