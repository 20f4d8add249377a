// The device backends' watchdog (distributed/backends/watchdog.h, Note [NCCL
// watchdog]) with flags in place of CUDA events and NCCL: operations that
// complete release their tensors; one that does not complete makes the
// watchdog abort once, after the timeout, and every later check (and a
// caller waiting in wait_idle) throws a message naming the operation, the
// rank and the timeout; an asynchronous error of the communicator does the
// same at once. The NCCL backend's use of it runs in tests/cuda/test_cuda_nccl.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/error.h"
#include "distributed/backends/watchdog.h"

namespace ember::distributed {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kWhere = "nccl backend, rank 1 of 2 (global rank 1) in group pg/0/ on cuda:0";

// A watchdog whose communicator reports `async_error` (when set) and counts its aborts.
struct Fixture {
  explicit Fixture(std::chrono::milliseconds timeout)
      : watchdog({.timeout = timeout, .poll_interval = 5ms, .where = kWhere},
                 [this] {
                   std::lock_guard lock(mutex);
                   return async_error;
                 },
                 [this] { ++aborts; }) {}
  void set_async_error(const std::string& error) {
    std::lock_guard lock(mutex);
    async_error = error;
  }
  std::mutex mutex;
  std::string async_error;
  std::atomic<int> aborts = 0;
  Watchdog watchdog;
};

// An operation that completes when `done` is set, holding `tensors` (any object) until then.
Watchdog::Operation operation(const std::string& description, const std::shared_ptr<std::atomic<bool>>& done,
                              const std::shared_ptr<const void>& tensors = nullptr) {
  return {.description = description, .done = [done] { return done->load(); }, .keep_alive = tensors};
}

std::string message_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Watchdog, ReleasesWhatCompletedOperationsHeld) {
  Fixture fixture(10s);
  auto done = std::make_shared<std::atomic<bool>>(false);
  auto tensors = std::make_shared<int>(7);
  fixture.watchdog.watch(operation("allreduce([4], float32, sum)", done, tensors));
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(tensors.use_count(), 2);  // held while not done
  EXPECT_EQ(fixture.watchdog.in_flight(), 1u);
  done->store(true);
  fixture.watchdog.wait_idle();
  EXPECT_EQ(fixture.watchdog.in_flight(), 0u);
  EXPECT_EQ(tensors.use_count(), 1);
  EXPECT_NO_THROW(fixture.watchdog.check());
  EXPECT_EQ(fixture.aborts, 0);
}

// Note [NCCL watchdog]: a collective that never completes (a peer that never
// came) ends in an abort after the timeout, never in a hang.
TEST(Watchdog, AnOperationPastTheTimeoutAbortsOnceAndNamesItself) {
  Fixture fixture(200ms);
  auto first = std::make_shared<std::atomic<bool>>(true);
  auto stuck = std::make_shared<std::atomic<bool>>(false);
  auto later = std::make_shared<std::atomic<bool>>(false);
  const auto start = Clock::now();
  fixture.watchdog.watch(operation("broadcast([3], int64, root 0)", first));
  fixture.watchdog.watch(operation("allreduce([8], float32, sum)", stuck));
  fixture.watchdog.watch(operation("barrier()", later));
  EXPECT_NO_THROW(fixture.watchdog.check());  // not yet: the deadline is 200 ms away

  const std::string waited = message_of([&] { fixture.watchdog.wait_idle(); });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GE(seconds, 0.2);
  EXPECT_LT(seconds, 5.0) << "the watchdog took " << seconds << " s to give up";
  EXPECT_EQ(waited, kWhere +
                        ": allreduce([8], float32, sum) did not complete within the timeout of 200 ms (a rank of the "
                        "group stopped calling collectives, died, or called a different one); the communicator was "
                        "aborted, so the group runs no more collectives: end the process (ember launch "
                        "--max-restarts restarts the job)");
  EXPECT_TRUE(fixture.watchdog.failed());
  EXPECT_EQ(message_of([&] { fixture.watchdog.check(); }), waited);  // every later call
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fixture.aborts, 1);

  // After the abort the stuck operations end; the watchdog still releases them.
  stuck->store(true);
  later->store(true);
  for (int i = 0; i < 200 && fixture.watchdog.in_flight() > 0; ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(fixture.watchdog.in_flight(), 0u);
  EXPECT_EQ(fixture.aborts, 1);
}

TEST(Watchdog, AnAsynchronousErrorAbortsAtOnceNamingTheOperationInFlight) {
  Fixture fixture(100s);
  auto stuck = std::make_shared<std::atomic<bool>>(false);
  fixture.watchdog.watch(operation("reduce_scatter(output [2], input [4], bfloat16, max)", stuck));
  fixture.set_async_error("remote process exited or there was a network error");
  const auto start = Clock::now();
  const std::string waited = message_of([&] { fixture.watchdog.wait_idle(); });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
  EXPECT_NE(waited.find(kWhere + ": NCCL reported an asynchronous error while reduce_scatter(output [2], input [4], "
                                 "bfloat16, max) was in flight: remote process exited or there was a network error"),
            std::string::npos)
      << waited;
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(fixture.aborts, 1);
}

TEST(Watchdog, AFailingProbeOfAnOperationCountsAsAFailure) {
  Fixture fixture(100s);
  fixture.watchdog.watch({.description = "allgather(output [2, 1], input [1], float16)",
                          .done = []() -> bool { throw Error("CUDA error in cudaEventQuery: an illegal memory access"); },
                          .keep_alive = nullptr});
  const std::string waited = message_of([&] { fixture.watchdog.wait_idle(); });
  EXPECT_EQ(waited, kWhere +
                        ": checking whether allgather(output [2, 1], input [1], float16) completed failed: CUDA error "
                        "in cudaEventQuery: an illegal memory access");
}

// The backend's own failures (an NCCL call that failed) go through fail():
// the first reason wins and the communicator is aborted once.
TEST(Watchdog, FailRecordsTheFirstReasonAndAbortsOnce) {
  Fixture fixture(100s);
  fixture.watchdog.fail("ncclAllReduce failed: invalid usage");
  fixture.watchdog.fail("a second reason");
  EXPECT_EQ(message_of([&] { fixture.watchdog.check(); }), "ncclAllReduce failed: invalid usage");
  EXPECT_EQ(message_of([&] { fixture.watchdog.wait_idle(); }), "ncclAllReduce failed: invalid usage");
  EXPECT_EQ(fixture.aborts, 1);
}

// Destroying a watchdog with operations in flight stops its thread and
// releases what they held; it does not abort (the backend decides that).
TEST(Watchdog, DestroyingReleasesHeldOperationsWithoutAborting) {
  auto tensors = std::make_shared<int>(1);
  std::atomic<int> aborts = 0;
  {
    Watchdog watchdog({.timeout = 100s, .poll_interval = 5ms, .where = kWhere}, [] { return std::string(); },
                      [&] { ++aborts; });
    watchdog.watch({.description = "send([4], float32, dst 1, tag 0)", .done = [] { return false; }, .keep_alive = tensors});
    EXPECT_EQ(tensors.use_count(), 2);
  }
  EXPECT_EQ(tensors.use_count(), 1);
  EXPECT_EQ(aborts, 0);
}

}  // namespace
}  // namespace ember::distributed
