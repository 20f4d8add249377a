// OrderedPrefetcher: ordered, bounded production of batches on worker threads.
// Note [Worker order and prefetch bound] in data/README.md.
#include "data/prefetcher.h"

#include "core/error.h"
#include "core/parallel.h"

namespace ember::data {

OrderedPrefetcher::OrderedPrefetcher(int64_t first, int64_t end, Produce produce, int num_workers,
                                     int64_t max_in_flight)
    : produce_(std::move(produce)), end_(end), next_to_start_(first), next_to_take_(first) {
  EMBER_ASSERT(num_workers >= 1 && max_in_flight >= 1, "{} workers, {} in flight", num_workers, max_in_flight);
  slots_.resize(size_t(max_in_flight));
  try {
    for (int i = 0; i < num_workers; ++i) workers_.emplace_back([this] { work(); });
  } catch (...) {
    stop();
    throw;
  }
}

OrderedPrefetcher::~OrderedPrefetcher() { stop(); }

void OrderedPrefetcher::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  space_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
}

Example OrderedPrefetcher::take() {
  std::unique_lock lock(mutex_);
  EMBER_ASSERT(next_to_take_ < end_, "take() past the last batch {}", end_);
  Slot& slot = slots_[size_t(next_to_take_ % int64_t(slots_.size()))];
  ready_.wait(lock, [&] { return slot.ready; });
  Slot taken = std::move(slot);
  slot = Slot{};
  ++next_to_take_;
  lock.unlock();
  space_.notify_all();
  if (taken.error) std::rethrow_exception(taken.error);
  return std::move(taken.batch);
}

void OrderedPrefetcher::work() {
  // One intra-op thread per worker, as PyTorch's workers do: the workers are
  // the parallelism, and OpenMP teams inside each would oversubscribe the cores.
  set_num_threads(1);
  std::unique_lock lock(mutex_);
  int64_t capacity = int64_t(slots_.size());
  for (;;) {
    // Batch k may start only when k - next_to_take_ < capacity: the bound,
    // and the reason slot k % capacity is free.
    space_.wait(lock, [&] { return stopping_ || next_to_start_ >= end_ || next_to_start_ - next_to_take_ < capacity; });
    if (stopping_ || next_to_start_ >= end_) return;
    int64_t batch = next_to_start_++;
    lock.unlock();
    Slot result;
    try {
      result.batch = produce_(batch);
    } catch (...) {
      result.error = std::current_exception();
    }
    result.ready = true;
    lock.lock();
    slots_[size_t(batch % capacity)] = std::move(result);
    ready_.notify_all();
  }
}

}  // namespace ember::data
