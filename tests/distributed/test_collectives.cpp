// ProcessGroup's collectives on real processes (distributed/process_group.h,
// distributed/backends/*): every collective on 1 to 4 ranks with each host
// backend, the 64 MB allreduce, the choice of backend, debug mode's mismatch
// report, a peer dying or stalling mid-job, environment errors and a group of
// one without the launcher (the nccl backend: tests/cuda/test_cuda_nccl.cpp). The
// worker side is tests/distributed/workers/collectives.cpp, which checks each
// result against values computed from every rank's inputs. Every test ends
// with nothing left: no worker process, no /dev/shm/ember-* segment.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "distributed/process_runner.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kOmpEnv = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};

void expect_nothing_left() {
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{});
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

ProcessResult launch_ranks(int ranks, const std::string& scenario, const std::vector<std::string>& args,
                           int timeout_seconds = 60) {
  return launch({"--nproc-per-node", std::to_string(ranks), "--timeout", std::to_string(timeout_seconds)}, scenario,
                args, std::chrono::seconds(timeout_seconds + 30), kOmpEnv);
}

// (backend, ranks)
class EveryCollective : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(EveryCollective, MatchesLocallyComputedValues) {
  const auto& [backend, ranks] = GetParam();
  const ProcessResult result = launch_ranks(ranks, "collectives", {backend});
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  expect_nothing_left();
}

INSTANTIATE_TEST_SUITE_P(Backends, EveryCollective,
                         ::testing::Combine(::testing::Values("gloo", "shm"), ::testing::Values(1, 2, 3, 4)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "_ranks";
                         });

// One large buffer, once: 16M f32 elements through Gloo's ring on 2 ranks.
TEST(Collectives, Allreduce64MegabytesGloo) {
  const ProcessResult result = launch_ranks(2, "collectives", {"gloo", "big"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "5 of 5 checks passed")) << result.output;
  expect_nothing_left();
}

// Without RANK/WORLD_SIZE, init_process_group makes a group of one (with a
// private store) on which every collective works.
TEST(Collectives, GroupOfOneWithoutLauncher) {
  for (const std::string backend : {"gloo", "shm"}) {
    const ProcessResult result = run_process({EMBER_WORKER, "collectives", backend}, 30s, kOmpEnv);
    EXPECT_EQ(result.exit_code, 0) << backend << ":\n" << result.output;
    EXPECT_TRUE(contains(result.output, "rank 0: collectives:")) << result.output;
  }
  expect_nothing_left();
}

// Note [Choosing a backend]: ranks of one node get "shm" from "auto"; a
// "gloo" subgroup of the same ranks works beside it.
TEST(Collectives, AutoPicksSharedMemoryOnOneNode) {
  const ProcessResult result = launch_ranks(2, "collectives_backend", {}, 30);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 0: backend shm")) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 1: subgroup backend gloo, allreduce ok")) << result.output;
  expect_nothing_left();
}

// Note [Collective debug mode]: ranks 0 and 1 disagree at their third
// collective; every rank's error names what each rank called. Without a
// mismatch, the store does not grow with the number of collectives.
TEST(Collectives, DebugModeNamesEachRanksCall) {
  for (const std::string backend : {"gloo", "shm"}) {
    const ProcessResult result = launch_ranks(3, "collectives_mismatch", {backend}, 30);
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_FALSE(result.timed_out) << result.output;
    EXPECT_TRUE(contains(result.output,
                         "collective mismatch at call 3: rank 0 called allreduce([4], float32, sum), "
                         "rank 1 called broadcast([4], float32, root 0), rank 2 called allreduce([4], float32, sum)"))
        << backend << ":\n" << result.output;
    const ProcessResult store = launch_ranks(3, "collectives_debug_store", {backend}, 30);
    EXPECT_EQ(store.exit_code, 0) << backend << ":\n" << store.output;
    expect_nothing_left();
  }
}

// A recv of another size than its message, longer and shorter: an error
// naming both sizes, on both backends. Catches: Gloo's own matching (a
// shorter message left the recv's tail stale with exit code 0; a longer one
// aborted the process inside Gloo); an empty send that sent nothing (the
// recv of 4 floats waited for the timeout, here the test's 30 s).
TEST(Collectives, ARecvOfAnotherSizeThanItsMessageIsAnError) {
  for (const std::string backend : {"gloo", "shm"}) {
    for (const auto& [sent, received] :
         {std::pair{"4", "8"}, std::pair{"8", "4"}, std::pair{"0", "4"}, std::pair{"4", "0"}}) {
      const ProcessResult result = launch_ranks(2, "recv_size_mismatch", {backend, sent, received}, 30);
      EXPECT_EQ(result.exit_code, 0) << backend << " " << sent << " -> " << received << ":\n" << result.output;
    }
  }
  expect_nothing_left();
}

// Note [Same collective on every rank]: without debug mode the shm backend
// compares each collective's kind, size, dtype, op and root across ranks.
// Catches: the calls not compared (rank 0 got 2 2 2 2 and rank 1 2 2 2 2 0 0 0 0
// from all-reduces of 4 and 8 elements, exit code 0; a broadcast paired with
// an all-reduce, as an evaluation forward on one DDP rank does); an empty
// all-reduce returning before the pipeline (the other ranks waited for the
// group's timeout, here the test's 30 s).
TEST(Collectives, SharedMemoryRefusesCollectivesThatDifferAcrossRanks) {
  // The first rank to fail ends the job, and the launcher stops the others,
  // perhaps before they print (under load, rank 0's message was missing):
  // either side's message must name both calls.
  const auto names_both = [](const std::string& output, const std::string& first, const std::string& second) {
    return contains(output, first + " where " + second);
  };
  const ProcessResult other = launch_ranks(2, "collectives_mismatch", {"shm", "nodebug"}, 30);
  EXPECT_NE(other.exit_code, 0) << other.output;
  EXPECT_FALSE(other.timed_out) << other.output;
  EXPECT_TRUE(names_both(other.output, "shm backend: rank 0 (global 0) runs allreduce of 4 x float32 (sum)",
                         "rank 1 (global 1) runs broadcast of 16 bytes from rank 0") ||
              names_both(other.output, "shm backend: rank 1 (global 1) runs broadcast of 16 bytes from rank 0",
                         "rank 0 (global 0) runs allreduce of 4 x float32 (sum)"))
      << other.output;
  const ProcessResult sizes = launch_ranks(3, "collectives_mismatch", {"shm", "sizes"}, 30);
  EXPECT_NE(sizes.exit_code, 0) << sizes.output;
  EXPECT_FALSE(sizes.timed_out) << sizes.output;
  EXPECT_TRUE(contains(sizes.output, "where rank 1 (global 1) runs allreduce of 8 x float32 (sum)") ||
              contains(sizes.output, "rank 1 (global 1) runs allreduce of 8 x float32 (sum) where rank"))
      << sizes.output;
  const ProcessResult empty = launch_ranks(2, "collectives_mismatch", {"shm", "empty"}, 30);
  EXPECT_NE(empty.exit_code, 0) << empty.output;
  EXPECT_FALSE(empty.timed_out) << empty.output;
  EXPECT_TRUE(names_both(empty.output, "rank 0 (global 0) runs allreduce of 4 x float32 (sum)",
                         "rank 1 (global 1) runs allreduce of 0 x float32 (sum)") ||
              names_both(empty.output, "rank 1 (global 1) runs allreduce of 0 x float32 (sum)",
                         "rank 0 (global 0) runs allreduce of 4 x float32 (sum)"))
      << empty.output;
  // Note [Symmetric memory]: a tensor from empty_symmetric on one rank only.
  // Mutation caught: empty_symmetric returning an ordinary tensor on shm (the
  // mismatch then goes unnoticed, as every tensor is ordinary).
  const ProcessResult symmetric = launch_ranks(2, "collectives_mismatch", {"shm", "symmetric"}, 30);
  EXPECT_NE(symmetric.exit_code, 0) << symmetric.output;
  EXPECT_FALSE(symmetric.timed_out) << symmetric.output;
  EXPECT_TRUE(contains(symmetric.output,
                       "runs allreduce of 4 x float32 (sum) in symmetric memory (allocation 0, byte 0 of its region)"))
      << symmetric.output;
  expect_nothing_left();
}

// A rank that disappears mid-job makes the others' next collective fail with
// an error naming it, well within the timeout, never a hang (the reference
// backend: through its transport's recv).
TEST(Collectives, PeerDeathFailsTheOthers) {
  for (const std::string backend : {"gloo", "shm", "reference"}) {
    const ProcessResult result = launch_ranks(3, "collectives_peer_dies", {backend}, 10);
    EXPECT_FALSE(result.timed_out) << result.output;
    EXPECT_EQ(result.exit_code, 0) << backend << ":\n" << result.output;
    EXPECT_TRUE(contains(result.output, "rank 0: peer death reported after")) << result.output;
    EXPECT_TRUE(contains(result.output, "rank 2: peer death reported after")) << result.output;
    expect_nothing_left();
  }
}

// A rank that stops calling collectives makes the others' wait end after
// about the timeout (2 s here) with an error naming the collective and rank.
TEST(Collectives, StalledPeerTimesOut) {
  for (const std::string backend : {"gloo", "shm"}) {
    const ProcessResult result = launch_ranks(3, "collectives_peer_stalls", {backend}, 2);
    EXPECT_FALSE(result.timed_out) << result.output;
    EXPECT_EQ(result.exit_code, 0) << backend << ":\n" << result.output;
    EXPECT_TRUE(contains(result.output, "rank 0: stall reported after")) << result.output;
    expect_nothing_left();
  }
}

// Ranks that exit with their groups still alive end cleanly (exit code 0,
// nothing left behind).
TEST(Collectives, ExitWithoutDestroyIsClean) {
  for (const std::string backend : {"gloo", "shm"}) {
    const ProcessResult result = launch_ranks(3, "collectives_no_destroy", {backend}, 20);
    EXPECT_EQ(result.exit_code, 0) << backend << ":\n" << result.output;
    expect_nothing_left();
  }
}

// Backend nccl needs a CUDA build and a GPU (this suite hides the GPUs:
// tests/CMakeLists.txt); init_process_group says which is missing. The nccl
// backend itself runs in tests/cuda/test_cuda_nccl.cpp.
TEST(Collectives, NcclWithoutAGpuIsRefused) {
  const ProcessResult result = run_process({EMBER_WORKER, "collectives", "nccl"}, 30s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_TRUE(contains(result.output, "init_process_group: backend nccl needs")) << result.output;
  expect_nothing_left();
}

// read_distributed_env names the malformed variable.
TEST(Collectives, MalformedEnvironmentIsNamed) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"RANK=abc", "WORLD_SIZE=2", "MASTER_PORT=1"}, "RANK='abc' is not an integer"},
      {{"RANK=2", "WORLD_SIZE=2", "MASTER_PORT=1"}, "RANK=2 is out of range [0, 1]"},
      {{"RANK=0"}, "RANK and WORLD_SIZE must be set together (WORLD_SIZE is missing; found RANK=0"},
      {{"RANK=0", "WORLD_SIZE=2"}, "MASTER_PORT is not set"},
      {{"RANK=0", "WORLD_SIZE=1", "EMBER_TIMEOUT=soon"}, "EMBER_TIMEOUT='soon' is not a positive number of seconds"},
      {{"EMBER_DISTRIBUTED_DEBUG=yes"}, "EMBER_DISTRIBUTED_DEBUG='yes' is not a flag"},
  };
  for (const auto& [env, message] : cases) {
    std::vector<std::string> full_env = kOmpEnv;
    full_env.insert(full_env.end(), env.begin(), env.end());
    const ProcessResult result = run_process({EMBER_WORKER, "collectives", "gloo"}, 30s, full_env);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    EXPECT_TRUE(contains(result.output, message)) << "expected '" << message << "' in:\n" << result.output;
  }
  expect_nothing_left();
}

}  // namespace
}  // namespace ember::test
