// See process_runner.h.
#include "distributed/process_runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace ember::test {

Process::Process(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  start_ = std::chrono::steady_clock::now();
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    setpgid(0, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    for (const std::string& entry : extra_env) putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "execv %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid_, pid_);
  close(fds[1]);
  output_fd_ = fds[0];
}

Process::~Process() {
  if (!reaped_ && pid_ > 0) {
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (output_fd_ >= 0) close(output_fd_);
}

void Process::signal(int signal_number) const { kill(pid_, signal_number); }

void Process::read_available(int timeout_ms) {
  if (output_fd_ < 0) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::min(timeout_ms, 20)));
    return;
  }
  pollfd poll_fd{output_fd_, POLLIN, 0};
  if (poll(&poll_fd, 1, timeout_ms) <= 0) return;
  char buffer[65536];
  ssize_t n = read(output_fd_, buffer, sizeof buffer);
  if (n > 0) {
    output_.append(buffer, size_t(n));
  } else if (n == 0) {
    close(output_fd_);
    output_fd_ = -1;
  }
}

bool Process::wait_for_output(const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (output_.find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    read_available(20);
  }
  return true;
}

ProcessResult Process::wait(std::chrono::milliseconds timeout) {
  ProcessResult result;
  auto deadline = start_ + timeout;
  int status = 0;
  while (!reaped_) {
    read_available(20);
    pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      reaped_ = true;
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      result.timed_out = true;
      kill(-pid_, SIGKILL);
      waitpid(pid_, &status, 0);
      reaped_ = true;
    }
  }
  // The rest of the output: the pipe closes when the last writer (any worker) exits.
  auto drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (output_fd_ >= 0 && std::chrono::steady_clock::now() < drain_deadline) read_available(50);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.output = output_;
  return result;
}

ProcessResult run_process(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                          const std::vector<std::string>& extra_env) {
  Process process(argv, extra_env);
  return process.wait(timeout);
}

std::vector<std::string> launch_command(const std::vector<std::string>& launch_args, const std::string& scenario,
                                        const std::vector<std::string>& args) {
  std::vector<std::string> command = {EMBER_CLI, "launch"};
  command.insert(command.end(), launch_args.begin(), launch_args.end());
  command.push_back("--");
  command.push_back(EMBER_WORKER);
  command.push_back(scenario);
  command.insert(command.end(), args.begin(), args.end());
  return command;
}

ProcessResult launch(const std::vector<std::string>& launch_args, const std::string& scenario,
                     const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                     const std::vector<std::string>& extra_env) {
  return run_process(launch_command(launch_args, scenario, args), timeout, extra_env);
}

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!bound) throw std::runtime_error("no free loopback port");
  return ntohs(address.sin_port);
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

bool loopback_port_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(uint16_t(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  close(fd);
  return free;
}

std::vector<pid_t> leftover_workers() {
  // Give processes that are exiting a moment to be reaped by their parents.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // This build's worker only: another checkout's test run on the same machine is not ours.
  const std::filesystem::path worker = std::filesystem::weakly_canonical(EMBER_WORKER);
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code error;
    const std::filesystem::path program = std::filesystem::read_symlink(entry.path() / "exe", error);
    if (error || program != worker) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string stat_text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    if (stat_text.find(") Z ") == std::string::npos) found.push_back(pid_t(std::stoi(name)));
  }
  return found;
}

std::vector<std::string> leftover_segments() {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename();
    if (name.rfind("ember-", 0) == 0) found.push_back(name);
  }
  return found;
}

void expect_clean_success(const ProcessResult& result) {
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(leftover_workers().empty());
  EXPECT_TRUE(leftover_segments().empty());
}

}  // namespace ember::test
