// The ceiling of a same-host all-reduce: how fast one core copies bytes that
// another core has just written. On 2 ranks the shm all-reduce
// (Note [Shared-memory collectives]) makes each rank read N bytes its peer
// wrote (half in the reduce, half in the gather) and write 2N locally, so
// its bus bandwidth (N / time on 2 ranks) cannot beat the rate at which the
// two cores exchange N bytes at the same time, the "both ways" column.
// Two threads pinned to two CPUs, the shm backend's own copy kernel
// (shm::copy_bytes), per size:
//   same core: the writer copies its own freshly written buffer;
//   one way:   the other core copies it while the writer waits;
//   both ways: each core copies the buffer the other just wrote, at once.
// Run by scripts/bench.sh --distributed; figures in bench/RESULTS.md.
//   bench_cross_core_copy [--min-bytes N] [--max-bytes N]
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "allreduce_table.h"
#include "distributed/backends/shm_kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

// The first two CPUs this process may run on, or {-1, -1} if it has fewer.
std::pair<int, int> two_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {-1, -1};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE && cpus.size() < 2; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus.size() == 2 ? std::pair{cpus[0], cpus[1]} : std::pair{-1, -1};
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

// A reusable spinning barrier for two threads (the waits here are
// microseconds; a sleeping barrier would time the wake-ups).
class SpinBarrier {
 public:
  void arrive_and_wait() {
    uint64_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == 1) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == generation) {
    }
  }

 private:
  std::atomic<int> arrived_{0};
  std::atomic<uint64_t> generation_{0};
};

// What a thread copies in a round: nothing, the buffer it wrote, or the one the other thread wrote.
enum class Copy { none, own, other };

// `rounds` rounds of: each thread writes its source, then copies what
// `what(thread)` says; only the copies are timed. Returns the mean GB/s of
// the copying threads.
double run(int64_t bytes, int rounds, std::pair<int, int> cpus, const std::function<Copy(int)>& what) {
  std::vector<std::byte> source[2] = {std::vector<std::byte>(size_t(bytes)), std::vector<std::byte>(size_t(bytes))};
  std::vector<std::byte> destination[2] = {std::vector<std::byte>(size_t(bytes)),
                                           std::vector<std::byte>(size_t(bytes))};
  SpinBarrier barrier;
  double seconds[2] = {0, 0};
  auto body = [&](int thread) {
    pin(thread == 0 ? cpus.first : cpus.second);
    std::memset(destination[thread].data(), 0, size_t(bytes));  // first touch by its own thread
    for (int round = -2; round < rounds; ++round) {             // two untimed rounds fault the pages in
      std::memset(source[thread].data(), round & 0xff, size_t(bytes));
      barrier.arrive_and_wait();
      if (Copy copy = what(thread); copy != Copy::none) {
        const std::byte* from = source[copy == Copy::own ? thread : 1 - thread].data();
        Clock::time_point start = Clock::now();
        ember::distributed::shm::copy_bytes(destination[thread].data(), from, bytes);
        if (round >= 0) seconds[thread] += std::chrono::duration<double>(Clock::now() - start).count();
      }
      barrier.arrive_and_wait();
    }
  };
  std::thread other(body, 1);
  body(0);
  other.join();
  double total = 0;
  int copiers = 0;
  for (int thread = 0; thread < 2; ++thread)
    if (seconds[thread] > 0) {
      total += double(bytes) * rounds / seconds[thread] / 1e9;
      ++copiers;
    }
  return copiers ? total / copiers : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t min_bytes = std::stoll(ember::bench::flag(argc, argv, "--min-bytes", "262144"));
  const int64_t max_bytes = std::stoll(ember::bench::flag(argc, argv, "--max-bytes", "67108864"));
  std::pair<int, int> cpus = two_cpus();
  if (cpus.first < 0)
    std::printf("# fewer than 2 CPUs are usable: the threads are not pinned, and 'cross-core' may be one core\n");
  else
    std::printf("# threads pinned to CPUs %d and %d; GB/s of one copying thread (bytes copied / its time)\n",
                cpus.first, cpus.second);
  std::printf("# %12s %12s %12s %12s\n", "size(B)", "same core", "one way", "both ways");
  for (int64_t bytes : ember::bench::allreduce_sizes(min_bytes, max_bytes)) {
    const int rounds = ember::bench::allreduce_iterations(bytes);
    double same_core = run(bytes, rounds, cpus, [](int thread) { return thread == 0 ? Copy::own : Copy::none; });
    double one_way = run(bytes, rounds, cpus, [](int thread) { return thread == 1 ? Copy::other : Copy::none; });
    double both_ways = run(bytes, rounds, cpus, [](int) { return Copy::other; });
    std::printf("  %12lld %12.2f %12.2f %12.2f\n", static_cast<long long>(bytes), same_core, one_way, both_ways);
    std::fflush(stdout);
  }
  return 0;
}
