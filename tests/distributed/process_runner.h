// Starting and supervising real processes from a test: `ember launch` jobs
// around distributed_worker scenarios, with a timeout on every wait, output
// captured, and checks that nothing (process or shared-memory segment) is
// left behind afterwards.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace ember::test {

struct ProcessResult {
  int exit_code = -1;   // when the process exited
  int signal = 0;       // when a signal killed it
  bool timed_out = false;
  double seconds = 0;
  std::string output;   // stdout and stderr, interleaved
};

// A process started in its own process group, its output collected into a
// pipe. The destructor kills the group (SIGKILL) if it is still running.
class Process {
 public:
  Process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int signal_number) const;
  // Waits for the exit, reading output; on timeout kills the group and marks timed_out.
  ProcessResult wait(std::chrono::milliseconds timeout);
  // Reads output until `text` appears or the timeout passes; whether it appeared.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout);

 private:
  void read_available(int timeout_ms);
  pid_t pid_ = -1;
  int output_fd_ = -1;
  bool reaped_ = false;
  std::string output_;
  std::chrono::steady_clock::time_point start_;
};

ProcessResult run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          const std::vector<std::string>& extra_env = {});

// `ember launch <launch_args> -- distributed_worker <scenario> <args...>`.
std::vector<std::string> launch_command(const std::vector<std::string>& launch_args, const std::string& scenario,
                                        const std::vector<std::string>& args = {});
ProcessResult launch(const std::vector<std::string>& launch_args, const std::string& scenario,
                     const std::vector<std::string>& args = {},
                     std::chrono::milliseconds timeout = std::chrono::seconds(120),
                     const std::vector<std::string>& extra_env = {});

// A job that ended by itself with exit code 0, leaving no worker process
// and no shared-memory segment behind (GoogleTest expectations).
void expect_clean_success(const ProcessResult& result);

// A loopback port that was free a moment ago (bound to port 0, read, closed).
int free_port();
// Whether a loopback port can be bound now (for ports a job derives rather than picks).
bool loopback_port_free(int port);

// The whole file's bytes ("" when it cannot be read): final parameters a test compares.
std::string read_bytes(const std::filesystem::path& path);

// Processes still running this build's distributed_worker (EMBER_WORKER), by their /proc/<pid>/exe.
std::vector<pid_t> leftover_workers();
// Shared-memory segments of ember jobs (/dev/shm/ember-*).
std::vector<std::string> leftover_segments();

}  // namespace ember::test
