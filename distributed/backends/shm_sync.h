// Waiting on other ranks through counters in the shm segment: spin briefly,
// then yield, then sleep on a futex, checking the collective's deadline and
// the peers' liveness while asleep (Note [Shared-memory collectives]).
// Used by shm_backend.cpp; tests: tests/distributed/test_shm.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "distributed/backends/shm_segment.h"

namespace ember::distributed::shm {

using Clock = std::chrono::steady_clock;

// A reference to a callable, without owning or allocating (the slow path of
// Sync::wait takes its predicate through one).
template <class Signature>
class FunctionRef;
template <class R, class... Args>
class FunctionRef<R(Args...)> {
 public:
  template <class F>
  FunctionRef(F& f)  // NOLINT: implicit, like std::function
      : object_(&f), call_([](void* object, Args... args) -> R { return (*static_cast<F*>(object))(args...); }) {}
  R operator()(Args... args) const { return call_(object_, args...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class Sync {
 public:
  // `global_ranks` names ranks in errors; `timeout` bounds each operation.
  Sync(const Segment& segment, int rank, std::vector<int> global_ranks, std::chrono::milliseconds timeout);

  // Starts an operation: its deadline, and its description for errors
  // ("allreduce of 1024 x float32 (sum)").
  void begin(std::string description);

  // counter = value (one of this rank's), then wakes those who sleep waiting
  // for this rank, if anyone does.
  void publish(Counter& counter, uint64_t value);
  // Wakes every sleeper of the segment (after a change they poll for that is
  // not a counter, such as new work for a progress thread).
  void wake_sleepers();

  // Blocks while pending(q) holds for some rank q in `ranks`. Throws
  // ember::Error naming the operation and the ranks still pending when one of
  // them exits, another rank gave up (SegmentHeader::failure), or the
  // deadline passes.
  template <class Pending>
  void wait_while(Pending&& pending, std::span<const int> ranks) {
    for (int q : ranks)
      if (pending(q)) return wait_slow(pending, ranks);
  }

  // Blocks until counter_of(q) >= target for every rank q in `ranks`.
  template <class CounterOf>
  void wait(CounterOf&& counter_of, uint64_t target, std::span<const int> ranks) {
    auto pending = [&](int q) { return counter_of(q).value.load(std::memory_order_acquire) < target; };
    wait_while(pending, ranks);
  }

 private:
  void wait_slow(FunctionRef<bool(int)> pending, std::span<const int> ranks);
  [[noreturn]] void fail(FunctionRef<bool(int)> pending, std::span<const int> ranks, bool timed_out);
  void check_peer_failure();
  void wake(int rank);

  const Segment& segment_;
  int rank_;
  std::vector<int> global_ranks_;
  std::chrono::milliseconds timeout_;
  // More ranks than CPUs: a waiting rank likely holds the CPU its peer needs,
  // so it spins only briefly before sleeping.
  Clock::duration spin_time_;
  Clock::duration yield_time_;
  std::string description_;
  Clock::time_point deadline_;
};

}  // namespace ember::distributed::shm
