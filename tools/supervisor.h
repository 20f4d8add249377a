// Runs one attempt of a job's local workers and supervises them: forks each
// worker into its own process group, tied to the launcher's life (with a
// watchdog for what the workers start), routes its
// output through LineWriters, and on the first failure (or a signal to the
// launcher) stops the rest. tools/launch.cpp calls it once per attempt
// (Note [Launcher supervision] in distributed/README.md).
// Tests: tests/distributed/test_launch.cpp.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace ember::launch {

struct WorkerSpec {
  int rank = 0;                          // global rank, for prefixes and messages
  std::vector<std::string> environment;  // the worker's whole environment, "KEY=value"
  int stdout_target = 1;                 // where its stdout lines go
  int stderr_target = 2;                 // and its stderr lines
  std::string prefix;                    // put before each line ("[rank 3] ", or "" in a log file)
  std::vector<int> cpus;                 // --bind-cores: the CPUs it may run on; empty: the launcher's
};

struct AttemptOptions {
  std::string program;            // the resolved path that is executed
  std::vector<std::string> argv;  // argv[0] as the user wrote it
  std::vector<WorkerSpec> workers;
  std::chrono::milliseconds grace{5000};  // from SIGTERM to SIGKILL
  int signal_fd = -1;                     // from block_launcher_signals()
};

struct AttemptResult {
  enum class Kind {
    success,          // every worker exited 0
    worker_failed,    // a worker failed first; exit_code is its code (128+signal)
    launcher_signal,  // SIGINT/SIGTERM/SIGHUP to the launcher stopped the attempt
    spawn_failed,     // fork or exec failed; the message is printed
  };
  Kind kind = Kind::success;
  int exit_code = 0;  // what the launcher exits with if it stops here
};

// The first thing `ember launch` does (tools/main.cpp, before it parses a
// flag): blocks SIGINT, SIGTERM and SIGHUP (unless SIGHUP is ignored), then
// resets an inherited SIG_IGN of SIGINT and SIGTERM to the default. A stop
// signal that arrives from here on stays pending until the supervisor reads
// it from block_launcher_signals' signalfd, however early it came (Note
// [Launcher supervision]).
void hold_stop_signals();
// Blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP (unless SIGHUP is ignored
// already, as under nohup) and returns a non-blocking signalfd for them. Call it before
// any thread starts (the store server's), so that every thread blocks them.
int block_launcher_signals();
// A stop signal (SIGINT, SIGTERM, SIGHUP) that arrived outside an attempt, or 0.
int take_stop_signal(int signal_fd);

AttemptResult run_attempt(const AttemptOptions& options);

// "SIGKILL" for 9.
std::string signal_name(int signal_number);

}  // namespace ember::launch
