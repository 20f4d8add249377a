// Jobs started without ember launch, by the environment contracts of other
// engines (Note [Job engines] in distributed/README.md), on processes this
// test starts itself: the plain contract a Kubernetes PyTorchJob gives each
// pod (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and the token from a
// secret), and the variables `srun -n 2` gives each task (SLURM_PROCID,
// SLURM_NTASKS, ..., the store found from SLURM_JOB_NODELIST and a port
// derived from SLURM_JOB_ID). No real srun, mpirun or torchrun runs here.
// Every process has a timeout, and nothing may be left behind.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <random>

#include "distributed/environment.h"
#include "distributed/process_runner.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

// What any engine might have left in this test's own environment: each
// process starts without them, then gets only what a test gives it.
const char* const kEngineVariables[] = {
    "RANK",           "WORLD_SIZE",         "LOCAL_RANK",          "LOCAL_WORLD_SIZE",     "GROUP_RANK",
    "MASTER_ADDR",    "MASTER_PORT",        "EMBER_JOB_ID",        "EMBER_STORE_TOKEN",    "EMBER_STORE_HOSTED",
    "EMBER_TIMEOUT",  "EMBER_GLOO_ADDR",    "SLURM_PROCID",        "SLURM_NTASKS",         "SLURM_LOCALID",
    "SLURM_NODEID",   "SLURM_JOB_ID",       "SLURM_STEP_ID",       "SLURM_STEPID",         "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURM_NODELIST", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "PMI_RANK",     "PMI_SIZE",            "MV2_COMM_WORLD_RANK",  "MV2_COMM_WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",  "EMBER_MIXED_PRECISION", "EMBER_GRADIENT_ACCUMULATION_STEPS", "EMBER_USE_CPU",
};

// `distributed_worker <scenario> <args>` with exactly `assignments` of the engine variables.
std::vector<std::string> worker_command(const std::vector<std::string>& assignments, const std::string& scenario,
                                        const std::vector<std::string>& args = {}) {
  std::vector<std::string> command = {"/usr/bin/env"};
  for (const char* name : kEngineVariables) command.insert(command.end(), {"-u", name});
  command.insert(command.end(), {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive", "EMBER_TIMEOUT=30"});
  command.insert(command.end(), assignments.begin(), assignments.end());
  command.insert(command.end(), {EMBER_WORKER, scenario});
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

std::string fresh_token() {
  std::random_device random;
  return fmt::format("cluster-test-{:08x}{:08x}{:08x}{:08x}", random(), random(), random(), random());
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_nothing_left() {
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{});
}

// Starts one process per entry of `per_rank` (its variables) and waits for all.
std::vector<ProcessResult> run_job(const std::vector<std::vector<std::string>>& per_rank, const std::string& scenario,
                                   const std::vector<std::string>& args = {}) {
  std::vector<std::unique_ptr<Process>> processes;
  for (const std::vector<std::string>& assignments : per_rank)
    processes.push_back(std::make_unique<Process>(worker_command(assignments, scenario, args)));
  std::vector<ProcessResult> results;
  for (auto& process : processes) results.push_back(process->wait(90s));  // the destructor kills what is left
  return results;
}

void expect_success(const std::vector<ProcessResult>& results) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_FALSE(results[rank].timed_out) << "rank " << rank << ":\n" << results[rank].output;
    EXPECT_EQ(results[rank].exit_code, 0) << "rank " << rank << ":\n" << results[rank].output;
  }
}

// A loopback port in Slurm's derived range that is free now, and the job id that derives it.
std::pair<int, int> free_slurm_port() {
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int job = int(random() % 1000000);
    const int port = distributed::slurm_port(uint64_t(job), 0);
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
    close(fd);
    if (free) return {job, port};
  }
  ADD_FAILURE() << "no free port in Slurm's derived range";
  return {0, 0};
}

// The Kubernetes PyTorchJob contract: each pod gets RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, and the token from a secret; nothing else.
// Two such processes train as one DDP job equal to one process on the
// global batch (the scenario's check), and both exit 0.
TEST(ClusterEnvironment, PlainVariablesFormADdpJob) {
  const std::string port = std::to_string(free_port()), token = fresh_token();
  std::vector<std::vector<std::string>> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.push_back({"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port,
                     "EMBER_STORE_TOKEN=" + token});
  expect_success(run_job(ranks, "ddp_matches_single_process"));
  expect_nothing_left();
}

// What `srun -n 2` on one node gives each task, and the token exported in
// the batch script: a 2-rank job whose store is on the host list's first
// host at the port derived from the job id. The Accelerator says on rank 0
// that Slurm started it, and where each value came from.
// Catches: SLURM_* ignored (each task would run as a job of one: no
// "rank 0 of 2" line, and two main processes).
TEST(ClusterEnvironment, SlurmVariablesFormAnAcceleratorJob) {
  const auto [job, port] = free_slurm_port();
  const std::string token = fresh_token();
  std::vector<std::vector<std::string>> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.push_back({"SLURM_PROCID=" + std::to_string(rank), "SLURM_NTASKS=2", "SLURM_LOCALID=" + std::to_string(rank),
                     "SLURM_NODEID=0", "SLURM_TASKS_PER_NODE=2", "SLURM_JOB_NODELIST=localhost",
                     "SLURM_JOB_ID=" + std::to_string(job), "EMBER_STORE_TOKEN=" + token});
  const std::vector<ProcessResult> results = run_job(ranks, "accelerator_accumulation_matches_large_batch", {"2", "4"});
  expect_success(results);
  EXPECT_TRUE(contains(results[0].output,
                       fmt::format("ember Accelerator: Slurm: rank 0 of 2, local rank 0 of 2, node 0, store "
                                   "localhost:{}",
                                   port)))
      << results[0].output;
  EXPECT_TRUE(contains(results[0].output, fmt::format("master_port: derived from SLURM_JOB_ID={}", job)))
      << results[0].output;
  EXPECT_FALSE(contains(results[1].output, "ember Accelerator: Slurm")) << "said on rank 1 too:\n" << results[1].output;
  expect_nothing_left();
}

// Every rank says the token is missing and how this engine sets one,
// before any store is tried (no rank waits for another).
TEST(ClusterEnvironment, MissingTokenIsExplainedOnEveryRank) {
  const std::string port = std::to_string(free_port());
  std::vector<std::vector<std::string>> plain, slurm;
  for (int rank = 0; rank < 2; ++rank) {
    plain.push_back({"RANK=" + std::to_string(rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port});
    slurm.push_back({"SLURM_PROCID=" + std::to_string(rank), "SLURM_NTASKS=2", "SLURM_LOCALID=" + std::to_string(rank),
                     "SLURM_JOB_NODELIST=localhost", "MASTER_PORT=" + port});
  }
  for (const auto& [ranks, advice] : {std::pair{plain, std::string("secretKeyRef")},
                                      std::pair{slurm, std::string("in the batch script before srun")}}) {
    const std::vector<ProcessResult> results = run_job(ranks, "ddp_matches_single_process");
    for (size_t rank = 0; rank < results.size(); ++rank) {
      EXPECT_EQ(results[rank].exit_code, 2) << results[rank].output;
      EXPECT_LT(results[rank].seconds, 20) << results[rank].output;
      EXPECT_TRUE(contains(results[rank].output, fmt::format("EMBER_STORE_TOKEN is not set (rank {} of 2", rank)))
          << results[rank].output;
      EXPECT_TRUE(contains(results[rank].output, advice)) << results[rank].output;
    }
  }
  expect_nothing_left();
}

// A program run in an allocation outside srun must not train as a job of
// one: SLURM_NTASKS=4 without SLURM_PROCID stops it, naming both.
TEST(ClusterEnvironment, SlurmAllocationWithoutSrunIsRefused) {
  const std::vector<ProcessResult> results = run_job({{"SLURM_NTASKS=4", "SLURM_JOB_ID=5"}}, "ddp_matches_single_process");
  EXPECT_EQ(results[0].exit_code, 2) << results[0].output;
  EXPECT_TRUE(contains(results[0].output, "found SLURM_NTASKS=4 but not SLURM_PROCID")) << results[0].output;
  expect_nothing_left();
}

}  // namespace
}  // namespace ember::test
