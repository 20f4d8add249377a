// The device backends' watchdog (watchdog.h, Note [NCCL watchdog]). Lock
// order: a backend may call check() while holding its communicator's lock,
// so the watchdog never holds its own lock while it calls async_error or
// abort, which take that communicator lock.
// Tests: tests/distributed/test_watchdog.cpp.
#include "distributed/backends/watchdog.h"

#include "core/error.h"

namespace ember::distributed {

Watchdog::Watchdog(WatchdogOptions options, std::function<std::string()> async_error, std::function<void()> abort)
    : options_(std::move(options)), async_error_(std::move(async_error)), abort_(std::move(abort)) {
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::watch(Operation operation) {
  {
    std::lock_guard lock(mutex_);
    operations_.push_back({std::move(operation), std::chrono::steady_clock::now() + options_.timeout});
  }
  wake_.notify_one();
}

void Watchdog::check() const {
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) detail::throw_error(failure_);
}

bool Watchdog::failed() const {
  std::lock_guard lock(mutex_);
  return !failure_.empty();
}

size_t Watchdog::in_flight() const {
  std::lock_guard lock(mutex_);
  return operations_.size();
}

void Watchdog::fail(const std::string& reason) {
  bool first = false;
  {
    std::lock_guard lock(mutex_);
    first = failure_.empty();
    if (first) record_failure_locked(reason);
  }
  if (first) abort_once();
}

void Watchdog::wait_idle() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return operations_.empty() || !failure_.empty(); });
  if (!failure_.empty()) detail::throw_error(failure_);
}

void Watchdog::record_failure_locked(const std::string& reason) {
  failure_ = reason;
  changed_.notify_all();
}

std::string Watchdog::poll_locked() {
  const auto now = std::chrono::steady_clock::now();
  std::string reason;
  for (auto it = operations_.begin(); it != operations_.end();) {
    bool done = false;
    try {
      done = it->operation.done();
    } catch (const std::exception& error) {
      if (reason.empty())
        reason = fmt::format("{}: checking whether {} completed failed: {}", options_.where,
                             it->operation.description, error.what());
    }
    if (done) {
      it = operations_.erase(it);  // releases its tensors
      continue;
    }
    if (reason.empty() && now >= it->deadline)
      reason = fmt::format(
          "{}: {} did not complete within the timeout of {} ms (a rank of the group stopped calling collectives, "
          "died, or called a different one); the communicator was aborted, so the group runs no more collectives: "
          "end the process (ember launch --max-restarts restarts the job)",
          options_.where, it->operation.description, options_.timeout.count());
    ++it;
  }
  if (operations_.empty()) changed_.notify_all();
  return reason;
}

// The callbacks run on the watchdog's thread, where an exception would end
// the process: a failing probe is itself an error to report, a failing abort
// leaves the recorded reason to report.
std::string Watchdog::probe_async_error() {
  try {
    return async_error_();
  } catch (const std::exception& error) {
    return fmt::format("probing it failed: {}", error.what());
  }
}

void Watchdog::abort_once() {
  try {
    abort_();
  } catch (const std::exception&) {
    // The reason is recorded and every later call throws it; nothing more to do.
  }
}

// Polls every poll_interval while operations are in flight and sleeps while
// there are none. After a failure it keeps polling, only to release the
// tensors of operations the abort ended.
void Watchdog::run() {
  for (;;) {
    bool healthy = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !operations_.empty(); });
      if (stopping_) return;
      healthy = failure_.empty();
    }
    const std::string error = healthy ? probe_async_error() : std::string();
    bool abort = false;
    {
      std::unique_lock lock(mutex_);
      std::string reason = poll_locked();
      if (!error.empty() && !operations_.empty())
        reason = fmt::format(
            "{}: NCCL reported an asynchronous error while {} was in flight: {}; the communicator was aborted, so "
            "the group runs no more collectives: end the process (ember launch --max-restarts restarts the job)",
            options_.where, operations_.front().operation.description, error);
      if (!reason.empty() && failure_.empty()) {
        record_failure_locked(reason);
        abort = true;
      }
    }
    if (abort) abort_once();
    std::unique_lock lock(mutex_);
    if (wake_.wait_for(lock, options_.poll_interval, [&] { return stopping_; })) return;
  }
}

}  // namespace ember::distributed
