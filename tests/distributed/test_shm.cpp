// The shared-memory backend at the Backend level: N forked processes, each
// with a TcpStore client of a server in this test process, call the backend
// directly, and check every collective against a naive reference computed on
// every rank's inputs; plus its failure modes (a peer killed, stopped, or
// never arriving) and its segment lifecycle (nothing left in /dev/shm).
// Then two jobs through `ember launch` (workers/shm_scenarios.cpp,
// workers/collectives.cpp). The ProcessGroup-level conformance suite runs the
// "shm" backend too (test_collectives.cpp).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "core/dtype.h"
#include "core/error.h"
#include "distributed/backend.h"
#include "distributed/backends/shm_segment.h"
#include "distributed/process_runner.h"
#include "distributed/store/tcp_store.h"

namespace ember::distributed {
namespace {

using namespace std::chrono_literals;

struct RankOutcome {
  int exit_code = -1;
  int signal = 0;
  std::string message;  // the error a rank threw, or what a check found
};

// What a rank writes back through shared memory before _exit.
struct alignas(64) Report {
  int code = -1;
  char message[2048] = {};
};

using RankBody = std::function<void(Backend& backend, int rank, int size)>;

struct JobOptions {
  milliseconds timeout = 20s;  // the backend's
  int absent_rank = -1;        // this rank exits without joining the group
  // Runs in the parent while the ranks run (to kill or stop one).
  std::function<void(const std::vector<pid_t>&)> during = {};
  milliseconds limit = 60s;  // for the whole job
};

// A job of `size` forked ranks, each running `body` on its backend.
std::vector<RankOutcome> run_ranks(int size, const RankBody& body, const JobOptions& options = {}) {
  const milliseconds backend_timeout = options.timeout, limit = options.limit;
  static int job_counter = 0;
  std::string job_id = fmt::format("test{}x{}", getpid(), job_counter++);
  // The store serves from a process of its own: forked from a process that
  // runs a server thread, a rank could inherit a lock that thread held at
  // the fork (ASan's allocator lock did) and deadlock on its first allocation.
  int port_pipe[2];
  EXPECT_EQ(pipe(port_pipe), 0);
  pid_t server_pid = fork();
  if (server_pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    TcpStoreServer server(StoreServerOptions{.token = "shm-test"});
    int server_port = server.port();
    if (write(port_pipe[1], &server_port, sizeof server_port) != sizeof server_port) _exit(1);
    for (;;) pause();  // until the parent kills it
  }
  int port = 0;
  EXPECT_EQ(read(port_pipe[0], &port, sizeof port), ssize_t(sizeof port));
  close(port_pipe[0]);
  close(port_pipe[1]);
  void* shared = mmap(nullptr, sizeof(Report) * size_t(size), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(shared, MAP_FAILED);
  auto* reports = new (shared) Report[size_t(size)];
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    pid_t pid = fork();
    if (pid == 0) {
      setenv("EMBER_JOB_ID", job_id.c_str(), 1);
      if (rank == options.absent_rank) _exit(0);
      int code = 0;
      std::string message;
      try {
        auto store = std::make_shared<TcpStore>(
            StoreOptions{.port = port, .token = "shm-test", .timeout = backend_timeout, .rank = rank});
        BackendContext context;
        context.rank = rank;
        context.size = size;
        for (int r = 0; r < size; ++r) context.global_ranks.push_back(r + 10);
        context.store = store;
        context.store_prefix = "test/";
        context.timeout = backend_timeout;
        auto backend = make_shm_backend(context);
        body(*backend, rank, size);
      } catch (const std::exception& error) {
        code = 2;
        message = error.what();
      }
      reports[rank].code = code;
      std::snprintf(reports[rank].message, sizeof(reports[rank].message), "%s", message.c_str());
      _exit(code);
    }
    pids.push_back(pid);
  }
  if (options.during) options.during(pids);
  std::vector<RankOutcome> outcomes(static_cast<size_t>(size));
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool killed = false;
  for (int rank = 0; rank < size; ++rank) {
    int status = 0;
    while (waitpid(pids[size_t(rank)], &status, WNOHANG) == 0) {
      if (!killed && std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : pids) kill(pid, SIGKILL);
        killed = true;
        ADD_FAILURE() << "rank " << rank << " still running after " << limit.count() << " ms";
      }
      std::this_thread::sleep_for(2ms);
    }
    RankOutcome& outcome = outcomes[size_t(rank)];
    if (WIFEXITED(status)) outcome.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) outcome.signal = WTERMSIG(status);
    outcome.message = reports[rank].message;
  }
  kill(server_pid, SIGKILL);
  waitpid(server_pid, nullptr, 0);
  munmap(shared, sizeof(Report) * size_t(size));
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm"))
    EXPECT_EQ(entry.path().filename().string().find("ember-" + job_id), std::string::npos)
        << "segment left behind: " << entry.path();
  return outcomes;
}

void expect_all_succeed(const std::vector<RankOutcome>& outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_EQ(outcomes[r].exit_code, 0) << "rank " << r << " (signal " << outcomes[r].signal << "): " << outcomes[r].message;
}

// Inside a rank: a failed check throws, so the rank reports it.
#define RANK_CHECK(condition, ...) EMBER_CHECK(condition, __VA_ARGS__)

// Small integers, exact in every dtype, so any summation order gives the same bits.
double input_value(DType dtype, ReduceOp op, int rank, int64_t i) {
  if (dtype == DType::boolean) return (i + rank) % 3 == 0 ? 1 : 0;
  if (op == ReduceOp::product) return double((i + rank) % 2 + 1);
  return double((i * 7 + rank * 13) % 23) - 11;
}

std::vector<std::byte> fill(DType dtype, ReduceOp op, int rank, int64_t count, int64_t offset = 0) {
  std::vector<std::byte> buffer(size_t(count * element_size(dtype)));
  visit_dtype(dtype, [&]<class T>() {
    T* data = reinterpret_cast<T*>(buffer.data());
    for (int64_t i = 0; i < count; ++i) data[i] = T(input_value(dtype, op, rank, offset + i));
  });
  return buffer;
}

// The naive reference: every rank's input reduced one rank at a time.
std::vector<std::byte> reference(DType dtype, ReduceOp op, int size, int64_t count, int64_t offset = 0) {
  std::vector<std::byte> result = fill(dtype, op, 0, count, offset);
  for (int r = 1; r < size; ++r) {
    std::vector<std::byte> other = fill(dtype, op, r, count, offset);
    reduce_host_buffers(result.data(), result.data(), other.data(), count, dtype, op);
  }
  return result;
}

// Counts around the backend's 1 MiB chunks and 64-byte share alignment.
const int64_t kCounts[] = {0, 1, 3, 17, 1000, (1 << 18) - 1, (1 << 18) + 5, 3 * (1 << 18) + 77};

TEST(ShmBackend, AllreduceEveryDTypeAndOpMatchesTheReference) {
  for (int size : {2, 3}) {
    expect_all_succeed(run_ranks(size, [](Backend& backend, int rank, int size) {
      RANK_CHECK(backend.name() == "shm", "name {}", backend.name());
      for (DType dtype : kAllDTypes) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::product, ReduceOp::max, ReduceOp::min}) {
          if (!host_reduction_supported(dtype, op)) continue;
          for (int64_t count : {int64_t(0), int64_t(5), int64_t(1000), int64_t(300'001)}) {
            auto data = fill(dtype, op, rank, count);
            backend.allreduce(data.data(), count, dtype, op);
            RANK_CHECK(data == reference(dtype, op, size, count), "allreduce {} x {} {} differs from the reference",
                       count, dtype, reduce_op_name(op));
          }
        }
      }
    }));
  }
}

// The reference for avg: the exact sum of small integers divided by `size`
// in ComputeType and rounded once, as the reduce pass does.
std::vector<std::byte> reference_mean(DType dtype, int size, int64_t count, int64_t offset = 0) {
  std::vector<std::byte> result = reference(dtype, ReduceOp::sum, size, count, offset);
  visit_dtype(dtype, [&]<class T>() {
    if constexpr (std::is_floating_point_v<ComputeType<T>>) {
      T* data = reinterpret_cast<T*>(result.data());
      for (int64_t i = 0; i < count; ++i) data[i] = T(ComputeType<T>(data[i]) / ComputeType<T>(size));
    }
  });
  return result;
}

// avg, which the shm backend takes itself (supports_avg): each rank divides
// its share as it reduces it, so the gathered shares and reduce_scatter's
// output arrive as means. 3 ranks divide, 2 and 4 multiply by 1/n.
// Mutation caught (run once, failed as expected): the avg kernel finishing
// with the identity instead of the division (it then returns the sum).
TEST(ShmBackend, AvgDividesAsItReduces) {
  for (int size : {2, 3, 4}) {
    expect_all_succeed(run_ranks(size, [](Backend& backend, int rank, int size) {
      RANK_CHECK(backend.supports_avg(), "the shm backend takes avg itself");
      for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
        for (int64_t count : {int64_t(1), int64_t(1000), (int64_t(1) << 18) + 5}) {
          auto data = fill(dtype, ReduceOp::sum, rank, count);
          backend.allreduce(data.data(), count, dtype, ReduceOp::avg);
          RANK_CHECK(data == reference_mean(dtype, size, count), "allreduce avg of {} x {} on {} ranks", count, dtype,
                     size);
          auto input = fill(dtype, ReduceOp::sum, rank, count * size);
          std::vector<std::byte> output(static_cast<size_t>(count * element_size(dtype)));
          backend.reduce_scatter(input.data(), output.data(), count, dtype, ReduceOp::avg);
          RANK_CHECK(output == reference_mean(dtype, size, count, rank * count), "reduce_scatter avg of {} x {} on {} ranks",
                     count, dtype, size);
        }
      }
    }));
  }
}

// 16-bit floats reduce a block of 2048 at a time through f32 buffers
// (shm_kernels.cpp); mutation run once: widening every block from the first
// source's first block failed here (bf16) and in the test above (f16).
TEST(ShmBackend, AllreduceAcrossChunkBoundariesOnFourRanks) {
  expect_all_succeed(run_ranks(4, [](Backend& backend, int rank, int size) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
      for (int64_t count : kCounts) {
        auto data = fill(dtype, ReduceOp::sum, rank, count);
        backend.allreduce(data.data(), count, dtype, ReduceOp::sum);
        RANK_CHECK(data == reference(dtype, ReduceOp::sum, size, count), "allreduce of {} x {} differs", count, dtype);
      }
    }
  }));
}

// Note [Symmetric memory]: an allreduce whose output lies in a symmetric
// allocation reads and writes every rank's region in place. Each rank fills a
// window at an odd offset (a view), leaves guards on both sides, and checks
// the window against the reference and the guards untouched; allreduce_into
// adds pieces outside the region (staged in) beside one already in place.
// Mutations caught: the reduce pass writing only its own region (the peers'
// shares never arrive: 2 and 3 ranks fail), the third and later ranks' copies
// skipped (3 ranks fail), the staging copy skipped (allreduce_into fails).
TEST(ShmBackend, SymmetricAllreduceReadsThePeersRegionsInPlace) {
  for (int size : {2, 3}) {
    expect_all_succeed(run_ranks(size, [](Backend& backend, int rank, int size) {
      for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
        const int64_t element = element_size(dtype);
        for (int64_t count : {int64_t(1), int64_t(1000), 3 * (int64_t(1) << 18) + 77}) {
          const int64_t offset = 3, guard = 5, total = offset + count + guard;
          std::shared_ptr<std::byte> memory = backend.allocate_symmetric(total * element);
          RANK_CHECK(memory != nullptr, "the shm backend gives symmetric memory");
          std::byte* window = memory.get() + offset * element;
          std::vector<std::byte> guards = fill(dtype, ReduceOp::max, rank + 100, total);
          std::memcpy(memory.get(), guards.data(), guards.size());
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
            auto input = fill(dtype, op, rank, count);
            std::memcpy(window, input.data(), input.size());
            backend.allreduce(window, count, dtype, op);
            auto expected = reference(dtype, op, size, count);
            RANK_CHECK(std::memcmp(window, expected.data(), expected.size()) == 0,
                       "symmetric allreduce {} x {} ({}) on {} ranks differs from the reference", count, dtype,
                       reduce_op_name(op), size);
          }
          // Pieces: [0, half) from private memory, [half, count) already in place.
          const int64_t half = count / 2;
          auto input = fill(dtype, ReduceOp::sum, rank, count);
          std::memcpy(window + half * element, input.data() + half * element, size_t((count - half) * element));
          const Backend::Piece pieces[] = {{input.data(), half}, {window + half * element, count - half}};
          backend.allreduce_into(window, pieces, count, dtype, ReduceOp::sum);
          auto expected = reference(dtype, ReduceOp::sum, size, count);
          RANK_CHECK(std::memcmp(window, expected.data(), expected.size()) == 0,
                     "symmetric allreduce_into {} x {} on {} ranks differs from the reference", count, dtype, size);
          RANK_CHECK(std::memcmp(memory.get(), guards.data(), size_t(offset * element)) == 0 &&
                         std::memcmp(window + count * element, guards.data() + (offset + count) * element,
                                     size_t(guard * element)) == 0,
                     "symmetric allreduce of {} x {} wrote outside its window", count, dtype);
        }
      }
    }));
  }
}

// Every rank must pass symmetric memory at the same place: an output in it on
// one rank and in private memory on another is refused on both (the reduce
// pass would read the peer's region where the peer has no data).
// Mutation caught: the symmetric fields left out of the call descriptor
// (rank 1 then returns a wrong sum instead of failing).
TEST(ShmBackend, SymmetricOutputOnOneRankOnlyIsAnError) {
  auto outcomes = run_ranks(2, [](Backend& backend, int rank, int) {
    std::shared_ptr<std::byte> memory = backend.allocate_symmetric(64 * sizeof(float));
    std::vector<float> private_memory(64, 1.0f);
    float* data = rank == 0 ? reinterpret_cast<float*>(memory.get()) : private_memory.data();
    std::fill(data, data + 64, 1.0f);
    backend.allreduce(data, 64, DType::f32, ReduceOp::sum);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(outcomes[size_t(r)].exit_code, 0) << "rank " << r;
    EXPECT_NE(outcomes[size_t(r)].message.find("in symmetric memory (allocation 0, byte 0 of its region)"),
              std::string::npos)
        << outcomes[size_t(r)].message;
  }
}

// Allocations are collective: one of other bytes on one rank fails there and
// on rank 0 at once, naming the allocation, instead of at the timeout.
TEST(ShmBackend, SymmetricAllocationsOfOtherSizesFailNamingThem) {
  auto outcomes = run_ranks(
      2,
      [](Backend& backend, int rank, int) {
        std::shared_ptr<std::byte> first = backend.allocate_symmetric(100);
        std::shared_ptr<std::byte> second = backend.allocate_symmetric(rank == 0 ? 100 : 100'000);
      },
      {.timeout = 60s});
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(outcomes[size_t(r)].exit_code, 0) << "rank " << r;
    EXPECT_NE(outcomes[size_t(r)].message.find("symmetric allocation 1"), std::string::npos) << outcomes[size_t(r)].message;
  }
}

// A peer that exited before a symmetric allocation fails it within the
// collectives' liveness period, naming the peer, not at the timeout (20 s
// here). Mutation caught: share() waiting through the store alone (rank 0
// then fails after 20 s, past this test's 5 s bound).
TEST(ShmBackend, SymmetricAllocationWithAnExitedPeerFailsAtOnce) {
  auto outcomes = run_ranks(2, [](Backend& backend, int rank, int) {
    if (rank == 1) return;  // exits after joining the group
    const auto start = std::chrono::steady_clock::now();
    try {
      backend.allocate_symmetric(4096);
    } catch (const Error& error) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      RANK_CHECK(seconds < 5, "the allocation failed after {:.1f} s: {}", seconds, error.what());
      throw;
    }
  });
  EXPECT_EQ(outcomes[1].exit_code, 0) << outcomes[1].message;
  EXPECT_EQ(outcomes[0].exit_code, 2) << outcomes[0].message;
  EXPECT_NE(outcomes[0].message.find("symmetric allocation 0"), std::string::npos) << outcomes[0].message;
  EXPECT_NE(outcomes[0].message.find("exited"), std::string::npos) << outcomes[0].message;
}

TEST(ShmBackend, BroadcastAllgatherReduceScatterAllToAll) {
  for (int size : {2, 3, 4}) {
    expect_all_succeed(run_ranks(size, [](Backend& backend, int rank, int size) {
      const DType dtype = DType::i32;
      for (int64_t count : kCounts) {
        int64_t nbytes = count * 4;
        for (int root = 0; root < size; ++root) {
          auto data = fill(dtype, ReduceOp::sum, rank, count);
          backend.broadcast(data.data(), nbytes, root);
          RANK_CHECK(data == fill(dtype, ReduceOp::sum, root, count), "broadcast of {} bytes from {}", nbytes, root);
        }
        auto mine = fill(dtype, ReduceOp::sum, rank, count);
        std::vector<std::byte> gathered(static_cast<size_t>(nbytes * size));
        backend.allgather(mine.data(), gathered.data(), nbytes);
        for (int q = 0; q < size; ++q) {
          auto block = gathered.begin() + q * nbytes;
          RANK_CHECK(std::vector<std::byte>(block, block + nbytes) == fill(dtype, ReduceOp::sum, q, count),
                     "allgather of {} bytes: block {}", nbytes, q);
        }

        // reduce_scatter: rank r's block q is elements [q*count, (q+1)*count) of its input.
        auto input = fill(dtype, ReduceOp::sum, rank, count * size);
        std::vector<std::byte> output(static_cast<size_t>(nbytes));
        backend.reduce_scatter(input.data(), output.data(), count, dtype, ReduceOp::sum);
        RANK_CHECK(output == reference(dtype, ReduceOp::sum, size, count, rank * count), "reduce_scatter of {} x int32",
                   count);

        // all_to_all, in place: block q of rank r's input arrives as block r of rank q's output.
        std::vector<int32_t> blocks(size_t(count * size));
        for (int q = 0; q < size; ++q)
          for (int64_t i = 0; i < count; ++i) blocks[size_t(q * count + i)] = int32_t(rank * 1'000'000 + q * 10'000 + i % 9999);
        backend.all_to_all(blocks.data(), blocks.data(), nbytes);
        for (int q = 0; q < size; ++q)
          for (int64_t i = 0; i < count; ++i)
            RANK_CHECK(blocks[size_t(q * count + i)] == int32_t(q * 1'000'000 + rank * 10'000 + i % 9999),
                       "all_to_all of {} bytes: block {} element {}", nbytes, q, i);
        backend.barrier();
      }
    }));
  }
}

// Sends never wait for their receiver (what does not fit the 1 MiB mailbox is
// copied and delivered by a progress thread), and recv matches by tag, so
// each of these would deadlock with blocking or strictly ordered messages.
TEST(ShmBackend, SendRecvMatchTagsAndNeverBlockTheSender) {
  expect_all_succeed(run_ranks(3, [](Backend& backend, int rank, int size) {
    int next = (rank + 1) % size, previous = (rank + size - 1) % size;
    // A ring, two messages each, received in the opposite order (3 MiB ones too).
    for (int64_t count : {int64_t(0), int64_t(10), int64_t(100'000), int64_t(3 << 20)}) {
      auto first = fill(DType::i32, ReduceOp::sum, rank, count);
      auto second = fill(DType::i32, ReduceOp::sum, rank + 5, count);
      backend.send(first.data(), count * 4, next, 1);
      backend.send(second.data(), count * 4, next, 2);
      std::vector<std::byte> got_second(static_cast<size_t>(count * 4)), got_first(static_cast<size_t>(count * 4));
      backend.recv(got_second.data(), count * 4, previous, 2);
      backend.recv(got_first.data(), count * 4, previous, 1);
      RANK_CHECK(got_first == fill(DType::i32, ReduceOp::sum, previous, count), "tag 1 of {} x int32", count);
      RANK_CHECK(got_second == fill(DType::i32, ReduceOp::sum, previous + 5, count), "tag 2 of {} x int32", count);
    }
    // A big send, then a collective the receiver runs before its recv.
    const int64_t big = 3 << 20;
    auto payload = fill(DType::boolean, ReduceOp::sum, 0, big);
    float value = 1;
    if (rank == 0) backend.send(payload.data(), big, 1, 3);
    backend.allreduce(&value, 1, DType::f32, ReduceOp::sum);
    if (rank == 1) {
      std::vector<std::byte> in(static_cast<size_t>(big));
      backend.recv(in.data(), big, 0, 3);
      RANK_CHECK(in == payload && value == 3, "3 MiB message after an allreduce");
    }
    // A size mismatch is an error naming both sizes; the message stays for a matching recv.
    if (rank == 0) {
      uint32_t tag = 5;
      backend.send(&tag, 4, 1, 5);
    } else if (rank == 1) {
      uint64_t wide = 0;
      std::string error;
      try {
        backend.recv(&wide, 8, 0, 5);
      } catch (const Error& caught) {
        error = caught.what();
      }
      RANK_CHECK(error.find("has 4 bytes, this recv expects 8") != std::string::npos, "size mismatch error: {}", error);
      uint32_t tag = 0;
      backend.recv(&tag, 4, 0, 5);
      RANK_CHECK(tag == 5, "tag-5 message after the mismatch: {}", tag);
    }
    backend.barrier();
  }));
}

TEST(ShmBackend, OneRankGroupNeedsNoSegment) {
  expect_all_succeed(run_ranks(1, [](Backend& backend, int, int) {
    float value = 3;
    backend.allreduce(&value, 1, DType::f32, ReduceOp::sum);
    float gathered = 0;
    backend.allgather(&value, &gathered, 4);
    backend.barrier();
    RANK_CHECK(value == 3 && gathered == 3, "one rank: {} {}", value, gathered);
  }));
}

// A rank SIGKILLed in the middle of a stream of allreduces: the others throw
// within about the liveness period, naming the collective and the dead rank
// (directly, or through the first failure's message in the segment), and the
// segment is already gone from /dev/shm.
TEST(ShmBackend, KilledPeerMakesTheOthersFailNamingIt) {
  auto start = std::chrono::steady_clock::now();
  auto outcomes = run_ranks(
      3,
      [](Backend& backend, int rank, int) {
        std::vector<float> data(1 << 20, float(rank));
        for (;;) backend.allreduce(data.data(), int64_t(data.size()), DType::f32, ReduceOp::sum);
      },
      {.during = [](const std::vector<pid_t>& pids) {
        std::this_thread::sleep_for(500ms);
        kill(pids[1], SIGKILL);
      }});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(outcomes[1].signal, SIGKILL);
  for (int r : {0, 2}) {
    EXPECT_EQ(outcomes[size_t(r)].exit_code, 2);
    EXPECT_NE(outcomes[size_t(r)].message.find("allreduce of 1048576 x float32"), std::string::npos) << outcomes[size_t(r)].message;
    EXPECT_NE(outcomes[size_t(r)].message.find("rank 1 (global rank 11"), std::string::npos) << outcomes[size_t(r)].message;
    EXPECT_NE(outcomes[size_t(r)].message.find("exited"), std::string::npos) << outcomes[size_t(r)].message;
  }
}

// A stopped rank is alive, so only the deadline ends the wait; the error says "stopped".
TEST(ShmBackend, StoppedPeerTimesOutNamingIt) {
  auto outcomes = run_ranks(
      2,
      [](Backend& backend, int rank, int) {
        if (rank == 1) raise(SIGSTOP);
        float value = 1;
        backend.allreduce(&value, 1, DType::f32, ReduceOp::sum);
      },
      {.timeout = 1000ms, .during = [](const std::vector<pid_t>& pids) {
         int status = 0;
         waitpid(pids[1], &status, WUNTRACED);  // until it stopped
         std::this_thread::sleep_for(1800ms);
         kill(pids[1], SIGKILL);
       }});
  EXPECT_EQ(outcomes[0].exit_code, 2);
  EXPECT_NE(outcomes[0].message.find("timed out after 1000 ms"), std::string::npos) << outcomes[0].message;
  EXPECT_NE(outcomes[0].message.find("rank 1 (global rank 11"), std::string::npos) << outcomes[0].message;
  EXPECT_NE(outcomes[0].message.find("stopped"), std::string::npos) << outcomes[0].message;
}

// A rank that never joins: rank 0 cannot finish creating the group and names it.
TEST(ShmBackend, MissingRankAtBootstrapIsNamed) {
  auto outcomes = run_ranks(3, [](Backend&, int, int) {}, {.timeout = 1s, .absent_rank = 2});
  EXPECT_EQ(outcomes[0].exit_code, 2);
  EXPECT_NE(outcomes[0].message.find("ranks 2 (global 12) did not attach"), std::string::npos) << outcomes[0].message;
}

const std::vector<std::string> kOmpEnv = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A rank SIGKILLs itself inside a stream of 4 MB allreduces: the job ends
// non-zero well within its 10 s timeout, naming rank 1, and the segment,
// unlinked at startup, is gone. (That the survivors' own errors name the dead
// rank is KilledPeerMakesTheOthersFailNamingIt's check.)
TEST(ShmLaunch, RankKilledMidAllreduceEndsTheJobAndLeavesNoSegment) {
  const test::ProcessResult result =
      test::launch({"--nproc-per-node", "3", "--timeout", "10"}, "shm_killed_mid_allreduce", {"1"}, 60s, kOmpEnv);
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(result.seconds, 10) << result.output;
  // Whoever notices first names rank 1: a survivor's backend, or the launcher
  // (which then stops the survivors, perhaps before they noticed).
  const bool by_backend =
      contains(result.output, "cannot finish on rank") && contains(result.output, "rank 1 (global rank 1, pid");
  const bool by_launcher = contains(result.output, "rank 1 (pid") && contains(result.output, "SIGKILL");
  EXPECT_TRUE(by_backend || by_launcher) << result.output;
  EXPECT_EQ(test::leftover_segments(), std::vector<std::string>{});
}

// Note [Shared-memory collectives], "Budget": the segment stays within 48 MiB
// plus its control blocks up to 16 ranks, and 2 ranks keep 1 MiB chunks.
TEST(ShmLayout, SixteenRanksFitInADefaultContainersShm) {
  for (int ranks = 1; ranks <= 16; ++ranks) {
    const shm::Layout layout(ranks);
    EXPECT_LE(layout.total_bytes, (size_t(48) << 20) + (size_t(1) << 20)) << ranks << " ranks";
    EXPECT_GE(layout.mailbox_chunk_bytes, size_t(4096)) << ranks << " ranks";
  }
  EXPECT_EQ(shm::Layout(2).chunk_bytes, size_t(1) << 20);
  EXPECT_EQ(shm::Layout(2).mailbox_chunk_bytes, size_t(512) << 10);
}

// The minor page faults this process has taken so far.
long minor_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Note [Shared-memory collectives], "Budget": create and open map every page
// of the segment (MAP_POPULATE), so the collectives never take its
// first-touch faults: writing one byte per page of the slots of both
// mappings of a 2-rank segment (2 x 2,048 pages) faults on few of them.
// Mutation caught (run once, failed as expected): the mmaps without
// MAP_POPULATE take one fault per page touched.
TEST(ShmLayout, TheSegmentIsMappedBeforeItsFirstCollective) {
  const shm::Layout layout(2);
  const std::string name = shm::make_segment_name("populate_test/");
  shm::Segment created = shm::Segment::create(name, layout);
  shm::Segment opened = shm::Segment::open(name, layout);
  created.unlink();
  const long before = minor_faults();
  for (const shm::Segment* segment : {&created, &opened})
    for (int r = 0; r < 2; ++r)
      for (size_t buffer = 0; buffer < layout.depth; ++buffer)
        for (size_t byte = 0; byte < layout.chunk_bytes; byte += 4096) segment->slot(r, buffer)[byte] = std::byte{1};
  const long pages = long(2 * 2 * layout.depth * layout.chunk_bytes / 4096);
  // Without MAP_POPULATE every page faults; with it, only AddressSanitizer's
  // shadow of the slots does, one page per 8 touched (512 here) in that build.
  EXPECT_LT(minor_faults() - before, pages / 4) << "of " << pages << " pages touched";
}

// `ember launch` in a mount namespace of its own whose /dev/shm is a tmpfs
// of `size` (a container's --shm-size), or nullopt when this test may not
// make one (no CAP_SYS_ADMIN).
std::optional<test::ProcessResult> launch_with_shm_size(const std::string& size, int ranks,
                                                        const std::string& scenario = "shm_segment_fits",
                                                        const std::vector<std::string>& args = {}) {
  if (test::run_process({"/usr/bin/unshare", "--mount", "/bin/sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"},
                        20s)
          .exit_code != 0)
    return std::nullopt;
  std::vector<std::string> command = {"/usr/bin/unshare", "--mount", "/bin/sh", "-c",
                                      "mount -t tmpfs -o size=" + size + " tmpfs /dev/shm && exec \"$@\"", "sh"};
  const std::vector<std::string> launch =
      test::launch_command({"--nproc-per-node", std::to_string(ranks), "--timeout", "60"}, scenario, args);
  command.insert(command.end(), launch.begin(), launch.end());
  return test::run_process(command, 120s, kOmpEnv);
}

// On a /dev/shm too small for the segment, init fails with an error naming
// the bytes needed and free and what to do, instead of a rank dying of
// SIGBUS at its first touch of a page that does not exist.
// Mutation caught (run once, failed as expected): the sparse ftruncate in
// place of posix_fallocate lets init succeed and rank 0 die of SIGBUS.
TEST(ShmLaunch, TooSmallDevShmIsAnErrorNamingTheBytes) {
  const std::optional<test::ProcessResult> result = launch_with_shm_size("4m", 2);
  if (!result) GTEST_SKIP() << "cannot mount a small tmpfs on /dev/shm in a private mount namespace (needs CAP_SYS_ADMIN)";
  EXPECT_FALSE(result->timed_out) << result->output;
  EXPECT_NE(result->exit_code, 0) << result->output;
  EXPECT_TRUE(contains(result->output, fmt::format("the segment for 2 ranks needs {} bytes (12.0 MiB) of /dev/shm, which "
                                                   "has 4194304 bytes (4.0 MiB) free",
                                                   shm::Layout(2).total_bytes)))
      << result->output;
  EXPECT_TRUE(contains(result->output, "docker run --shm-size")) << result->output;
  EXPECT_FALSE(contains(result->output, "SIGBUS")) << result->output;
  EXPECT_EQ(test::leftover_segments(), std::vector<std::string>{});
}

// Note [Buckets in symmetric memory]: with room for the group's segment
// (12 MiB for 2 ranks) but not for DDP's 2.2 MB of buckets, the big bucket
// is ordinary memory on every rank (rank 0 decides), and DDP trains as one
// process would, saying so once. Mutation caught: the room check removed
// (the job fails naming /dev/shm).
TEST(ShmLaunch, DdpBucketsGoToOrdinaryMemoryWhenDevShmIsFull) {
  const std::optional<test::ProcessResult> result = launch_with_shm_size("13m", 2, "ddp_bucket_memory", {"shm", "either"});
  if (!result) GTEST_SKIP() << "cannot mount a small tmpfs on /dev/shm in a private mount namespace (needs CAP_SYS_ADMIN)";
  EXPECT_FALSE(result->timed_out) << result->output;
  EXPECT_EQ(result->exit_code, 0) << result->output;
  EXPECT_TRUE(contains(result->output, "DistributedDataParallel: warning: /dev/shm has no room for a gradient bucket of "
                                       "1069072 bytes on each of 2 ranks"))
      << result->output;
  EXPECT_EQ(test::leftover_segments(), std::vector<std::string>{});
}

// 16 ranks in a default container's 64 MB /dev/shm, every part of the segment touched.
TEST(ShmLaunch, SixteenRanksRunInA64MegabyteDevShm) {
  const std::optional<test::ProcessResult> result = launch_with_shm_size("64m", 16);
  if (!result) GTEST_SKIP() << "cannot mount a small tmpfs on /dev/shm in a private mount namespace (needs CAP_SYS_ADMIN)";
  EXPECT_EQ(result->exit_code, 0) << result->output;
  for (int rank = 0; rank < 16; ++rank)
    EXPECT_TRUE(contains(result->output, fmt::format("rank {}: fits", rank))) << result->output;
  EXPECT_EQ(test::leftover_segments(), std::vector<std::string>{});
}

// 64 MB (16M f32) through the 1 MiB chunks of a 12 MiB segment, once.
TEST(ShmLaunch, Allreduce64Megabytes) {
  const test::ProcessResult result =
      test::launch({"--nproc-per-node", "2", "--timeout", "60"}, "collectives", {"shm", "big"}, 90s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "5 of 5 checks passed")) << result.output;
  EXPECT_EQ(test::leftover_segments(), std::vector<std::string>{});
}

}  // namespace
}  // namespace ember::distributed
