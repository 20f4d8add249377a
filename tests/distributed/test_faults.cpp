// Fault injection on real processes (issue 8): ranks of a training job
// SIGKILLed in the forward, in an allreduce and in save_state, a rank
// SIGSTOPped, the launcher SIGKILLed, a full disk while saving, an fp16 loss
// that is NaN at every step. Every job runs through `ember launch` with
// --timeout 3 (EMBER_TIMEOUT), so failure paths are quick, and every test
// checks the exit code, the error text (the rank, the collective, the path,
// the values), that the job ended within twice the timeout of the fault (a
// generous bound, never a speed), and that no worker process and no
// /dev/shm segment is left. A killed job restarted with --max-restarts 1
// resumes from its last complete checkpoint and ends with the same
// parameters, bit for bit, as a job never interrupted. The worker side is
// workers/fault_scenarios.cpp; the faults and how each ends are listed in
// tests/distributed/README.md.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "distributed/checkpoint/checkpoint_dir.h"
#include "distributed/checkpoint/manifest.h"
#include "distributed/process_runner.h"
#include "distributed/store/tcp_store.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

namespace fs = std::filesystem;
namespace checkpoint = distributed::checkpoint;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kTimeoutSeconds = 3;
// From the fault to the launcher's exit (from the start, for a job that
// fails at once or soon): twice the timeout, and a second for the processes'
// start and teardown on a loaded machine. Only a bound against hangs.
constexpr double kBoundSeconds = 2.0 * kTimeoutSeconds + 1.0;
const std::vector<std::string> kOmpEnv = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};

std::vector<std::string> two_ranks(std::vector<std::string> more = {}) {
  std::vector<std::string> flags = {"--nproc-per-node", "2", "--timeout", std::to_string(kTimeoutSeconds)};
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t count_of(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void expect_nothing_left() {
  EXPECT_EQ(leftover_workers(), std::vector<pid_t>{});
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{});
}

// A job started in the background, timed from the line that announces its fault.
struct TimedJob {
  ProcessResult result;
  double seconds_after_fault = 0;
};

TimedJob run_until_fault(const std::vector<std::string>& flags, const std::string& scenario,
                         const std::vector<std::string>& args, const std::string& fault_line) {
  Process process(launch_command(flags, scenario, args), kOmpEnv);
  TimedJob job;
  const bool announced = process.wait_for_output(fault_line, 120s);
  const Clock::time_point fault = Clock::now();
  job.result = process.wait(180s);
  job.seconds_after_fault = seconds_since(fault);
  EXPECT_TRUE(announced) << "no '" << fault_line << "' in:\n" << job.result.output;
  EXPECT_FALSE(job.result.timed_out) << job.result.output;
  return job;
}

// --- A rank killed in the forward, in an allreduce, in save_state ----------------

struct Kill {
  std::string fault;
  int rank;
  int step;
  std::string marker;    // what the victim says just before it dies
  std::string survivor;  // what the survivor's error must say about the collective
};

void PrintTo(const Kill& kill, std::ostream* out) { *out << kill.fault; }

class KilledRank : public ::testing::TestWithParam<Kill> {
 protected:
  std::vector<std::string> train_args(const fs::path& directory) const {
    const Kill& kill = GetParam();
    return {directory.string(), kill.fault, std::to_string(kill.rank), std::to_string(kill.step)};
  }
  std::string fault_line() const {
    const Kill& kill = GetParam();
    return fmt::format("[rank {}] rank {}: SIGKILL {} at step {}", kill.rank, kill.rank, kill.marker, kill.step);
  }
};

// The launcher names the dead rank and exits with 128 + SIGKILL; the
// survivor (which ignores the launcher's SIGTERM) fails on its own, naming
// the collective and the dead rank, instead of waiting out a timeout; and the
// last complete checkpoint (after step 4) is still `latest` and verifies.
TEST_P(KilledRank, EndsTheJobWithinTwiceTheTimeoutNamingIt) {
  const Kill& kill = GetParam();
  testing::ScratchDirectory directory;
  const TimedJob job = run_until_fault(two_ranks(), "fault_train", train_args(directory.path()), fault_line());
  const std::string& output = job.result.output;
  EXPECT_EQ(job.result.exit_code, 128 + SIGKILL) << output;
  EXPECT_LT(job.seconds_after_fault, kBoundSeconds) << output;
  EXPECT_TRUE(contains(output, fmt::format("ember launch: rank {} (pid ", kill.rank))) << output;
  EXPECT_TRUE(contains(output, "was killed by signal 9 (SIGKILL)")) << output;
  const int survivor = 1 - kill.rank;
  EXPECT_TRUE(contains(output, fmt::format("[rank {}] ember::Error: ", survivor))) << output;
  EXPECT_TRUE(contains(output, kill.survivor)) << output;
  EXPECT_TRUE(contains(output, fmt::format("rank {} (global rank {}, pid ", kill.rank, kill.rank))) << output;
  EXPECT_FALSE(contains(output, "sending SIGKILL")) << "the survivor did not end on its own:\n" << output;
  expect_nothing_left();

  const fs::path checkpoints = directory.path() / "project" / "checkpoints";
  EXPECT_EQ(checkpoint::latest(checkpoints), checkpoints / "checkpoint_0");
  EXPECT_EQ(checkpoint::verify_checkpoint(checkpoints / "checkpoint_0", 2).world_size, 2);
  EXPECT_FALSE(fs::exists(checkpoints / "checkpoint_1"));
}

// With --max-restarts 1 the launcher starts the job again; it resumes from
// checkpoint_0 (the kill left a partial .checkpoint_1.staging at most) and
// ends with the parameters of a job that was never interrupted.
TEST_P(KilledRank, RestartResumesFromTheLastCheckpointBitForBit) {
  testing::ScratchDirectory directory;
  const fs::path straight = directory.path() / "straight", restarted = directory.path() / "restarted";
  fs::create_directories(straight);
  fs::create_directories(restarted);
  const ProcessResult reference = launch(two_ranks(), "fault_train", {straight.string(), "none", "0", "0"}, 120s, kOmpEnv);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  const TimedJob job =
      run_until_fault(two_ranks({"--max-restarts", "1"}), "fault_train", train_args(restarted), fault_line());
  const std::string& output = job.result.output;
  EXPECT_EQ(job.result.exit_code, 0) << output;
  EXPECT_EQ(count_of(output, "ember launch: restarting (1 of 1)"), 1u) << output;
  EXPECT_EQ(count_of(output, "SIGKILL " + GetParam().marker), 1u) << "the fault fires once:\n" << output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(output, fmt::format("[rank {}] rank {}: resumed from checkpoint_0 after step 4", rank, rank)))
        << output;
    const std::string expected = read_bytes(straight / fmt::format("final_{}.safetensors", rank));
    ASSERT_FALSE(expected.empty());
    EXPECT_TRUE(expected == read_bytes(restarted / fmt::format("final_{}.safetensors", rank)))
        << "rank " << rank << ": the restarted job's parameters differ from the uninterrupted job's";
  }
  expect_nothing_left();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, KilledRank,
    ::testing::Values(Kill{"kill_in_forward", 1, 6, "in forward",
                           "allreduce of 420 x float32 (avg) in symmetric memory (allocation 0, byte 0 of its region) "
                           "cannot finish"},
                      Kill{"kill_in_allreduce", 1, 6, "right after issuing its part of a 16 MiB allreduce",
                           "allreduce of 4194304 x float32 (sum) cannot finish"},
                      Kill{"kill_in_save", 0, 8, "in save_state", "Accelerator::save_state"}),
    [](const ::testing::TestParamInfo<Kill>& info) { return info.param.fault; });

// A job resumed with another number of processes than its checkpoint's
// (automatic naming finds checkpoint_1 of a 2-process job, saved at a step
// boundary) continues from it on every process (Note [Resuming at another
// world size]; the parameters' equality is AcceleratorCheckpoints.
// ReshardsWhenTheWorldSizeChanges's, the refusal mid-accumulation
// AcceleratorCheckpoints.ExactResumeAfterKillOnThreeProcesses's).
TEST(Faults, ResumingWithAnotherWorldSizeContinuesFromTheCheckpoint) {
  testing::ScratchDirectory directory;
  const std::vector<std::string> args = {directory.path().string(), "none", "0", "0"};
  const ProcessResult first = launch(two_ranks(), "fault_train", args, 120s, kOmpEnv);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  for (const int processes : {1, 3}) {
    const std::vector<std::string> flags = {"--nproc-per-node", std::to_string(processes), "--timeout",
                                            std::to_string(kTimeoutSeconds)};
    const ProcessResult result = launch(flags, "fault_train", args, 120s, kOmpEnv);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    EXPECT_LT(result.seconds, kBoundSeconds) << "the whole job, start-up included:\n" << result.output;
    for (int rank = 0; rank < processes; ++rank)
      EXPECT_TRUE(contains(result.output, fmt::format("[rank {}] rank {}: resumed from checkpoint_1", rank, rank)))
          << result.output;
  }
  expect_nothing_left();
}

// --- A stopped rank ----------------------------------------------------------------

// A stopped rank is alive, so nothing notices it but the deadline: the
// survivor's allreduce times out naming it as stopped, the launcher stops
// the job (continuing the stopped rank, which then fails too).
TEST(Faults, StoppedRankFailsTheOthersThroughTheTimeoutNamingIt) {
  testing::ScratchDirectory directory;
  const TimedJob job = run_until_fault(two_ranks(), "fault_train", {directory.path().string(), "stop", "1", "6"},
                                       "[rank 1] rank 1: SIGSTOP before the forward of step 6");
  const std::string& output = job.result.output;
  EXPECT_EQ(job.result.exit_code, 2) << output;
  EXPECT_LT(job.seconds_after_fault, kBoundSeconds) << output;
  EXPECT_TRUE(contains(output, "[rank 0] ember::Error: ")) << output;
  // DDP's bucket is in symmetric memory (Note [Buckets in symmetric memory]).
  EXPECT_TRUE(contains(output, "allreduce of 420 x float32 (avg) in symmetric memory (allocation 0, byte 0 of its "
                               "region) timed out after 3000 ms on rank 0 (global rank 0) waiting for rank 1 (global "
                               "rank 1, pid "))
      << output;
  EXPECT_TRUE(contains(output, ", stopped)")) << output;
  EXPECT_TRUE(contains(output, "ember launch: rank 0 (pid ")) << output;
  EXPECT_TRUE(contains(output, "exited with code 2")) << output;
  expect_nothing_left();
}

// --- The launcher killed ---------------------------------------------------------------

// SIGKILL cannot be handled: PR_SET_PDEATHSIG must take the workers down,
// mid-training, within a bounded wait. (A failure here leaves workers in
// their own process groups: they are killed by pid.)
TEST(Faults, SigkillToTheLauncherMidTrainingLeavesNoWorker) {
  testing::ScratchDirectory directory;
  Process process(launch_command(two_ranks(), "fault_train_until_killed", {directory.path().string()}), kOmpEnv);
  ASSERT_TRUE(process.wait_for_output("[rank 0] rank 0: training", 120s));
  ASSERT_TRUE(process.wait_for_output("[rank 1] rank 1: training", 120s));
  process.signal(SIGKILL);
  const ProcessResult result = process.wait(20s);
  EXPECT_EQ(result.signal, SIGKILL) << result.output;
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(int64_t(kBoundSeconds * 1000));
  std::vector<pid_t> workers = leftover_workers();
  while (!workers.empty() && Clock::now() < deadline) workers = leftover_workers();
  EXPECT_EQ(workers, std::vector<pid_t>{}) << "workers outlived their launcher";
  for (pid_t worker : workers) kill(worker, SIGKILL);
  expect_nothing_left();
}

// --- A full disk ---------------------------------------------------------------------

struct FullDisk {
  int rank;
  int limit_bytes;
  std::string error;  // the error of the rank that cannot write
};

void PrintTo(const FullDisk& full, std::ostream* out) { *out << "rank " << full.rank; }

class DiskFullWhileSaving : public ::testing::TestWithParam<FullDisk> {};

// The rank that cannot write names the file; every other rank fails the same
// save naming that rank (run_on_every_process); checkpoint_0 stays complete
// and `latest`; and the next save, with room again, succeeds over what the
// failed one left. The worker checks the files (workers/fault_scenarios.cpp).
TEST_P(DiskFullWhileSaving, FailsOnEveryRankAndKeepsThePreviousCheckpoint) {
  const FullDisk& full = GetParam();
  testing::ScratchDirectory directory;
  const ProcessResult result =
      launch(two_ranks(), "fault_disk_full",
             {directory.path().string(), std::to_string(full.rank), std::to_string(full.limit_bytes)}, 120s, kOmpEnv);
  const std::string& output = result.output;
  EXPECT_EQ(result.exit_code, 0) << output;
  EXPECT_LT(result.seconds, kBoundSeconds) << "the whole job, start-up included:\n" << output;
  const fs::path staging = directory.path() / "project" / "checkpoints" / ".checkpoint_1.staging";
  EXPECT_TRUE(contains(output, fmt::format("[rank {}] rank {}: the save on a full disk failed with: ", full.rank,
                                           full.rank) +
                                   fmt::format(fmt::runtime(full.error), staging.string())))
      << output;
  EXPECT_TRUE(contains(output, "': File too large")) << output;
  const int other = 1 - full.rank;
  EXPECT_TRUE(contains(output, fmt::format("[rank {}] rank {}: the save on a full disk failed with: "
                                           "Accelerator::save_state: process {} failed (its own error says why)",
                                           other, other, full.rank)))
      << output;
  EXPECT_EQ(count_of(output, ": ok\n"), 12u) << output;
  EXPECT_FALSE(contains(output, "FAILED")) << output;
  expect_nothing_left();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, DiskFullWhileSaving,
    ::testing::Values(
        // The main process's model file does not fit in 1 KiB.
        // (the temporary file's name ends in six random characters, core/file_io.h)
        FullDisk{0, 1024, "save_safetensors: cannot write '{}/model.safetensors.tmp."},
        // Not even process_1.json fits in 16 bytes.
        FullDisk{1, 16, "save_state: cannot write '{}/process_1.json.tmp."}),
    [](const ::testing::TestParamInfo<FullDisk>& info) { return fmt::format("FullOnRank{}", info.param.rank); });

// --- A NaN loss under fp16 ---------------------------------------------------------------

// The scaler backs off from 2^16 to its floor of 1 (16 skipped steps) and
// stops the training at the 17th, on both ranks at the same step (the flag
// is agreed), instead of skipping every step for ever.
TEST(Faults, NanLossEveryStepStopsAtTheScalersFloor) {
  testing::ScratchDirectory directory;
  const ProcessResult result = launch(two_ranks({"--mixed-precision", "fp16"}), "fault_nan_loss",
                                      {directory.path().string()}, 120s, kOmpEnv);
  const std::string& output = result.output;
  EXPECT_EQ(result.exit_code, 2) << output;
  EXPECT_LT(result.seconds, kBoundSeconds) << "the whole job, start-up included:\n" << output;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(output, fmt::format("[rank {}] rank {}: training stopped at step 17 with the scale at 1: "
                                             "GradScaler::update: inf/NaN gradients with the scale at its floor "
                                             "(min_scale = 1), 17 steps in a row skipped.",
                                             rank, rank)))
        << output;
  }
  expect_nothing_left();
}

// --- Jobs that must not meet ---------------------------------------------------------

// The environment of one multi-node job's launchers: its token.
std::vector<std::string> job_env(const std::string& token) {
  std::vector<std::string> env = kOmpEnv;
  env.push_back("EMBER_STORE_TOKEN=" + token);
  return env;
}

std::vector<std::string> node(int rank, int port, int nproc = 1) {
  return {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", std::to_string(nproc),
          "--master-port", std::to_string(port), "--timeout", std::to_string(kTimeoutSeconds)};
}

// A launcher that must stop before starting any worker: within the bound,
// non-zero, with `message`.
void expect_refused(const ProcessResult& result, const std::string& message) {
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_LT(result.seconds, kBoundSeconds) << result.output;
  EXPECT_TRUE(contains(result.output, message)) << "expected '" << message << "' in:\n" << result.output;
  EXPECT_FALSE(contains(result.output, "[rank")) << "a worker started:\n" << result.output;
}

// Launchers that disagree on --nproc-per-node would give two processes rank
// 1 (node 0's second, node 1's first) and let them read each other's Gloo
// addresses. They meet at the store first, and both refuse.
TEST(Faults, LaunchersThatDisagreeOnTheWorldSizeStartNoWorker) {
  const int port = free_port();
  const std::vector<std::string> env = job_env("faults-" + std::to_string(getpid()) + "-disagree");
  Process first(launch_command(node(0, port, 2), "fault_hold_job", {"/nonexistent"}), env);
  ASSERT_TRUE(first.wait_for_output("(hosted here)", 60s));
  const ProcessResult second = run_process(launch_command(node(1, port, 1), "fault_hold_job", {"/nonexistent"}), 60s, env);
  expect_refused(second, "ember launch: node 0 was launched with --nnodes 2 --nproc-per-node 2, this node (1) with "
                         "--nnodes 2 --nproc-per-node 1: every node's launcher needs the same");
  const ProcessResult result = first.wait(60s);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_LT(result.seconds, kBoundSeconds) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: node 1 was launched with --nnodes 2 --nproc-per-node 1, node 0 "
                                      "with --nnodes 2 --nproc-per-node 2"))
      << result.output;
  EXPECT_FALSE(contains(result.output, "[rank")) << result.output;
  expect_nothing_left();
}

// A running two-node job holds port P. Another job there finds the port
// taken or its token refused, and the same job's node started twice finds its
// node rank taken; the running job carries on and its collectives still work.
TEST(Faults, ASecondJobOnTheSamePortIsRefusedAndTheFirstCarriesOn) {
  testing::ScratchDirectory directory;
  const int port = free_port();
  const std::string token = "faults-" + std::to_string(getpid()) + "-first-job";
  const std::string go = (directory.path() / "go").string();
  Process node0(launch_command(node(0, port), "fault_hold_job", {go}), job_env(token));
  ASSERT_TRUE(node0.wait_for_output("(hosted here)", 60s));
  Process node1(launch_command(node(1, port), "fault_hold_job", {go}), job_env(token));
  ASSERT_TRUE(node0.wait_for_output("[rank 0] rank 0: holding", 60s));
  ASSERT_TRUE(node1.wait_for_output("[rank 1] rank 1: holding", 60s));

  const std::string taken = fmt::format("ember launch: cannot host the store on 127.0.0.1:{}", port);
  const std::vector<std::string> single_node = {"--nproc-per-node", "2", "--master-port", std::to_string(port)};
  expect_refused(run_process(launch_command(single_node, "fault_hold_job", {go}), 60s, kOmpEnv), taken);
  expect_refused(run_process(launch_command(node(0, port), "fault_hold_job", {go}), 60s, job_env(token)), taken);
  expect_refused(run_process(launch_command(node(1, port), "fault_hold_job", {go}), 60s, job_env(token + "-other")),
                 fmt::format("ember launch: node 1 cannot join the job: store: the store at 127.0.0.1:{} refused the token",
                             port));
  expect_refused(run_process(launch_command(node(1, port), "fault_hold_job", {go}), 60s, job_env(token)),
                 fmt::format("ember launch: node rank 1 of this job (store 127.0.0.1:{}) has a launcher already", port));

  std::ofstream(go) << "go\n";
  const ProcessResult result1 = node1.wait(60s);
  const ProcessResult result0 = node0.wait(60s);
  EXPECT_EQ(result0.exit_code, 0) << result0.output;
  EXPECT_EQ(result1.exit_code, 0) << result1.output;
  EXPECT_TRUE(contains(result0.output, "[rank 0] rank 0: allreduce after the intruder: 6: ok")) << result0.output;
  EXPECT_TRUE(contains(result1.output, "[rank 1] rank 1: allreduce after the intruder: 6: ok")) << result1.output;
  EXPECT_TRUE(contains(result0.output, "ember store: refused connection from 127.0.0.1:")) << result0.output;
  expect_nothing_left();
}

// Catches: starting workers on the verdict "ok" alone (before every node has
// read it) and naming every reader as gone. Node 1 publishes its settings and
// is stopped before the verdict; node 2 then completes the set, reads "ok" and
// acknowledges it. Node 2 must not start a worker (node 0 never will), and
// node 0 must name node 1 alone.
TEST(Faults, ANodeStoppedBeforeTheVerdictStartsNoWorkerOnAnyNode) {
  const int port = free_port();
  const std::string token = "faults-" + std::to_string(getpid()) + "-gone-node";
  constexpr int kRendezvousSeconds = 5;
  auto three_nodes = [&](int rank) {
    return std::vector<std::string>{"--nnodes", "3", "--node-rank", std::to_string(rank), "--nproc-per-node", "1",
                                    "--master-port", std::to_string(port), "--timeout",
                                    std::to_string(kRendezvousSeconds)};
  };
  Process node0(launch_command(three_nodes(0), "fault_hold_job", {"/nonexistent"}), job_env(token));
  ASSERT_TRUE(node0.wait_for_output("(hosted here)", 60s));
  Process node1(launch_command(three_nodes(1), "fault_hold_job", {"/nonexistent"}), job_env(token));
  {
    distributed::TcpStore watcher({.port = port, .token = token, .timeout = 60s});
    watcher.wait({"launch/node/1"});
  }
  node1.signal(SIGINT);
  const ProcessResult result1 = node1.wait(60s);
  EXPECT_EQ(result1.signal, SIGINT) << result1.output;
  const ProcessResult result2 =
      run_process(launch_command(three_nodes(2), "fault_hold_job", {"/nonexistent"}), 60s, job_env(token));
  const ProcessResult result0 = node0.wait(60s);
  const std::string why = "node(s) 1 joined but went away before the job could start";
  EXPECT_NE(result2.exit_code, 0) << result2.output;
  EXPECT_FALSE(result2.timed_out) << result2.output;
  EXPECT_TRUE(contains(result2.output, "ember launch: node 0 did not start the job: " + why)) << result2.output;
  EXPECT_FALSE(contains(result2.output, "[rank")) << "a worker started:\n" << result2.output;
  EXPECT_NE(result0.exit_code, 0) << result0.output;
  EXPECT_TRUE(contains(result0.output, "ember launch: " + why)) << result0.output;
  EXPECT_FALSE(contains(result0.output, "[rank")) << result0.output;
  EXPECT_LT(result0.seconds, 2.0 * kRendezvousSeconds + 1.0) << result0.output;
  expect_nothing_left();
}

// No store at the address (nothing listens there; 192.0.2.1 is a
// documentation address, never routed): the launcher gives up after the
// timeout, naming the address, and starts no worker.
TEST(Faults, UnreachableStoreIsAnErrorWithinTheTimeout) {
  const int port = free_port();
  for (const std::string address : {"127.0.0.1", "192.0.2.1"}) {
    std::vector<std::string> flags = node(1, port);
    flags.insert(flags.end(), {"--master-addr", address});
    expect_refused(run_process(launch_command(flags, "fault_hold_job", {"/nonexistent"}), 60s, job_env("faults-unreachable")),
                   fmt::format("ember launch: node 1 cannot join the job: store: cannot connect to the store at {}:{} "
                               "within {} s",
                               address, port, kTimeoutSeconds));
  }
  expect_nothing_left();
}

}  // namespace
}  // namespace ember::test
