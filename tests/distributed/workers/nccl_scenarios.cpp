// The NCCL backend's watchdog on a real GPU, run by tests/cuda/test_cuda_nccl.cpp:
//   nccl_stall   with EMBER_NCCL_STALL_OPERATION=2 (distributed/backends/nccl_backend.h):
//                the second allreduce never completes; a barrier waiting for
//                it must raise after the group's timeout (1 s) naming that
//                allreduce, the rank and the timeout, the next call must fail
//                at once, and destroy_process_group must not hang.
// Prints what it found; exits 0 when every check held.
#include <chrono>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/ops/creation.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

EMBER_SCENARIO(nccl_stall) {
  using namespace std::chrono_literals;
  const auto timeout = 1000ms;
  distributed::ProcessGroup& group = distributed::init_process_group({.backend = "nccl", .timeout = timeout});
  const int local_rank = distributed::read_distributed_env().local_rank;
  cuda::set_device(local_rank);
  const Device device(DeviceType::cuda, local_rank);
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok) ++failures;
    std::printf("rank %d: %s%s\n", group.rank(), ok ? "" : "FAILED: ", what.c_str());
  };

  Tensor t = full({8}, Scalar(2.0), {.device = device});
  group.allreduce(t, distributed::ReduceOp::sum)->wait();  // the first operation completes
  expect(t.to_vector<double>() == std::vector<double>(8, 2.0), "the first allreduce completed");

  // The second one is queued (so its Work completes) but never runs.
  const auto start = Clock::now();
  group.allreduce(t, distributed::ReduceOp::sum)->wait();
  std::string waited;
  try {
    group.barrier()->wait();
  } catch (const Error& error) {
    waited = error.what();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  expect(contains(waited, "allreduce([8], float32, sum) did not complete within the timeout of 1000 ms") &&
             contains(waited, "rank 0 of 1"),
         fmt::format("the waiting barrier raised: {}", waited.empty() ? "no error" : waited));
  expect(seconds >= 1.0 && seconds < 10.0, fmt::format("after {:.1f} s (timeout 1 s)", seconds));

  std::string next;
  try {
    group.allreduce(t, distributed::ReduceOp::sum)->wait();
  } catch (const Error& error) {
    next = error.what();
  }
  expect(contains(next, "an earlier operation of the group failed") &&
             contains(next, "allreduce([8], float32, sum) did not complete"),
         fmt::format("the next call raised: {}", next.empty() ? "no error" : next));

  distributed::destroy_process_group();
  expect(true, "destroy_process_group returned");
  std::fflush(stdout);
  return failures == 0 ? 0 : 1;
}

}  // namespace ember::test
