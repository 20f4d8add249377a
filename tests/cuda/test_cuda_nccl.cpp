// The NCCL backend (distributed/backends/nccl_backend.cpp) on the GPU, label
// `cuda`; every test skips without a GPU. The machine that runs them has one
// GPU and NCCL refuses two ranks on one device, so everything here runs at
// world size 1: the conformance suite the CPU backends pass
// (tests/distributed/workers/collectives.cpp) on backend nccl and on backend
// auto with CUDA tensors, its 64 MB allreduce, the watchdog ending an
// injected stall (workers/nccl_scenarios.cpp), and the Accelerator picking the
// GPU of its local rank. What has not run (several GPUs) is listed in
// distributed/README.md, Note [NCCL watchdog].
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda_compare.h"
#include "distributed/accelerator/accelerator.h"
#include "distributed/process_runner.h"

namespace ember::testing {
namespace {

using namespace std::chrono_literals;
using test::launch;
using test::ProcessResult;

const std::vector<std::string> kOmpEnv = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_nothing_left() {
  EXPECT_EQ(test::leftover_workers(), std::vector<pid_t>{});
  EXPECT_EQ(test::leftover_segments(), std::vector<std::string>{});
}

ProcessResult launch_one_rank(const std::string& scenario, const std::vector<std::string>& args,
                              const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> env = kOmpEnv;
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  return launch({"--nproc-per-node", "1", "--timeout", "120"}, scenario, args, 180s, env);
}

// Every collective, dtype, reduce op and size class of the CPU backends'
// suite, on CUDA tensors through one NCCL communicator.
TEST(CudaNccl, ConformanceSuiteOnBackendNccl) {
  EMBER_REQUIRE_GPU();
  const ProcessResult result = launch_one_rank("collectives", {"nccl"});
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 0: collectives:")) << result.output;
  expect_nothing_left();
}

// Note [Choosing a backend]: "auto" sends CUDA tensors to nccl (and CPU
// tensors to shm), which is how DDP and the Accelerator get NCCL.
TEST(CudaNccl, ConformanceSuiteOnBackendAutoWithCudaTensors) {
  EMBER_REQUIRE_GPU();
  const ProcessResult result = launch_one_rank("collectives", {"auto", "cuda"});
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 0: collectives:")) << result.output;
  expect_nothing_left();
}

TEST(CudaNccl, Allreduce64Megabytes) {
  EMBER_REQUIRE_GPU();
  const ProcessResult result = launch_one_rank("collectives", {"nccl", "big"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "3 of 3 checks passed")) << result.output;
  expect_nothing_left();
}

// Note [NCCL watchdog]: an operation that never completes ends, after the
// group's timeout, in an error naming it instead of a hang.
TEST(CudaNccl, WatchdogEndsAStalledCollective) {
  EMBER_REQUIRE_GPU();
  const ProcessResult result = launch_one_rank("nccl_stall", {}, {"EMBER_NCCL_STALL_OPERATION=2"});
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 0: destroy_process_group returned")) << result.output;
  expect_nothing_left();
}

// The Accelerator runs on cuda:<local rank> and makes it the current GPU.
// The profiler's spans of device collectives say "nccl" for the algorithm
// (NCCL picks ring or tree itself; at world size 1 it is still called) and
// that their time is the launch only. Catches: the group-of-one rule of the
// host backends applied to nccl, or the algorithm field missing.
TEST(CudaNccl, ProfiledCollectivesNameNcclAsTheirAlgorithm) {
  EMBER_REQUIRE_GPU();
  ScratchDirectory directory;
  const std::string profile_dir = (directory.path() / "profile").string();
  const ProcessResult result = launch({"--nproc-per-node", "1", "--timeout", "120", "--profile", profile_dir},
                                      "profiled_collectives", {"nccl", "cuda"}, 180s, kOmpEnv);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::ifstream file(directory.path() / "profile" / "rank0.json");
  ASSERT_TRUE(file.good()) << result.output;
  const nlohmann::json trace = nlohmann::json::parse(file);
  int spans = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] != "X" || event["cat"] != "collective") continue;
    ++spans;
    const bool empty = event["args"]["bytes"] == 0 && event["name"] != "barrier";
    EXPECT_EQ(event["args"]["algorithm"], empty ? "none (empty buffer)" : "nccl") << event["name"];
    EXPECT_EQ(event["args"]["timed"], "launch only") << event["name"];
  }
  EXPECT_EQ(spans, 7);  // allreduce twice, broadcast, allgather, reduce_scatter, all_to_all, barrier
  expect_nothing_left();
}

TEST(CudaNccl, AcceleratorUsesTheGpuOfItsLocalRank) {
  EMBER_REQUIRE_GPU();
  {
    Accelerator accelerator;
    EXPECT_EQ(accelerator.device(), Device(DeviceType::cuda, 0));
    EXPECT_EQ(cuda::current_device(), 0);
  }
  Accelerator on_cpu({.cpu = true});
  EXPECT_EQ(on_cpu.device(), kCPU);

  // One GPU per local process: a local rank without a GPU of its own is an error.
  const std::string local_rank = std::to_string(cuda::device_count());
  setenv("LOCAL_RANK", local_rank.c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(cuda::device_count() + 1).c_str(), 1);
  EXPECT_EMBER_ERROR(Accelerator(), fmt::format("local process {} would use cuda:{}", local_rank, local_rank));
  unsetenv("LOCAL_RANK");
  unsetenv("LOCAL_WORLD_SIZE");
}

}  // namespace
}  // namespace ember::testing
