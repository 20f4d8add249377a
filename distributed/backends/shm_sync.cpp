// Waits and wake-ups of the shm backend (Note [Shared-memory collectives]):
// a rank spins on a peer's counter for a few microseconds, yields a few
// times, then sleeps on the segment's futex word, which publishers bump (and
// wake) only when someone sleeps, so a busy pipeline makes no system calls.
// Tests: tests/distributed/test_shm.cpp.
#include "distributed/backends/shm_sync.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ember::distributed::shm {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Shared (not FUTEX_PRIVATE) futexes: the word lives in a MAP_SHARED mapping
// of several processes, which std::atomic::wait does not support.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec relative{};
  relative.tv_sec = time_t(timeout.count() / 1'000'000);
  relative.tv_nsec = long(timeout.count() % 1'000'000) * 1000;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &relative, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return int(sysconf(_SC_NPROCESSORS_ONLN));
  return CPU_COUNT(&set);
}

// A process's state letter from /proc/<pid>/stat ('R', 'S', 'T' stopped,
// 'Z' zombie, ...), or '?' when it cannot be read; 0 when it no longer exists.
// kill(pid, 0) alone would call an unreaped zombie alive.
char process_state(int pid) {
  if (pid <= 0) return '?';
  if (kill(pid, 0) != 0 && errno == ESRCH) return 0;
  // read(2), not an ifstream: a process reaped between the open and the read
  // makes the read fail with ESRCH, which libstdc++'s filebuf turns into an
  // exception (the error then named that, not the dead rank).
  int fd = ::open(fmt::format("/proc/{}/stat", pid).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? 0 : '?';
  char buffer[512];
  ssize_t length = ::read(fd, buffer, sizeof(buffer));
  int read_error = errno;
  ::close(fd);
  if (length <= 0) return length < 0 && read_error == ESRCH ? 0 : '?';
  std::string_view text(buffer, size_t(length));
  size_t paren = text.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= text.size()) return '?';
  return text[paren + 2];
}

bool is_dead(char state) { return state == 0 || state == 'Z' || state == 'X'; }

constexpr std::chrono::microseconds kSleepSlice{10'000};
constexpr std::chrono::milliseconds kLivenessPeriod{50};

}  // namespace

Sync::Sync(const Segment& segment, int rank, std::vector<int> global_ranks, std::chrono::milliseconds timeout)
    : segment_(segment), rank_(rank), global_ranks_(std::move(global_ranks)), timeout_(timeout) {
  bool oversubscribed = segment.layout().ranks > usable_cpus();
  // With 4 ranks on 2 CPUs (bench/RESULTS.md), yielding for up to 1 ms before
  // sleeping doubles the bandwidth at 64 KB - 1 MB over 2 yields then a futex.
  spin_time_ = oversubscribed ? std::chrono::microseconds(2) : std::chrono::microseconds(50);
  yield_time_ = oversubscribed ? std::chrono::microseconds(1000) : std::chrono::microseconds(200);
  deadline_ = Clock::now() + timeout_;
}

void Sync::begin(std::string description) {
  description_ = std::move(description);
  deadline_ = Clock::now() + timeout_;
}

void Sync::publish(Counter& counter, uint64_t value) {
  // seq_cst store then seq_cst load: with the sleeper's increment-then-check
  // in wait_slow, either the sleeper sees the value or we see the sleeper.
  counter.value.store(value, std::memory_order_seq_cst);
  wake(rank_);
}

void Sync::wake(int rank) {
  RankControl& control = segment_.rank(rank);
  if (control.sleepers.load(std::memory_order_seq_cst) != 0) {
    control.wake_sequence.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&control.wake_sequence);
  }
}

void Sync::wake_sleepers() {
  for (int q = 0; q < segment_.layout().ranks; ++q) wake(q);
}

void Sync::wait_slow(FunctionRef<bool(int)> pending, std::span<const int> ranks) {
  auto all_ready = [&] {
    for (int q : ranks)
      if (pending(q)) return false;
    return true;
  };
  Clock::time_point spin_start = Clock::now();
  for (int i = 1;; ++i) {
    if (all_ready()) return;
    cpu_relax();
    if (i % 64 == 0 && Clock::now() - spin_start > spin_time_) break;
  }
  check_peer_failure();
  // Yielding lets a peer that shares this CPU run; unlike a futex sleep it
  // costs the publisher no system call and this rank no wake-up latency.
  Clock::time_point yield_start = Clock::now();
  do {
    sched_yield();
    if (all_ready()) return;
  } while (Clock::now() - yield_start < yield_time_);
  Clock::time_point next_liveness_check = Clock::now();
  for (;;) {
    // Sleep on the word of the first rank still pending: only its publishing
    // can end this wait (rechecked after registering as a sleeper).
    auto first_pending = std::find_if(ranks.begin(), ranks.end(), [&](int q) { return pending(q); });
    if (first_pending == ranks.end()) return;
    RankControl& awaited = segment_.rank(*first_pending);
    awaited.sleepers.fetch_add(1, std::memory_order_seq_cst);
    uint32_t sequence = awaited.wake_sequence.load(std::memory_order_seq_cst);
    if (pending(*first_pending)) futex_wait(&awaited.wake_sequence, sequence, kSleepSlice);
    awaited.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (all_ready()) return;
    check_peer_failure();
    Clock::time_point now = Clock::now();
    if (now >= next_liveness_check) {
      for (int q : ranks) {
        if (!pending(q) || !is_dead(process_state(segment_.rank(q).pid.load()))) continue;
        if (all_ready()) return;  // it finished its part before exiting
        fail(pending, ranks, false);
      }
      next_liveness_check = now + kLivenessPeriod;
    }
    if (now >= deadline_) fail(pending, ranks, true);
  }
}

void Sync::fail(FunctionRef<bool(int)> pending, std::span<const int> ranks, bool timed_out) {
  std::string missing;
  for (int q : ranks) {
    if (!pending(q)) continue;
    int pid = segment_.rank(q).pid.load();
    char state = process_state(pid);
    std::string how = is_dead(state) ? "exited" : state == 'T' || state == 't' ? "stopped" : "alive";
    missing += fmt::format("{}rank {} (global rank {}, pid {}, {})", missing.empty() ? "" : ", ", q,
                           global_ranks_.at(size_t(q)), pid, how);
  }
  std::string self = fmt::format("rank {} (global rank {})", rank_, global_ranks_.at(size_t(rank_)));
  std::string message =
      timed_out ? fmt::format("shm backend: {} timed out after {} ms on {} waiting for {}", description_,
                              timeout_.count(), self, missing)
                : fmt::format("shm backend: {} cannot finish on {}: a peer exited before doing its part: {}",
                              description_, self, missing);
  SegmentHeader& header = segment_.header();
  int32_t unclaimed = 0;
  if (header.failure_claimed.compare_exchange_strong(unclaimed, 1)) {
    std::snprintf(header.failure, sizeof(header.failure), "%s", message.c_str());
    header.failed_rank_plus_one.store(rank_ + 1, std::memory_order_release);
    for (int q = 0; q < segment_.layout().ranks; ++q) {
      segment_.rank(q).wake_sequence.fetch_add(1, std::memory_order_seq_cst);
      futex_wake_all(&segment_.rank(q).wake_sequence);
    }
  }
  detail::throw_error(message);
}

void Sync::check_peer_failure() {
  SegmentHeader& header = segment_.header();
  int32_t failed = header.failed_rank_plus_one.load(std::memory_order_acquire);
  if (failed == 0) return;
  int q = failed - 1;
  std::string failure(header.failure, strnlen(header.failure, sizeof(header.failure)));
  detail::throw_error(fmt::format("shm backend: {} cannot finish on rank {} (global rank {}): rank {} (global rank {}) "
                                  "gave up first: {}",
                                  description_, rank_, global_ranks_.at(size_t(rank_)), q,
                                  global_ranks_.at(size_t(q)), failure));
}

}  // namespace ember::distributed::shm
