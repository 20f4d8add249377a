// `ember launch` on real processes (tools/launch.cpp, tools/supervisor.cpp,
// Note [Launcher supervision]): the environment and output each worker gets,
// exit codes and the stop sequence after a failure or a signal, restarts, the
// errors before any worker starts, and two launchers forming one job. The
// worker side is tests/distributed/workers/launch_scenarios.cpp. Every test
// ends with nothing left: no worker process, no /dev/shm/ember-* segment.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "distributed/process_runner.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The tests pin these, so that the launcher's summary line is predictable.
const std::vector<std::string> kOmpEnv = {"OMP_NUM_THREADS=1", "OMP_WAIT_POLICY=passive"};

// Starts `argv` (a launcher) in a process group of its own, its stdout and
// stderr on the given descriptors, SIGINT ignored if asked (as a shell starts
// a background job); Process (process_runner.h) joins the two into one pipe.
pid_t start_launcher(const std::vector<std::string>& argv, int stdout_fd, int stderr_fd, bool ignore_sigint) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    if (ignore_sigint) signal(SIGINT, SIG_IGN);  // inherited through exec
    dup2(stdout_fd, 1);
    dup2(stderr_fd, 2);
    for (const std::string& entry : kOmpEnv) putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  if (pid > 0) setpgid(pid, pid);
  return pid;
}

// What a leftover process is, for the failure message: another test's
// worker running at the same time looks the same to leftover_workers().
std::string describe_processes(const std::vector<pid_t>& pids) {
  std::string text;
  for (pid_t pid : pids) {
    std::ifstream file("/proc/" + std::to_string(pid) + "/cmdline");
    std::string command((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::replace(command.begin(), command.end(), '\0', ' ');
    text += "\n  " + std::to_string(pid) + ": " + command;
  }
  return text;
}

void expect_nothing_left() {
  std::vector<pid_t> workers = leftover_workers();
  EXPECT_EQ(workers, std::vector<pid_t>{}) << describe_processes(workers);
  EXPECT_EQ(leftover_segments(), std::vector<std::string>{});
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

size_t count_of(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// The pid a worker of `rank` printed in its "ready pid N rank R" line.
pid_t ready_pid(const std::string& output, int rank) {
  for (const std::string& line : lines_of(output)) {
    int pid = 0;
    int found_rank = -1;
    size_t at = line.find("ready pid ");
    if (at != std::string::npos && std::sscanf(line.c_str() + at, "ready pid %d rank %d", &pid, &found_rank) == 2 &&
        found_rank == rank) {
      return pid;
    }
  }
  return -1;
}

bool wait_for_ready(Process& process, int ranks, std::chrono::milliseconds timeout) {
  for (int rank = 0; rank < ranks; ++rank) {
    if (!process.wait_for_output("rank " + std::to_string(rank) + "\n", timeout)) return false;
  }
  return true;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  return std::max(1, CPU_COUNT(&set));
}

std::filesystem::path fresh_temp_dir(const std::string& name) {
  auto path = std::filesystem::temp_directory_path() / ("ember_test_launch_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path;
}

TEST(Launch, SetsEnvironmentForTwoRanks) {
  ProcessResult result = launch({"--nproc-per-node", "2"}, "launch_env", {"2", "1"}, 60s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 0] rank 0: env ok")) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 1] rank 1: env ok")) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: 2 workers, OMP_NUM_THREADS=1 (from the environment), "
                                      "OMP_WAIT_POLICY=passive (from the environment), store 127.0.0.1:"))
      << result.output;
  expect_nothing_left();
}

// Without OMP_* in its environment the launcher splits the cores between the
// local ranks and asks for passive waits.
TEST(Launch, SetsEnvironmentForThreeRanksAndChoosesOmpThreads) {
  int cores = usable_cores();
  std::string threads = std::to_string(std::max(1, cores / 3));
  std::vector<std::string> command = {"/usr/bin/env", "-u", "OMP_NUM_THREADS", "-u", "OMP_WAIT_POLICY"};
  std::vector<std::string> launch_part =
      launch_command({"--nproc-per-node", "3", "--local-addr", "127.0.0.3"}, "launch_env", {"3", threads, "127.0.0.3"});
  command.insert(command.end(), launch_part.begin(), launch_part.end());
  ProcessResult result = run_process(command, 60s);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (int rank = 0; rank < 3; ++rank) {
    std::string ok = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + ": env ok";
    EXPECT_TRUE(contains(result.output, ok)) << result.output;
  }
  std::string summary = "ember launch: 3 workers, OMP_NUM_THREADS=" + threads + " (" + std::to_string(cores) +
                        " cores / 3 local ranks), OMP_WAIT_POLICY=passive, store 127.0.0.1:";
  EXPECT_TRUE(contains(result.output, summary)) << result.output;
  expect_nothing_left();
}

// Every line arrives whole and prefixed, although stdio flushes the workers'
// output in blocks that end mid-line and two ranks write at once.
TEST(Launch, PrefixesWholeLines) {
  const int lines = 400;
  ProcessResult result = launch({"--nproc-per-node", "2"}, "launch_print", {std::to_string(lines)}, 60s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  int per_rank[2] = {0, 0};
  for (const std::string& line : lines_of(result.output)) {
    if (line.rfind("ember launch: ", 0) == 0) continue;
    int rank = -1;
    ASSERT_EQ(std::sscanf(line.c_str(), "[rank %d] ", &rank), 1) << "not a prefixed line: " << line;
    ASSERT_TRUE(rank == 0 || rank == 1) << line;
    std::string prefix = "[rank " + std::to_string(rank) + "] ";
    std::string body = line.substr(prefix.size());
    std::string tail = " of rank " + std::to_string(rank);
    bool whole = body == "partial" + tail ||
                 (body.rfind("line ", 0) == 0 && contains(body, tail + " " + std::string(300, char('a' + rank))) &&
                  body.size() == body.find(tail) + tail.size() + 301);
    EXPECT_TRUE(whole) << "a broken or mixed line: " << line;
    ++per_rank[rank];
  }
  EXPECT_EQ(per_rank[0], lines + 1);
  EXPECT_EQ(per_rank[1], lines + 1);
  EXPECT_TRUE(contains(result.output, "[rank 1] partial of rank 1\n")) << "the last partial line is flushed at exit";
  expect_nothing_left();
}

// `2>&1 | less`: the launcher's stdout and stderr are one pipe, whose reader
// is slow, and the lines are longer than PIPE_BUF (written in parts).
// Catches: a sink per descriptor, each writing part of a line and letting the
// other's bytes in between ("[rank 1] bbb...[rank 0] aaa...").
TEST(Launch, LongLinesOfStdoutAndStderrOnOnePipeStayWhole) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  const std::string script =
      "c=a; to=1; if [ \"$RANK\" = 1 ]; then c=b; to=2; fi; s=$(printf '%10000s' | tr ' ' $c); i=0; "
      "while [ $i -lt 200 ]; do echo \"$s\" >&$to; i=$((i+1)); done";
  const std::vector<std::string> argv = {EMBER_CLI, "launch", "--nproc-per-node", "2", "--", "/bin/sh", "-c", script};
  const pid_t pid = start_launcher(argv, fds[1], fds[1], /*ignore_sigint=*/false);
  ASSERT_GE(pid, 0);
  close(fds[1]);
  std::this_thread::sleep_for(1s);  // the reader stalls: the pipe fills, writes come out in parts
  std::string output;
  for (Clock::time_point deadline = Clock::now() + 60s; Clock::now() < deadline;) {
    pollfd poll_fd{fds[0], POLLIN, 0};
    if (poll(&poll_fd, 1, 50) <= 0) continue;
    char buffer[65536];
    const ssize_t got = read(fds[0], buffer, sizeof buffer);
    if (got <= 0) break;
    output.append(buffer, size_t(got));
  }
  close(fds[0]);
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  int per_rank[2] = {0, 0};
  for (const std::string& line : lines_of(output)) {
    if (line.rfind("ember launch: ", 0) == 0) continue;
    const bool a = line == "[rank 0] " + std::string(10000, 'a'), b = line == "[rank 1] " + std::string(10000, 'b');
    EXPECT_TRUE(a || b) << "a broken or mixed line of " << line.size() << " bytes: " << line.substr(0, 40) << "...";
    ++per_rank[b ? 1 : 0];
  }
  EXPECT_EQ(per_rank[0], 200);
  EXPECT_EQ(per_rank[1], 200);
  expect_nothing_left();
}

TEST(Launch, LogDirWritesOneFilePerRank) {
  std::filesystem::path root = fresh_temp_dir("logs");
  std::filesystem::path logs = root / "nested" / "logs";
  ProcessResult result = launch({"--nproc-per-node", "2", "--log-dir", logs.string()}, "launch_print", {"20"}, 60s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_FALSE(contains(result.output, "[rank")) << result.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream file(logs / ("rank_" + std::to_string(rank) + ".log"));
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::vector<std::string> file_lines = lines_of(text);
    ASSERT_EQ(file_lines.size(), 21u) << text;
    EXPECT_EQ(count_of(text, " of rank " + std::to_string(rank)), 21u) << text;
    EXPECT_EQ(file_lines.back(), "partial of rank " + std::to_string(rank));
  }
  std::filesystem::remove_all(root);
  expect_nothing_left();
}

TEST(Launch, LogDirThatCannotBeCreatedIsAnError) {
  std::filesystem::path root = fresh_temp_dir("bad_logs");
  std::ofstream(root / "a_file") << "not a directory\n";
  std::string logs = (root / "a_file" / "logs").string();
  ProcessResult result = launch({"--nproc-per-node", "2", "--log-dir", logs}, "launch_wait", {}, 20s, kOmpEnv);
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: cannot create the log directory '" + logs + "'")) << result.output;
  std::filesystem::remove_all(root);
  expect_nothing_left();
}

// The CPUs of a Cpus_allowed_list ("0-3,6").
std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, ',');) {
    const size_t dash = part.find('-');
    const int first = std::stoi(part.substr(0, dash));
    const int last = dash == std::string::npos ? first : std::stoi(part.substr(dash + 1));
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  return cpus;
}

// --bind-cores: local rank r runs on the r-th of two equal, contiguous
// shares of the launcher's CPUs (here the test's), set before exec so that
// every thread of the worker inherits it; more ranks than CPUs is an error
// naming both counts, before any worker starts.
// Mutation caught (run once, failed as expected): the child skipping
// sched_setaffinity, so that every rank reports all the CPUs.
TEST(Launch, BindCoresGivesEachLocalRankItsShareOfTheCpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  const size_t n = cpus.size();
  if (n >= 2) {
    ProcessResult result = run_process({EMBER_CLI, "launch", "--bind-cores", "--nproc-per-node", "2", "--", "/bin/sh",
                                        "-c", "echo \"cpus $(grep Cpus_allowed_list /proc/self/status | cut -f2)\""},
                                       60s, kOmpEnv);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    for (size_t rank = 0; rank < 2; ++rank) {
      const std::string prefix = "[rank " + std::to_string(rank) + "] cpus ";
      const size_t at = result.output.find(prefix);
      ASSERT_NE(at, std::string::npos) << result.output;
      const size_t end = result.output.find('\n', at);
      const std::vector<int> got = parse_cpu_list(result.output.substr(at + prefix.size(), end - at - prefix.size()));
      const std::vector<int> share(cpus.begin() + long(rank * n / 2), cpus.begin() + long((rank + 1) * n / 2));
      EXPECT_EQ(got, share) << "rank " << rank << ":\n" << result.output;
    }
  }
  const std::string too_many = std::to_string(n + 1);
  ProcessResult refused =
      run_process({EMBER_CLI, "launch", "--bind-cores", "--nproc-per-node", too_many, "--", "/bin/true"}, 20s, kOmpEnv);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_TRUE(contains(refused.output, "--bind-cores: " + too_many + " workers on this node, but the launcher may run on only " +
                                           std::to_string(n) + " CPU(s)"))
      << refused.output;
  expect_nothing_left();
}

TEST(Launch, FirstFailedRanksExitCodeIsTheLaunchers) {
  ProcessResult result =
      launch({"--nproc-per-node", "3", "--grace-period", "1"}, "launch_exit", {"1", "3", "300"}, 30s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 3) << result.output;
  pid_t pid = ready_pid(result.output, 1);
  EXPECT_TRUE(contains(result.output, "ember launch: rank 1 (pid " + std::to_string(pid) + ") exited with code 3"))
      << result.output;
  EXPECT_EQ(count_of(result.output, "exited with code"), 1u) << "only the first failure is reported";
  EXPECT_LT(result.seconds, 10) << "the other ranks were not stopped promptly";
  expect_nothing_left();
}

TEST(Launch, WorkerKilledBySignalGives128PlusSignal) {
  ProcessResult result =
      launch({"--nproc-per-node", "2", "--grace-period", "1"}, "launch_raise_kill", {"1", "300"}, 30s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 137) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: rank 1 (pid ")) << result.output;
  EXPECT_TRUE(contains(result.output, "was killed by signal 9 (SIGKILL)")) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: removed 1 shared-memory segment(s) the workers left"))
      << result.output;
  EXPECT_LT(result.seconds, 10);
  expect_nothing_left();
}

// The launcher learns of exits in passes (SIGCHLDs coalesce), and when it
// was busy, or stopped as here, one pass finds both the rank killed by a
// signal and the survivor that exited because it noticed. The report must
// name the cause, not whichever rank comes first.
TEST(Launch, AKilledRankIsReportedBeforeTheSurvivorThatNoticedIt) {
  std::filesystem::path root = fresh_temp_dir("report_order");
  const std::string go = (root / "go").string();
  Process process(launch_command({"--nproc-per-node", "2", "--grace-period", "1"}, "launch_kill_on_go", {"1", go}),
                  kOmpEnv);
  ASSERT_TRUE(wait_for_ready(process, 2, 30s));
  process.signal(SIGSTOP);
  std::ofstream(go) << "go\n";
  // Both workers end (as zombies, which leftover_workers does not count)
  // while their launcher cannot reap them.
  Clock::time_point deadline = Clock::now() + 30s;
  while (!leftover_workers().empty() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  process.signal(SIGCONT);
  ProcessResult result = process.wait(30s);
  EXPECT_EQ(result.exit_code, 128 + SIGKILL) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: rank 1 (pid ")) << result.output;
  EXPECT_TRUE(contains(result.output, "was killed by signal 9 (SIGKILL)")) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 0] ember::Error: ")) << "the survivor noticed:\n" << result.output;
  EXPECT_EQ(count_of(result.output, "exited with code"), 0u) << result.output;
  std::filesystem::remove_all(root);
  expect_nothing_left();
}

// A stopped worker is not detected as such: the other ranks' allreduce times
// out (EMBER_TIMEOUT from --timeout), they fail, and the stop sequence
// continues the stopped one after SIGTERM (or SIGKILLs it).
TEST(Launch, StoppedWorkerEndsThroughTheOthersTimeout) {
  const int timeout_seconds = 2;
  Process process(launch_command({"--nproc-per-node", "3", "--timeout", std::to_string(timeout_seconds),
                                  "--grace-period", "1"},
                                 "launch_stop_allreduce", {"1", "auto"}),
                  kOmpEnv);
  ASSERT_TRUE(wait_for_ready(process, 3, 30s));
  Clock::time_point stopped = Clock::now();
  ProcessResult result = process.wait(60s);
  double seconds = std::chrono::duration<double>(Clock::now() - stopped).count();
  EXPECT_NE(result.exit_code, 0) << result.output;
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_LT(seconds, 2.0 * timeout_seconds) << result.output;
  EXPECT_TRUE(contains(result.output, "exited with code")) << result.output;
  expect_nothing_left();
}

TEST(Launch, MaxRestartsRelaunchesTheGroupWithAFreshStore) {
  ProcessResult result =
      launch({"--nproc-per-node", "2", "--max-restarts", "1", "--grace-period", "1"}, "launch_restart", {}, 60s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "exited with code 4")) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: restarting (1 of 1)")) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 0] rank 0: attempt 1 ok, fresh store: yes")) << result.output;
  EXPECT_TRUE(contains(result.output, "[rank 1] rank 1: attempt 1 ok, fresh store: yes")) << result.output;
  expect_nothing_left();
}

TEST(Launch, RestartsRunOutAndTheLastFailureCounts) {
  ProcessResult result = launch({"--nproc-per-node", "2", "--max-restarts", "1", "--grace-period", "1"}, "launch_exit",
                                {"1", "3", "100"}, 60s, kOmpEnv);
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_EQ(count_of(result.output, "restarting ("), 1u) << result.output;
  EXPECT_EQ(count_of(result.output, "exited with code 3"), 2u) << result.output;
  expect_nothing_left();
}

TEST(Launch, SigintStopsEveryWorker) {
  Process process(launch_command({"--nproc-per-node", "2", "--grace-period", "2"}, "launch_wait"), kOmpEnv);
  ASSERT_TRUE(wait_for_ready(process, 2, 30s));
  process.signal(SIGINT);
  Clock::time_point sent = Clock::now();
  ProcessResult result = process.wait(60s);
  EXPECT_EQ(result.exit_code, 130) << result.output;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - sent).count(), 3.0) << result.output;
  EXPECT_TRUE(contains(result.output, "ember launch: received SIGINT")) << result.output;
  expect_nothing_left();
}

// A SIGINT that reaches the launcher before it has set anything up, while it
// runs with SIGINT ignored (how a shell starts a background job), still stops
// the job. To send it at a known early point, not after a guessed 50 ms, the
// launcher's output goes into a pipe filled to the brim: its first message
// (the --mixed-precision line, written before the supervisor's signalfd and
// before any worker) blocks until the test reads, and the SIGINT is sent
// while it is blocked there.
// Mutation caught (run once, failed as expected: the job ran on until the
// test's timeout): without hold_stop_signals at the top of main, the
// ignored SIGINT is discarded on arrival.
TEST(Launch, SigintWhileTheLauncherStartsWithSigintIgnoredStopsTheJob) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  ASSERT_EQ(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
  const std::string block(4096, 'x');
  while (write(fds[1], block.data(), block.size()) > 0) {
  }
  while (write(fds[1], "x", 1) == 1) {
  }
  ASSERT_EQ(fcntl(fds[1], F_SETFL, 0), 0);
  const std::vector<std::string> argv =
      launch_command({"--nproc-per-node", "1", "--mixed-precision", "no", "--grace-period", "2"}, "launch_wait");
  const pid_t pid = start_launcher(argv, fds[1], fds[1], /*ignore_sigint=*/true);
  ASSERT_GE(pid, 0);
  close(fds[1]);
  // Blocked in write(2) on the full pipe: /proc/<pid>/syscall starts with 1.
  const std::string syscall_file = "/proc/" + std::to_string(pid) + "/syscall";
  bool blocked = false;
  for (Clock::time_point deadline = Clock::now() + 20s; !blocked && Clock::now() < deadline;) {
    std::ifstream file(syscall_file);
    std::string number;
    file >> number;
    blocked = number == "1";
    if (!blocked) std::this_thread::sleep_for(5ms);
  }
  EXPECT_TRUE(blocked) << "the launcher never blocked writing its first message";
  kill(pid, SIGINT);

  std::string output;
  int status = 0;
  bool exited = false;
  for (Clock::time_point deadline = Clock::now() + 30s; !exited && Clock::now() < deadline;) {
    pollfd poll_fd{fds[0], POLLIN, 0};
    if (poll(&poll_fd, 1, 50) > 0) {
      char buffer[65536];
      const ssize_t got = read(fds[0], buffer, sizeof buffer);
      if (got > 0) output.append(buffer, size_t(got));
    }
    exited = waitpid(pid, &status, WNOHANG) == pid;
  }
  if (!exited) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  close(fds[0]);
  output.erase(0, output.find_first_not_of('x'));
  EXPECT_TRUE(exited) << "the SIGINT was lost: the job ran on\n" << output;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << output;
  EXPECT_TRUE(contains(output, "ember launch: received SIGINT")) << output;
  expect_nothing_left();
}

// The launcher's stdout goes to a pipe nobody reads (a stalled `| less`, a
// wedged log shipper); its stderr to one the test reads. Rank 0 writes 20 MB
// to stdout, rank 1 exits with 5 after a second. The launcher must still see
// rank 1's exit, stop rank 0, and act on SIGTERM.
// Catches: writing the workers' output with blocking writes in the
// supervision loop (write_fully on the launcher's stdout), which froze it:
// rank 1's exit was never reported and SIGTERM was never read.
TEST(Launch, AStalledStdoutReaderDoesNotFreezeTheLauncher) {
  int stalled[2];
  int errors[2];
  ASSERT_EQ(pipe2(stalled, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(errors, O_CLOEXEC), 0);
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then sleep 1; exit 5; fi; yes 0123456789012345678901234567890123456789 | "
      "head -c 20000000; sleep 30";
  const std::vector<std::string> argv = {EMBER_CLI, "launch", "--nproc-per-node", "2", "--grace-period", "1",
                                         "--",      "/bin/sh", "-c",               script};
  const pid_t pid = start_launcher(argv, stalled[1], errors[1], /*ignore_sigint=*/false);
  ASSERT_GE(pid, 0);
  close(stalled[1]);
  close(errors[1]);
  std::string output;
  int status = 0;
  bool exited = false;
  // Reads stderr until `text` appears, the launcher exits, or the time is up.
  auto read_until = [&](const std::string& text, std::chrono::seconds limit) {
    for (Clock::time_point deadline = Clock::now() + limit; Clock::now() < deadline;) {
      pollfd poll_fd{errors[0], POLLIN, 0};
      if (poll(&poll_fd, 1, 50) > 0) {
        char buffer[65536];
        const ssize_t got = read(errors[0], buffer, sizeof buffer);
        if (got > 0) output.append(buffer, size_t(got));
      }
      if (!exited) exited = waitpid(pid, &status, WNOHANG) == pid;
      if (contains(output, text) || exited) return contains(output, text);
    }
    return false;
  };
  EXPECT_TRUE(read_until("ember launch: rank 1 (pid ", 20s)) << "rank 1's exit went unseen:\n" << output;
  // Rank 0 is gone within the grace period; the launcher waits on for the
  // reader to take rank 0's output, until the SIGTERM.
  EXPECT_FALSE(read_until("(never printed)", 3s)) << output;
  EXPECT_FALSE(exited) << output;
  kill(pid, SIGTERM);
  read_until("(never printed)", 20s);
  if (!exited) {
    kill(-pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  close(stalled[0]);
  close(errors[0]);
  EXPECT_TRUE(exited) << "the launcher ignored SIGTERM:\n" << output;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 143) << output;
  EXPECT_TRUE(contains(output, "exited with code 5")) << output;
  EXPECT_TRUE(contains(output, "received SIGTERM; every worker has exited; dropping ")) << output;
  expect_nothing_left();
}

// Workers that ignore the forwarded SIGTERM get SIGKILL after the grace period.
TEST(Launch, SigtermEscalatesToSigkill) {
  Process process(launch_command({"--nproc-per-node", "2", "--grace-period", "0.5"}, "launch_wait",
                                 {"ignore-stop-signals"}),
                  kOmpEnv);
  ASSERT_TRUE(wait_for_ready(process, 2, 30s));
  process.signal(SIGTERM);
  ProcessResult result = process.wait(60s);
  EXPECT_EQ(result.exit_code, 143) << result.output;
  EXPECT_TRUE(contains(result.output, "still running 500 ms after the stop signal; sending SIGKILL")) << result.output;
  expect_nothing_left();
}

// PR_SET_PDEATHSIG: nothing the launcher does (it cannot act on SIGKILL) is
// needed for its workers to die with it.
TEST(Launch, SigkillToTheLauncherLeavesNoWorker) {
  Process process(launch_command({"--nproc-per-node", "2"}, "launch_wait"), kOmpEnv);
  ASSERT_TRUE(wait_for_ready(process, 2, 30s));
  process.signal(SIGKILL);
  ProcessResult result = process.wait(20s);
  EXPECT_EQ(result.signal, SIGKILL);
  Clock::time_point deadline = Clock::now() + 5s;
  while (!leftover_workers().empty() && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
  expect_nothing_left();
}

// Whether `pid` is gone: no such process, or a zombie no one has reaped yet.
bool process_gone(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  return text.empty() || text.find(") Z ") != std::string::npos;
}

// What a worker started (here a `sleep` in the background, and one in the
// foreground) dies with a SIGKILLed launcher too, not only the worker.
// Catches: relying on PR_SET_PDEATHSIG alone (no watchdog, or a watchdog
// that does not kill the workers' process groups), which left both sleeps
// running for their whole 1234 s.
TEST(Launch, SigkillToTheLauncherLeavesNothingTheWorkersStarted) {
  const std::string script = "sleep 1234 & echo \"background $!\"; sh -c 'echo \"foreground $$\"; exec sleep 1234'";
  Process process({EMBER_CLI, "launch", "--nproc-per-node", "1", "--", "/bin/sh", "-c", script}, kOmpEnv);
  ASSERT_TRUE(process.wait_for_output("foreground ", 30s));
  ASSERT_TRUE(process.wait_for_output("\n", 5s));
  process.signal(SIGKILL);
  const ProcessResult result = process.wait(20s);
  EXPECT_EQ(result.signal, SIGKILL) << result.output;
  std::vector<pid_t> sleeps;
  for (const std::string& line : lines_of(result.output)) {
    int pid = 0;
    if (std::sscanf(line.c_str(), "[rank 0] background %d", &pid) == 1 ||
        std::sscanf(line.c_str(), "[rank 0] foreground %d", &pid) == 1)
      sleeps.push_back(pid_t(pid));
  }
  ASSERT_EQ(sleeps.size(), 2u) << result.output;
  const Clock::time_point deadline = Clock::now() + 5s;
  auto all_gone = [&] { return std::all_of(sleeps.begin(), sleeps.end(), process_gone); };
  while (!all_gone() && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
  for (pid_t pid : sleeps) {
    EXPECT_TRUE(process_gone(pid)) << "pid " << pid << " outlived the launcher";
    if (!process_gone(pid)) kill(pid, SIGKILL);
  }
  expect_nothing_left();
}

TEST(Launch, ProgramNotFound) {
  ProcessResult result = run_process({EMBER_CLI, "launch", "--nproc-per-node", "2", "--", "ember-no-such-program"}, 20s);
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(contains(result.output, "ember launch: cannot run 'ember-no-such-program': No such file or directory"))
      << result.output;
  expect_nothing_left();
}

// Errors in the flags stop the launcher before any worker starts.
TEST(Launch, BadOptionsAreErrors) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  std::string busy_port = std::to_string(ntohs(address.sin_port));

  struct Case {
    std::vector<std::string> flags;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--nproc-per-node", "0"}, "--nproc-per-node must be at least 1, got 0"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-port", "1234"}, "--node-rank 2 is not a node of --nnodes 2"},
      {{"--nnodes", "2", "--node-rank", "1", "--master-port", "1234"}, "needs the job's token in EMBER_STORE_TOKEN"},
      {{"--nnodes", "2", "--max-restarts", "1", "--master-port", "1234"}, "--max-restarts works on a single node only"},
      {{"--no-such-flag"}, "unknown option '--no-such-flag'"},
      // Numbers the workers would refuse, or that overflow.
      {{"--grace-period", "inf"}, "--grace-period must be a finite number of seconds from 0 to below 1e+09, got inf"},
      {{"--grace-period", "nan"}, "--grace-period must be a finite number of seconds"},
      {{"--grace-period", "-1"}, "--grace-period must be a finite number of seconds"},
      {{"--timeout", "2147483647"}, "--timeout 2147483647 is more than the workers accept (EMBER_TIMEOUT below 1e+09"},
      {{"--nnodes", "3", "--nproc-per-node", "1000000000", "--master-port", "1234"},
       "--nnodes 3 times --nproc-per-node 1000000000 is 3000000000 processes, more than a world size can be"},
      {{"--master-port", busy_port}, "cannot host the store on 127.0.0.1:" + busy_port},
  };
  for (const Case& c : cases) {
    std::vector<std::string> command = {"/usr/bin/env", "-u", "EMBER_STORE_TOKEN"};
    std::vector<std::string> launch_part = launch_command(c.flags, "launch_wait");
    command.insert(command.end(), launch_part.begin(), launch_part.end());
    ProcessResult result = run_process(command, 20s, kOmpEnv);
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_FALSE(result.timed_out) << result.output;
    EXPECT_TRUE(contains(result.output, c.message)) << "expected '" << c.message << "' in: " << result.output;
    EXPECT_FALSE(contains(result.output, "[rank")) << result.output;
  }
  close(listener);
  expect_nothing_left();
}

// Two launchers on this machine, as two nodes: node 0 hosts the store on a
// fixed port, node 1's worker gives its Gloo peers 127.0.0.2 (any 127/8
// address is this host on Linux), and the allreduce crosses between them.
// A Gloo pair is dialled by the side with the higher address, so node 0
// advertises 127.0.0.3: then rank 0 really connects to 127.0.0.2.
TEST(Launch, TwoLaunchersFormOneJob) {
  std::string port = std::to_string(free_port());
  std::random_device random;
  std::string token = "launch-test-" + std::to_string(random()) + std::to_string(random()) + std::to_string(random());
  std::vector<std::string> env = kOmpEnv;
  env.push_back("EMBER_STORE_TOKEN=" + token);
  std::vector<std::string> common = {"--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port, "--timeout", "30"};
  std::vector<std::string> node0 = common;
  node0.insert(node0.end(), {"--node-rank", "0", "--local-addr", "127.0.0.3"});
  std::vector<std::string> node1 = common;
  node1.insert(node1.end(), {"--node-rank", "1", "--local-addr", "127.0.0.2"});

  Process first(launch_command(node0, "launch_allreduce", {"peer", "127.0.0.2"}), env);
  ASSERT_TRUE(first.wait_for_output("(hosted here)", 20s));
  Process second(launch_command(node1, "launch_allreduce", {"local", "127.0.0.2"}), env);
  ProcessResult result1 = second.wait(60s);
  ProcessResult result0 = first.wait(60s);
  EXPECT_EQ(result0.exit_code, 0) << result0.output;
  EXPECT_EQ(result1.exit_code, 0) << result1.output;
  EXPECT_TRUE(contains(result0.output, "[rank 0] rank 0 of 2: sum 1")) << result0.output;
  EXPECT_TRUE(contains(result1.output, "[rank 1] rank 1 of 2: sum 1")) << result1.output;
  EXPECT_TRUE(contains(result1.output, "(ranks 1-1 of 2, node 1 of 2)")) << result1.output;
  expect_nothing_left();
}

}  // namespace
}  // namespace ember::test
