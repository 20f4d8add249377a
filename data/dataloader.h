// DataLoader: batches of a Dataset in a sampler's order, optionally produced
// by background worker threads, iterated with a range-for:
//
//   data::DataLoader loader(dataset, {.batch_size = 64, .shuffle = true, .num_workers = 2});
//   for (auto& [inputs, targets] : loader) { ... }
//
// Every begin() starts an epoch (a new shuffle). The batches and their order
// are the same whatever num_workers is (random numbers a dataset draws: for
// any num_workers >= 1, Note [Random numbers in workers]). state() / set_state() say where the
// next batch comes from, so a checkpoint can resume mid-epoch without reading
// earlier batches again (Note [Resume mid-epoch] in data/README.md). Batch
// hooks and set_batch_sampler let the Accelerator shard a loader and move its
// batches to a device without changing the loader's type.
// Tests: tests/data/test_dataloader.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "core/hook_list.h"
#include "data/dataset.h"
#include "data/sampler.h"

namespace ember::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;                         // a RandomSampler, reshuffled every epoch
  bool drop_last = false;                       // drop a last batch smaller than batch_size
  int num_workers = 0;                          // background threads; 0: batches are made in the iterating thread
  int prefetch_factor = 2;                      // at most num_workers * prefetch_factor batches in flight
  std::optional<uint64_t> seed = std::nullopt;  // shuffle seed; none: drawn from the default generator
  // Turns examples into a batch; when empty, the dataset's get_batch is used
  // (default_collate unless the dataset knows better).
  std::function<Example(const std::vector<Example>&)> collate = {};
  std::shared_ptr<Sampler> sampler = nullptr;             // instead of shuffle
  std::shared_ptr<BatchSampler> batch_sampler = nullptr;  // instead of batch_size, shuffle, sampler and drop_last
};

// Where the next batch comes from: batch `batch` (0-based) of epoch `epoch`.
// While the body of a range-for handles batch k, `batch` is k + 1.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const DataLoaderState&) const = default;
};

// Which batch a batch hook sees: batch `index` of the `num_batches` of epoch `epoch`.
struct BatchInfo {
  int64_t epoch = 0;
  int64_t index = 0;
  int64_t num_batches = 0;
  bool is_last() const { return index + 1 == num_batches; }
};
// Runs on the iterating thread as each batch is handed out, in registration
// order; it may change the batch (move it to a device, say).
using BatchHook = std::function<void(Example& batch, const BatchInfo& info)>;
// Runs once when an iteration ends: the iterator moved past its last batch, a
// newer begin() or set_state stopped it, a batch failed, or its iterators
// were dropped before the end (a break). Accelerate's DataLoaderShard.end().
using IterationEndHook = std::function<void()>;

namespace detail {
struct LoaderCore;
class Iteration;
}  // namespace detail

class DataLoader {
 public:
  // An input iterator over one epoch's batches.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = Example*;
    using reference = Example&;

    Iterator() = default;
    Example& operator*() const;
    Example* operator->() const { return &**this; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    // Iterators compare equal when both are at the end (the only comparison
    // an input iterator supports).
    bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::Iteration> iteration) : iteration_(std::move(iteration)) {}
    bool at_end() const;
    std::shared_ptr<detail::Iteration> iteration_;
  };

  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  // Borrows `dataset`: the caller keeps it alive while the loader is used.
  DataLoader(const Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(const Dataset&& dataset, DataLoaderOptions options = {}) = delete;  // would dangle
  DataLoader(DataLoader&&) noexcept = default;
  DataLoader& operator=(DataLoader&&) noexcept = default;
  ~DataLoader();

  // Starts the next epoch (or the one set_state chose) and returns its first
  // batch; an iteration still running is stopped and its iterators end.
  Iterator begin();
  Iterator end() { return Iterator(); }
  int64_t size() const;  // batches per epoch

  DataLoaderState state() const;
  // The next begin() yields batch `state.batch` of epoch `state.epoch` first;
  // the batches before it are not read.
  void set_state(DataLoaderState state);

  // The seed under which workers draw each batch's random numbers (Note
  // [Random numbers in workers]): a checkpoint saves it beside state(), so
  // that a resumed run's workers draw what the interrupted run's would have.
  // set_worker_seed stops an iteration that is running, as set_state does.
  uint64_t worker_seed() const;
  void set_worker_seed(uint64_t seed);

  const Dataset& dataset() const;
  const std::shared_ptr<BatchSampler>& batch_sampler() const;
  // Makes `batch_sampler` choose the batches from the next begin() on (the
  // Accelerator's sharding). Only between epochs: mid-epoch the loader's
  // position would name a batch of the other sampler, which is an error.
  void set_batch_sampler(std::shared_ptr<BatchSampler> batch_sampler);

  HookId register_batch_hook(BatchHook hook);
  HookId register_iteration_end_hook(IterationEndHook hook);
  void remove_hook(HookId id);

 private:
  void adopt_epoch_set_by_user();
  std::shared_ptr<detail::LoaderCore> core_;
};

}  // namespace ember::data
