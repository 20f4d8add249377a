// `ember launch --backend NAME` and EMBER_BACKEND (Note [Choosing a
// backend] in distributed/README.md): the launcher checks the name before
// any worker starts and exports it; init_process_group uses it where the
// program leaves the backend to "auto", refuses a program that names
// another one, and refuses a choice it cannot run (nccl without a GPU, shm
// across hosts) with a message saying why. The worker side is the
// launch_backend scenario (workers/launch_scenarios.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "distributed/process_runner.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kOmpEnv = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A job that failed on its own (not by the test's timeout), leaving nothing behind.
void expect_clean_failure(const ProcessResult& result) {
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{});
}

// Catches: the flag not exported (the workers would run "auto", i.e. shm),
// or EMBER_BACKEND not read where the default group's backend is chosen.
TEST(LaunchBackend, FlagAndEnvironmentPickTheBackendThatRuns) {
  ProcessResult flag = launch({"--nproc-per-node", "2", "--backend", "reference"}, "launch_backend", {}, 60s, kOmpEnv);
  expect_clean_success(flag);
  EXPECT_TRUE(contains(flag.output, "EMBER_BACKEND=reference")) << flag.output;
  for (const char* rank : {"[rank 0] rank 0", "[rank 1] rank 1"})
    EXPECT_TRUE(contains(flag.output, std::string(rank) + ": backend reference, allreduce sum 1")) << flag.output;

  std::vector<std::string> env = kOmpEnv;
  env.push_back("EMBER_BACKEND=gloo");
  ProcessResult inherited = launch({"--nproc-per-node", "2"}, "launch_backend", {}, 60s, env);
  expect_clean_success(inherited);
  for (const char* rank : {"[rank 0] rank 0", "[rank 1] rank 1"})
    EXPECT_TRUE(contains(inherited.output, std::string(rank) + ": backend gloo, allreduce sum 1")) << inherited.output;

  // A program that names the backend the flag names agrees with it.
  ProcessResult agreeing =
      launch({"--nproc-per-node", "2", "--backend", "gloo"}, "launch_backend", {"gloo"}, 60s, kOmpEnv);
  expect_clean_success(agreeing);
  EXPECT_TRUE(contains(agreeing.output, "[rank 0] rank 0: backend gloo")) << agreeing.output;
}

// Catches: one of the two silently winning (resolve_backend returning the
// program's name whatever the environment says: the job then runs on shm).
TEST(LaunchBackend, ProgramAndEnvironmentNamingDifferentBackendsIsAnError) {
  ProcessResult result =
      launch({"--nproc-per-node", "2", "--backend", "gloo"}, "launch_backend", {"shm"}, 60s, kOmpEnv);
  expect_clean_failure(result);
  EXPECT_TRUE(contains(result.output, "the program asks for backend 'shm' but EMBER_BACKEND (ember launch --backend) "
                                      "is 'gloo'"))
      << result.output;
  EXPECT_FALSE(contains(result.output, "allreduce sum")) << result.output;
}

// Catches: an unknown name reaching the workers (the launcher must refuse
// it before any starts) or being taken for "auto" in the workers.
TEST(LaunchBackend, UnknownNamesAreErrorsNamingTheValueAndTheChoices) {
  ProcessResult flag = launch({"--nproc-per-node", "2", "--backend", "mpi"}, "launch_backend", {}, 30s, kOmpEnv);
  expect_clean_failure(flag);
  EXPECT_TRUE(contains(flag.output, "--backend 'mpi' is not a backend: use auto, shm, gloo, reference or nccl"))
      << flag.output;
  EXPECT_FALSE(contains(flag.output, "[rank")) << flag.output;

  std::vector<std::string> env = kOmpEnv;
  env.push_back("EMBER_BACKEND=Gloo");
  ProcessResult inherited = launch({"--nproc-per-node", "2"}, "launch_backend", {}, 30s, env);
  expect_clean_failure(inherited);
  EXPECT_TRUE(contains(inherited.output, "EMBER_BACKEND is 'Gloo': use auto, shm, gloo, reference or nccl"))
      << inherited.output;
}

// The GPUs are hidden from this suite (tests/CMakeLists.txt), so nccl has none.
// Catches: a worker that waits for a communicator it cannot make, or an error
// that does not say why.
TEST(LaunchBackend, NcclWithoutAGpuIsAnError) {
  ProcessResult result = launch({"--nproc-per-node", "2", "--backend", "nccl"}, "launch_backend", {}, 30s, kOmpEnv);
  expect_clean_failure(result);
  EXPECT_TRUE(contains(result.output, "init_process_group (EMBER_BACKEND): backend nccl needs")) << result.output;
}

// Two launchers on this machine are two nodes (their node ranks differ), so
// shm is refused across them. Catches: check_shm_reaches_every_rank removed
// (here the job would then run, on one machine's /dev/shm; across real hosts
// node 1's ranks would wait for a segment they can never open until the
// timeout, with no word of why).
TEST(LaunchBackend, ShmAcrossNodesIsAnErrorNamingEachRanksHost) {
  std::string port = std::to_string(free_port());
  std::random_device random;
  std::vector<std::string> env = kOmpEnv;
  env.push_back("EMBER_STORE_TOKEN=launch-backend-" + std::to_string(random()) + std::to_string(random()));
  std::vector<std::string> common = {"--nnodes", "2", "--master-port", port, "--timeout", "20", "--backend", "shm"};
  std::vector<std::string> node0 = common, node1 = common;
  node0.insert(node0.end(), {"--node-rank", "0"});
  node1.insert(node1.end(), {"--node-rank", "1"});
  Process first(launch_command(node0, "launch_backend"), env);
  ASSERT_TRUE(first.wait_for_output("(hosted here)", 20s));
  Process second(launch_command(node1, "launch_backend"), env);
  ProcessResult result1 = second.wait(60s);
  ProcessResult result0 = first.wait(60s);
  expect_clean_failure(result0);
  expect_clean_failure(result1);
  // Node 0's rank always says why; node 1's may instead lose the store,
  // which node 0's launcher closes as soon as its rank failed.
  EXPECT_TRUE(contains(result0.output, "backend shm needs every rank of the group on one host")) << result0.output;
  EXPECT_TRUE(contains(result0.output, "rank 0: ") && contains(result0.output, "/0, rank 1: ")) << result0.output;
  EXPECT_TRUE(contains(result0.output, "/1)")) << result0.output;
}

}  // namespace
}  // namespace ember::test
