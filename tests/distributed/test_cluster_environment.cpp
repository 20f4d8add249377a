// Jobs started without ember launch, by the environment contracts of other
// engines (Note [Job engines] in distributed/README.md), on processes this
// test starts itself: the plain contract a Kubernetes PyTorchJob gives each
// pod (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and the token from a
// secret), and the variables `srun -n 2` gives each task (SLURM_PROCID,
// SLURM_NTASKS, ..., the store found from SLURM_JOB_NODELIST and a port
// derived from SLURM_JOB_ID); and jobs started by a real `mpirun` (Open
// MPI), a real `torchrun` (Debian's python3-torch) and a real `srun` (a
// Slurm cluster of one node this test starts: slurm_cluster.h), all
// installed by scripts/common.sh and skipped, saying so, where absent.
// Every process has a timeout, and nothing may be left behind.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <regex>

#include "distributed/environment.h"
#include "distributed/process_runner.h"
#include "distributed/slurm_cluster.h"
#include "support/test_support.h"

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
    if (loopback_port_free(port)) return {job, port};
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

// A survivor's error names rank 1 among the peers that exited (the others,
// alive, may be listed before it).
void expect_rank_one_named_as_exited(const std::string& output) {
  static const std::regex exited(R"(a peer exited before doing its part: .*rank 1 \(global rank 1, pid \d+, exited\))");
  EXPECT_TRUE(std::regex_search(output, exited)) << output;
}

// --- A real mpirun ----------------------------------------------------------------

bool mpirun_found() { return std::filesystem::exists("/usr/bin/mpirun"); }

// `mpirun -n <processes> distributed_worker <scenario> <args>` as a user
// runs it on one host, as root in a container: the store's port and the
// token exported to mpirun and passed on by -x (never on a command line).
ProcessResult mpirun(int processes, const std::string& scenario, const std::vector<std::string>& args = {}) {
  std::vector<std::string> command = worker_command(
      {"MASTER_PORT=" + std::to_string(free_port()), "EMBER_STORE_TOKEN=" + fresh_token()}, scenario, args);
  const auto worker = std::find(command.begin(), command.end(), std::string(EMBER_WORKER));
  command.insert(worker, {"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "-n", std::to_string(processes)});
  for (const char* name : {"MASTER_PORT", "EMBER_STORE_TOKEN", "OMP_NUM_THREADS", "OMP_WAIT_POLICY", "EMBER_TIMEOUT"}) {
    const auto at = std::find(command.begin(), command.end(), std::string(EMBER_WORKER));
    command.insert(at, {"-x", name});
  }
  return run_process(command, 90s);
}

// mpirun -n 2 and -n 3 on one host: each process learns its rank, the world
// size and its local rank from OMPI_COMM_WORLD_*, the store is this host's,
// and the job trains as one (the scenarios compare every rank's parameters
// with one process on the global batch). The Accelerator names Open MPI once.
// Catches: OMPI_COMM_WORLD_* ignored (each process a job of one: three
// "rank 0 of 1" lines, and the scenarios' comparisons fail).
TEST(JobEngines, MpirunStartsOneJob) {
  if (!mpirun_found()) GTEST_SKIP() << "/usr/bin/mpirun not found (scripts/test.sh installs openmpi-bin)";
  const ProcessResult ddp = mpirun(2, "ddp_matches_single_process");
  expect_clean_success(ddp);
  EXPECT_TRUE(contains(ddp.output, "rank 1: after 20 steps max |ddp - single process|")) << ddp.output;
  const ProcessResult accelerator = mpirun(3, "accelerator_accumulation_matches_large_batch", {"2", "4"});
  expect_clean_success(accelerator);
  const std::string line = "ember Accelerator: Open MPI: rank 0 of 3, local rank 0 of 3, node 0, store 127.0.0.1:";
  EXPECT_TRUE(contains(accelerator.output, line)) << accelerator.output;
  EXPECT_EQ(accelerator.output.find(line), accelerator.output.rfind(line)) << "said twice:\n" << accelerator.output;
  expect_nothing_left();
}

// A task that exits with a code, or is killed, ends the whole mpirun job
// with a failing status, and no process or segment is left. Open MPI reports
// the first failed process it reaps: the killed rank (128 + 9) as a rule, but
// the survivors notice the dead peer within milliseconds and exit with the
// worker's error status 2, and under load mpirun may reap one of them first.
// Catches: a job that hangs on the dead rank or ends with status 0.
TEST(JobEngines, MpirunEndsTheJobWhenATaskFails) {
  if (!mpirun_found()) GTEST_SKIP() << "/usr/bin/mpirun not found (scripts/test.sh installs openmpi-bin)";
  const ProcessResult exited = mpirun(2, "engine_exit", {"1", "3"});
  EXPECT_EQ(exited.exit_code, 3) << exited.output;
  EXPECT_LT(exited.seconds, 30) << exited.output;
  EXPECT_TRUE(contains(exited.output, "rank 1: exiting with 3")) << exited.output;

  testing::ScratchDirectory directory;
  const ProcessResult killed = mpirun(3, "fault_train", {directory.path().string(), "kill_in_forward", "1", "6"});
  EXPECT_TRUE(killed.exit_code == 128 + 9 || killed.exit_code == 2) << killed.output;
  EXPECT_LT(killed.seconds, 30) << killed.output;
  EXPECT_TRUE(contains(killed.output, "rank 1: SIGKILL in forward at step 6")) << killed.output;
  expect_rank_one_named_as_exited(killed.output);
  expect_nothing_left();
}

// --- A real torchrun --------------------------------------------------------------
// Note [Workers under torchrun] in distributed/README.md.

bool torchrun_found() { return std::filesystem::exists("/usr/bin/torchrun"); }

// A free port p whose p + 1 is free too: torchrun's agent store and ember's beside it.
int free_port_pair() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = free_port();
    if (port < 65535 && loopback_port_free(port + 1)) return port;
  }
  ADD_FAILURE() << "no two free loopback ports in a row";
  return 0;
}

// `torchrun <flags> --no_python distributed_worker <scenario> <args>` with
// `assignments` exported (the token among them, as a user exports it before
// torchrun on every node).
// -r 1 -t 1 (redirect stdout to a log and tee it back): Debian's torch 1.13
// on Python 3.11 cannot parse the default redirects (iterating an IntFlag
// skips its 0 member), whatever the program.
std::unique_ptr<Process> start_torchrun(const std::vector<std::string>& flags, const std::string& scenario,
                                        const std::vector<std::string>& args, const std::vector<std::string>& assignments) {
  std::vector<std::string> command = worker_command(assignments, scenario, args);
  std::vector<std::string> torchrun = {"/usr/bin/torchrun", "-r", "1", "-t", "1"};
  torchrun.insert(torchrun.end(), flags.begin(), flags.end());
  torchrun.push_back("--no_python");
  command.insert(std::find(command.begin(), command.end(), std::string(EMBER_WORKER)), torchrun.begin(), torchrun.end());
  return std::make_unique<Process>(command);
}

ProcessResult torchrun(const std::vector<std::string>& flags, const std::string& scenario,
                       const std::vector<std::string>& args = {}) {
  return start_torchrun(flags, scenario, args, {"EMBER_STORE_TOKEN=" + fresh_token()})->wait(120s);
}

// torchrun's default (static) rendezvous, where its agent serves its own
// store on MASTER_PORT, and --standalone, where rank 0 may take MASTER_PORT:
// both start one ember job (the scenarios compare every rank with one
// process on the global batch). The Accelerator says where the store is and
// that the agent's has no authentication.
// Catches: ember's rank 0 binding MASTER_PORT beside the agent ("Address
// already in use"); the refusal of torchrun this replaced.
TEST(JobEngines, TorchrunStartsOneJob) {
  if (!torchrun_found()) GTEST_SKIP() << "/usr/bin/torchrun not found (scripts/test.sh installs python3-torch)";
  const int port = free_port_pair();
  const ProcessResult agent_store = torchrun({"--nproc_per_node", "3", "--master_port", std::to_string(port)},
                                             "accelerator_accumulation_matches_large_batch", {"2", "4"});
  expect_clean_success(agent_store);
  EXPECT_TRUE(contains(agent_store.output,
                       fmt::format("ember Accelerator: torchrun: rank 0 of 3, local rank 0 of 3, node 0, store "
                                   "127.0.0.1:{}",
                                   port + 1)))
      << agent_store.output;
  EXPECT_TRUE(contains(agent_store.output,
                       fmt::format("master_port: MASTER_PORT + 1, beside torchrun's agent store on MASTER_PORT={} "
                                   "(PyTorch's, which has no authentication",
                                   port)))
      << agent_store.output;
  expect_clean_success(torchrun({"--standalone", "--nproc_per_node", "2"}, "ddp_matches_single_process"));
  expect_nothing_left();
}

// Two torchrun agents, nodes 0 and 1 of one job on 127.0.0.1 and
// 127.0.0.2 (node 1's workers advertise 127.0.0.2 to Gloo, the backend
// between nodes): one DDP job of two processes.
TEST(JobEngines, TorchrunTwoNodesOnLoopback) {
  if (!torchrun_found()) GTEST_SKIP() << "/usr/bin/torchrun not found (scripts/test.sh installs python3-torch)";
  const std::string port = std::to_string(free_port_pair()), token = fresh_token();
  std::vector<std::unique_ptr<Process>> nodes;
  for (const int node : {0, 1})
    nodes.push_back(start_torchrun({"--nnodes", "2", "--node_rank", std::to_string(node), "--nproc_per_node", "1",
                                    "--master_addr", "127.0.0.1", "--master_port", port},
                                   "ddp_matches_single_process", {},
                                   {"EMBER_STORE_TOKEN=" + token, "EMBER_GLOO_ADDR=127.0.0." + std::to_string(node + 1)}));
  for (auto& node : nodes) expect_clean_success(node->wait(120s));
  expect_nothing_left();
}

// torchrun --max_restarts 1 restarts every worker after one is killed; the
// job resumes from its last checkpoint (the user's load_state) and ends with
// the parameters of a job never interrupted.
TEST(JobEngines, TorchrunRestartResumesFromTheLastCheckpoint) {
  if (!torchrun_found()) GTEST_SKIP() << "/usr/bin/torchrun not found (scripts/test.sh installs python3-torch)";
  testing::ScratchDirectory directory;
  const std::filesystem::path straight = directory.path() / "straight", restarted = directory.path() / "restarted";
  std::filesystem::create_directories(straight);
  std::filesystem::create_directories(restarted);
  const std::vector<std::string> flags = {"--nproc_per_node", "2", "--master_port", std::to_string(free_port_pair())};
  expect_clean_success(torchrun(flags, "fault_train", {straight.string(), "none", "0", "0"}));
  std::vector<std::string> restarting = {"--max_restarts", "1", "--master_port", std::to_string(free_port_pair())};
  restarting.insert(restarting.begin(), flags.begin(), flags.begin() + 2);
  const ProcessResult result = torchrun(restarting, "fault_train", {restarted.string(), "kill_in_forward", "1", "6"});
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "rank 1: SIGKILL in forward at step 6")) << result.output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(result.output, fmt::format("rank {}: resumed from checkpoint_0 after step 4", rank)))
        << result.output;
    const std::string expected = read_bytes(straight / fmt::format("final_{}.safetensors", rank));
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(expected == read_bytes(restarted / fmt::format("final_{}.safetensors", rank)))
        << "rank " << rank << ": the restarted job's parameters differ from the uninterrupted job's";
  }
  expect_nothing_left();
}

// --- A real srun ------------------------------------------------------------------

// `srun <options> distributed_worker <scenario> <args>` on the test's Slurm
// cluster, as a batch script runs it: the token exported, and passed on
// with the rest of the environment (--export=ALL). `assignments` may add
// MASTER_PORT; without it the store's port is derived from the job id.
ProcessResult srun(const SlurmCluster& cluster, const std::vector<std::string>& options,
                   std::vector<std::string> assignments, const std::string& scenario,
                   const std::vector<std::string>& args = {}) {
  assignments.insert(assignments.end(), {cluster.conf_assignment(), "EMBER_STORE_TOKEN=" + fresh_token()});
  std::vector<std::string> command = worker_command(assignments, scenario, args);
  std::vector<std::string> srun_part = {"/usr/bin/srun", "--export=ALL"};
  srun_part.insert(srun_part.end(), options.begin(), options.end());
  command.insert(std::find(command.begin(), command.end(), std::string(EMBER_WORKER)), srun_part.begin(),
                 srun_part.end());
  return run_process(command, 90s);
}

void expect_cluster_clean(const SlurmCluster& cluster) {
  EXPECT_EQ(cluster.leftover_steps(10s), std::vector<pid_t>{}) << "job steps (slurmstepd) still running";
  expect_nothing_left();
}

// The job id a task's Accelerator names as the source of the derived port.
uint64_t derived_from_job(const std::string& output) {
  const std::string marker = "master_port: derived from SLURM_JOB_ID=";
  const size_t at = output.find(marker);
  return at == std::string::npos ? 0 : std::stoull(output.substr(at + marker.size()));
}

// srun -n 2 and srun -N 1 -n 3 (over the node's cores: --overcommit) run a
// DDP job and the Accelerator example's training loop: each task learns
// its rank, the world size and its local rank from SLURM_*, the store is
// on the node list's first host, and the job trains as one (the scenarios
// compare every rank's parameters with one process on the global batch,
// hence equal parameters across ranks). The Accelerator names Slurm once,
// with the port derived from the job id when MASTER_PORT is not exported.
// Catches: SLURM_PROCID ignored (every task rank 0: a store served twice,
// or three "rank 0 of 3" lines and the scenarios fail), SLURM_NTASKS
// ignored (jobs of one: "rank 0 of 1"), a wrong derived port.
TEST(JobEngines, SrunStartsOneJob) {
  SlurmCluster& cluster = SlurmCluster::shared();
  if (!cluster.unavailable().empty()) GTEST_SKIP() << cluster.unavailable();
  const std::vector<std::string> two = {"-n", "2", "--kill-on-bad-exit=1"},
                                 three = {"-N", "1", "-n", "3", "--overcommit", "--kill-on-bad-exit=1"};
  for (const auto& options : {two, three}) {
    const int world = options == two ? 2 : 3;
    const ProcessResult ddp = srun(cluster, options, {"MASTER_PORT=" + std::to_string(free_port())},
                                   "ddp_matches_single_process");
    EXPECT_EQ(ddp.exit_code, 0) << ddp.output;
    for (int rank = 0; rank < world; ++rank)
      EXPECT_TRUE(contains(ddp.output, fmt::format("rank {}: after 20 steps max |ddp - single process|", rank)))
          << ddp.output;
    EXPECT_FALSE(contains(ddp.output, fmt::format("rank {}:", world))) << ddp.output;

    const ProcessResult accelerator = srun(cluster, options, {}, "accelerator_accumulation_matches_large_batch",
                                           {"2", "4"});
    EXPECT_EQ(accelerator.exit_code, 0) << accelerator.output;
    const uint64_t job = derived_from_job(accelerator.output);
    const std::string line =
        fmt::format("ember Accelerator: Slurm: rank 0 of {0}, local rank 0 of {0}, node 0, store localhost:{1}", world,
                    distributed::slurm_port(job, 0));
    EXPECT_TRUE(contains(accelerator.output, line)) << accelerator.output;
    EXPECT_EQ(accelerator.output.find(line), accelerator.output.rfind(line)) << "said twice:\n" << accelerator.output;
  }
  expect_cluster_clean(cluster);
}

// Exit codes: tasks that all end by themselves make srun's status the
// highest of their codes (Slurm's rule). With --kill-on-bad-exit=1, a task
// that exits with a code, or is killed, ends the whole step within a bound
// (the other tasks get SIGTERM, then SIGKILL after KillWait): srun's status
// is then 128 + SIGTERM (a signal outranks codes) and its message names the
// task's code. No task, step or segment is left.
// Catches: a task's failure hidden (srun exit 0), surviving tasks that hang
// until their store timeout (past the bound) or are left running.
TEST(JobEngines, SrunEndsTheJobWhenATaskFails) {
  SlurmCluster& cluster = SlurmCluster::shared();
  if (!cluster.unavailable().empty()) GTEST_SKIP() << cluster.unavailable();
  const ProcessResult own = srun(cluster, {"-N", "1", "-n", "3", "--overcommit", "--kill-on-bad-exit=0"}, {},
                                 "engine_exit", {"1", "3", "0"});
  EXPECT_EQ(own.exit_code, 3) << own.output;
  EXPECT_TRUE(contains(own.output, "rank 1: exiting with 3")) << own.output;
  const ProcessResult ended = srun(cluster, {"-n", "2", "--kill-on-bad-exit=1"}, {}, "engine_exit", {"1", "3"});
  EXPECT_EQ(ended.exit_code, 128 + 15) << ended.output;
  EXPECT_LT(ended.seconds, 30) << ended.output;
  EXPECT_TRUE(contains(ended.output, "task 1: Exited with exit code 3")) << ended.output;
  EXPECT_TRUE(contains(ended.output, "task 0: Terminated")) << ended.output;

  testing::ScratchDirectory directory;
  const ProcessResult killed = srun(cluster, {"-N", "1", "-n", "3", "--overcommit", "--kill-on-bad-exit=1"}, {},
                                    "fault_train",
                                    {directory.path().string(), "kill_in_forward", "1", "6"});
  EXPECT_EQ(killed.exit_code, 128 + 9) << killed.output;  // fault_train ignores SIGTERM: only SIGKILLs here
  EXPECT_LT(killed.seconds, 30) << killed.output;
  EXPECT_TRUE(contains(killed.output, "rank 1: SIGKILL in forward at step 6")) << killed.output;
  EXPECT_TRUE(contains(killed.output, "task 1: Killed")) << killed.output;
  expect_rank_one_named_as_exited(killed.output);
  expect_cluster_clean(cluster);
}

}  // namespace
}  // namespace ember::test
