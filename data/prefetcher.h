// OrderedPrefetcher: DataLoader's background workers. Threads produce batches
// first..end-1 in any order and hand them out strictly in index order, with at
// most `max_in_flight` produced-but-not-taken batches at any time (Note
// [Worker order and prefetch bound] in data/README.md). Used only by
// data/dataloader.cpp; tests: tests/data/test_dataloader.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "data/example.h"

namespace ember::data {

class OrderedPrefetcher {
 public:
  using Produce = std::function<Example(int64_t batch)>;
  OrderedPrefetcher(int64_t first, int64_t end, Produce produce, int num_workers, int64_t max_in_flight);
  // Stops the workers and joins them; a batch being produced is finished first.
  ~OrderedPrefetcher();
  OrderedPrefetcher(const OrderedPrefetcher&) = delete;
  OrderedPrefetcher& operator=(const OrderedPrefetcher&) = delete;

  // Blocks until the next batch in order is ready and returns it, or rethrows
  // the exception its producer threw.
  Example take();

 private:
  struct Slot {
    Example batch;
    std::exception_ptr error;
    bool ready = false;
  };
  void work();
  void stop();

  Produce produce_;
  int64_t end_;
  int64_t next_to_start_;
  int64_t next_to_take_;
  bool stopping_ = false;
  std::vector<Slot> slots_;  // a ring: batch k lives in slot k % max_in_flight
  std::mutex mutex_;
  std::condition_variable ready_;  // a slot became ready
  std::condition_variable space_;  // a slot was taken, or stopping
  std::vector<std::thread> workers_;
};

}  // namespace ember::data
