// The watchdog of a device backend (Note [NCCL watchdog] in
// distributed/README.md): a thread that follows the operations the backend
// queued on its stream, releases each one's tensors once it is done, and,
// when one is still not done after the timeout or the communicator reports an
// asynchronous error, records why and aborts the communicator, once. From
// then on the backend's calls throw that reason instead of queueing work that
// could never finish, and a caller blocked in wait_idle() is woken with it.
//
// Plain C++: "is it done" and "abort" are callbacks, so
// tests/distributed/test_watchdog.cpp drives it with flags on any machine;
// backends/nccl_backend.cpp gives it CUDA events, ncclCommGetAsyncError and
// ncclCommAbort.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/store/tcp_store.h"

namespace ember::distributed {

struct WatchdogOptions {
  milliseconds timeout = kDefaultTimeout;  // from an operation's watch() to its deadline
  milliseconds poll_interval = milliseconds(10);
  std::string where = "";  // who is watching, for messages: "nccl backend, rank 0 of 2 in group pg/0/ on cuda:0"
};

class Watchdog {
 public:
  // `async_error` is asked before each poll of the operations: a description
  // of the communicator's asynchronous error, empty while there is none.
  // `abort` is called at most once, on the thread that detected the failure
  // (the watchdog's, or fail()'s caller), after the reason is recorded.
  Watchdog(WatchdogOptions options, std::function<std::string()> async_error, std::function<void()> abort);
  ~Watchdog();  // stops the thread and releases every held operation; never aborts
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  struct Operation {
    std::string description;                 // "allreduce([4], float32, sum)"
    std::function<bool()> done;              // polled on the watchdog thread; may throw
    std::shared_ptr<const void> keep_alive;  // released once done() says so
  };
  // Follows `operation` from now on; its deadline is now + the timeout.
  void watch(Operation operation);
  // Throws an ember::Error with the recorded reason, if there is one.
  void check() const;
  bool failed() const;
  // Records `reason` (the first one wins) and aborts, as a timeout would.
  void fail(const std::string& reason);
  // Blocks until every watched operation is done; throws the reason of a
  // failure, at the latest one poll after the oldest operation's deadline.
  void wait_idle();
  size_t in_flight() const;

 private:
  struct Watched {
    Operation operation;
    std::chrono::steady_clock::time_point deadline;
  };
  void run();
  // One pass over the operations, under the lock: drops those done, returns
  // the reason to fail, or an empty string.
  std::string poll_locked();
  std::string probe_async_error();  // never throws
  void abort_once();                // never throws
  void record_failure_locked(const std::string& reason);

  const WatchdogOptions options_;
  const std::function<std::string()> async_error_;
  const std::function<void()> abort_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;     // an operation arrived, or stopping
  std::condition_variable changed_;  // operations finished, or a failure was recorded
  std::deque<Watched> operations_;
  std::string failure_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ember::distributed
