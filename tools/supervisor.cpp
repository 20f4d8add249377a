// See supervisor.h. Everything here runs on the launcher's main thread: a
// worker's PR_SET_PDEATHSIG fires when the *thread* that forked it exits, so
// the forking thread must be the one that lives as long as the launcher.
#include "supervisor.h"

#include <fcntl.h>
#include <sched.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "output_prefixer.h"

namespace ember::launch {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// After the last worker exited, how long to wait for its pipes to close: a
// grandchild that left the worker's process group may hold them open forever.
constexpr milliseconds kDrainTime{1000};
// After SIGKILL, how long to wait for the kernel to reap (a process in
// uninterruptible sleep); past it the launcher exits and PDEATHSIG remains.
constexpr milliseconds kReapTime{5000};

struct Stream {
  int fd = -1;
  LineWriter writer;
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  Stream out;
  Stream err;
};

// argv and envp as the char* arrays execve takes, built before fork: the
// child of a multi-threaded process may only make async-signal-safe calls
// until exec, so it must not allocate.
class CStrings {
 public:
  explicit CStrings(const std::vector<std::string>& strings) {
    for (const std::string& text : strings) pointers_.push_back(const_cast<char*>(text.c_str()));
    pointers_.push_back(nullptr);
  }
  char** get() { return pointers_.data(); }

 private:
  std::vector<char*> pointers_;
};

// In the forked child: async-signal-safe calls only.
[[noreturn]] void exec_worker(const char* program, char** argv, char** envp, int out_fd, int err_fd,
                              int exec_error_fd, pid_t launcher, const cpu_set_t* cpus) {
  setpgid(0, 0);
  // Note [Launcher supervision]: the worker dies with the launcher, even when
  // the launcher is SIGKILLed. If the launcher died before prctl took effect
  // the child was already reparented, which getppid shows.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != launcher) _exit(126);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // The launcher ignores SIGPIPE and overrides an inherited SIG_IGN of
  // SIGINT (block_launcher_signals); its workers start with the defaults.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  for (int signal_number : {SIGPIPE, SIGINT, SIGTERM}) sigaction(signal_number, &default_action, nullptr);
  // Each worker is in a background process group: reading the terminal would stop it.
  int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd > 0) dup2(null_fd, 0);
  dup2(out_fd, 1);
  dup2(err_fd, 2);
  // The launcher's other descriptors (the store's sockets, other workers'
  // pipes) must not leak into the worker.
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  // --bind-cores: set before exec, so every thread the worker starts inherits it.
  if (!cpus || sched_setaffinity(0, sizeof *cpus, cpus) == 0) execve(program, argv, envp);
  int error = errno;
  ssize_t ignored = write(exec_error_fd, &error, sizeof error);
  (void)ignored;
  _exit(127);
}

struct SpawnError {
  std::string message;
  int exit_code = 1;
};

std::optional<SpawnError> spawn(Worker& worker, const WorkerSpec& spec, const AttemptOptions& options,
                                char** argv) {
  CStrings envp(spec.environment);
  int fds[6];
  int made = 0;
  for (; made < 3; ++made) {
    if (pipe2(fds + 2 * made, O_CLOEXEC) != 0) break;
  }
  if (made < 3) {
    std::string reason = std::strerror(errno);
    for (int i = 0; i < 2 * made; ++i) close(fds[i]);
    return SpawnError{fmt::format("cannot create pipes for rank {}: {}", spec.rank, reason)};
  }
  auto [out_read, out_write, err_read, err_write, exec_read, exec_write] =
      std::tuple(fds[0], fds[1], fds[2], fds[3], fds[4], fds[5]);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (int cpu : spec.cpus) CPU_SET(cpu, &cpus);
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0)
    exec_worker(options.program.c_str(), argv, envp.get(), out_write, err_write, exec_write, launcher,
                spec.cpus.empty() ? nullptr : &cpus);
  std::string fork_error = pid < 0 ? std::strerror(errno) : "";
  close(out_write);
  close(err_write);
  close(exec_write);
  if (pid < 0) {
    close(out_read);
    close(err_read);
    close(exec_read);
    return SpawnError{fmt::format("cannot start rank {}: fork: {}", spec.rank, fork_error)};
  }
  setpgid(pid, pid);  // also here, so that the group exists before the first kill(-pid)
  // The exec pipe closes on a successful exec; an errno arrives if it failed.
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(exec_read, &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  close(exec_read);
  if (got == sizeof exec_errno) {
    waitpid(pid, nullptr, 0);
    close(out_read);
    close(err_read);
    return SpawnError{fmt::format("cannot run '{}': {}", options.argv.at(0), std::strerror(exec_errno)), 127};
  }
  worker.pid = pid;
  worker.running = true;
  worker.out.fd = out_read;
  worker.err.fd = err_read;
  return std::nullopt;
}

// Note [Launcher supervision]: PR_SET_PDEATHSIG reaches a worker, not what
// the worker started. A watchdog process, forked before the workers, keeps
// the read end of a pipe whose only write end is the launcher's; the kernel
// closes it however the launcher dies, SIGKILL included, and on that end of
// file the watchdog kills the process group of every worker it was told of
// and not told was reaped. In the child: async-signal-safe calls only (the
// launcher has the store server's thread), into memory allocated before fork.
[[noreturn]] void run_watchdog(int from_launcher, pid_t* groups, size_t capacity) {
  setpgid(0, 0);  // outside the launcher's group: a kill of that group leaves it to clean up
  dup2(from_launcher, 0);
  close_range(1, ~0U, 0);  // holds no port, pipe or file of the launcher's
  size_t count = 0;
  bool stand_down = false;
  for (;;) {
    int32_t message = 0;
    const ssize_t got = read(0, &message, sizeof message);
    if (got < 0 && errno == EINTR) continue;
    if (got != sizeof message) break;
    if (message == 0) stand_down = true;  // the attempt ended as it should
    if (message > 0 && count < capacity) groups[count++] = pid_t(message);
    for (size_t i = 0; message < 0 && i < count; ++i) {
      if (groups[i] != pid_t(-message)) continue;
      groups[i] = groups[--count];
      break;
    }
  }
  for (size_t i = 0; !stand_down && i < count; ++i) {
    kill(-groups[i], SIGKILL);
    kill(groups[i], SIGKILL);  // one that left its group
  }
  _exit(0);
}

class Watchdog {
 public:
  explicit Watchdog(size_t workers) : groups_(workers) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      say(fmt::format("cannot start the watchdog (pipe: {}); what the workers start may outlive a killed launcher",
                      std::strerror(errno)));
      return;
    }
    pid_ = fork();
    if (pid_ == 0) run_watchdog(fds[0], groups_.data(), groups_.size());
    close(fds[0]);
    if (pid_ < 0) {
      say(fmt::format("cannot start the watchdog (fork: {}); what the workers start may outlive a killed launcher",
                      std::strerror(errno)));
      close(fds[1]);
      return;
    }
    to_watchdog_ = fds[1];
  }
  ~Watchdog() {
    if (to_watchdog_ < 0) return;
    tell(0);
    close(to_watchdog_);
    waitpid(pid_, nullptr, 0);
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void watch(pid_t group) { tell(int32_t(group)); }
  void forget(pid_t group) { tell(-int32_t(group)); }

 private:
  // Four bytes: one write(2), all or nothing, on a pipe the watchdog drains.
  void tell(int32_t message) {
    if (to_watchdog_ < 0) return;
    ssize_t wrote;
    do {
      wrote = write(to_watchdog_, &message, sizeof message);
    } while (wrote < 0 && errno == EINTR);
  }

  std::vector<pid_t> groups_;  // the child's: allocated here, before fork
  pid_t pid_ = -1;
  int to_watchdog_ = -1;
};

int exit_code_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

std::string describe_exit(const Worker& worker, int status) {
  if (WIFSIGNALED(status)) {
    return fmt::format("rank {} (pid {}) was killed by signal {} ({})", worker.rank, worker.pid, WTERMSIG(status),
                       signal_name(WTERMSIG(status)));
  }
  return fmt::format("rank {} (pid {}) exited with code {}", worker.rank, worker.pid, WEXITSTATUS(status));
}

// Writes the stream's last partial line and closes its pipe.
void close_stream(Stream& stream) {
  if (stream.fd < 0) return;
  stream.writer.finish();
  close(stream.fd);
  stream.fd = -1;
}

// Reads what one pipe has; at end of stream closes it.
void drain(Stream& stream) {
  char buffer[65536];
  ssize_t got = read(stream.fd, buffer, sizeof buffer);
  if (got > 0) {
    stream.writer.append(std::string_view(buffer, size_t(got)));
  } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
    close_stream(stream);
  }
}

std::string rank_list(const std::vector<Worker>& workers) {
  std::string list;
  for (const Worker& worker : workers) {
    if (!worker.running) continue;
    list += (list.empty() ? "" : ", ") + std::to_string(worker.rank);
  }
  return list;
}

// One attempt: the workers, where the stop sequence stands, and the result.
class Attempt {
 public:
  explicit Attempt(const AttemptOptions& options) : options_(options), argv_(options.argv) {
    workers_.reserve(options.workers.size());
  }

  AttemptResult run() {
    SupervisedOutput supervised;
    Watchdog watchdog(options_.workers.size());
    watchdog_ = &watchdog;
    start_workers();
    while (!finished()) {
      poll_once();
      handle_launcher_signals();
      reap();
    }
    for (Worker& worker : workers_) {
      for (Stream* stream : {&worker.out, &worker.err}) close_stream(*stream);
    }
    return result_;
  }

 private:
  void start_workers() {
    for (const WorkerSpec& spec : options_.workers) {
      workers_.push_back(Worker{.rank = spec.rank,
                                .out = {-1, LineWriter(spec.stdout_target, spec.prefix)},
                                .err = {-1, LineWriter(spec.stderr_target, spec.prefix)}});
      std::optional<SpawnError> error = spawn(workers_.back(), spec, options_, argv_.get());
      if (!error) watchdog_->watch(workers_.back().pid);
      if (error) {
        say(error->message);
        result_ = {AttemptResult::Kind::spawn_failed, error->exit_code};
        begin_stop(SIGTERM);
        return;
      }
    }
  }

  bool any_running() const {
    return std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running; });
  }

  std::vector<OutputSink*> sinks_of_workers() const {
    std::vector<OutputSink*> sinks;
    for (const Worker& worker : workers_) {
      for (const Stream* stream : {&worker.out, &worker.err}) {
        if (std::find(sinks.begin(), sinks.end(), &stream->writer.sink()) == sinks.end())
          sinks.push_back(&stream->writer.sink());
      }
    }
    return sinks;
  }

  // Acts on the deadlines that passed; whether the attempt is over: every
  // worker reaped, its pipes drained (or given up on) and its output written
  // (or dropped on a stop signal).
  bool finished() {
    bool running = any_running();
    bool open = std::any_of(workers_.begin(), workers_.end(),
                            [](const Worker& w) { return w.out.fd >= 0 || w.err.fd >= 0; });
    // A pipe left unread because its reader is slow is not one a grandchild
    // holds open: that wait is the reader's, as long as it takes, and a stop
    // signal ends it (output_dropped_).
    bool held_by_reader = std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) {
      return (w.out.fd >= 0 && w.out.writer.sink().full()) || (w.err.fd >= 0 && w.err.writer.sink().full());
    });
    Clock::time_point now = Clock::now();
    if (!running) {
      if (output_dropped_) return true;
      const auto sinks = sinks_of_workers();
      bool unwritten = std::any_of(sinks.begin(), sinks.end(), [](const OutputSink* sink) { return sink->pending(); });
      if (held_by_reader) drain_until_.reset();
      else if (open && !drain_until_) drain_until_ = now + kDrainTime;
      if (open && !held_by_reader && now >= *drain_until_) {
        for (Worker& worker : workers_) {
          for (Stream* stream : {&worker.out, &worker.err}) close_stream(*stream);
        }
        open = false;
      }
      return !open && !unwritten;
    }
    if (stopping_ && !killed_ && now >= kill_at_) {
      say(fmt::format("rank(s) {} still running {} ms after the stop signal; sending SIGKILL", rank_list(workers_),
                      options_.grace.count()));
      kill_all();
    }
    if (killed_ && now >= give_up_at_) {
      say(fmt::format("rank(s) {} did not exit after SIGKILL; leaving them", rank_list(workers_)));
      return true;
    }
    return false;
  }

  // Waits for output, a signal or the next deadline; writes the output.
  void poll_once() {
    std::optional<Clock::time_point> next = drain_until_;
    if (stopping_ && any_running()) next = killed_ ? give_up_at_ : kill_at_;
    int timeout_ms = -1;
    if (next) {
      auto wait = std::chrono::ceil<milliseconds>(*next - Clock::now()).count();
      timeout_ms = int(std::clamp<long long>(wait, 0, 60'000));
    }
    // One poll for signals, the workers' pipes and the outputs' room, so
    // that a full output never keeps the loop from the other two. A pipe
    // whose output is full is not read: its worker blocks on it instead.
    std::vector<pollfd> poll_fds = {pollfd{options_.signal_fd, POLLIN, 0}};
    std::vector<Stream*> polled = {nullptr};
    for (Worker& worker : workers_) {
      for (Stream* stream : {&worker.out, &worker.err}) {
        if (stream->fd < 0 || stream->writer.sink().full()) continue;
        poll_fds.push_back(pollfd{stream->fd, POLLIN, 0});
        polled.push_back(stream);
      }
    }
    const size_t first_sink = poll_fds.size();
    std::vector<OutputSink*> sinks;
    for (OutputSink* sink : sinks_of_workers()) {
      if (!sink->pending()) continue;
      poll_fds.push_back(pollfd{sink->poll_fd(), POLLOUT, 0});
      sinks.push_back(sink);
    }
    int ready = poll(poll_fds.data(), poll_fds.size(), timeout_ms);
    EMBER_CHECK(ready >= 0 || errno == EINTR, "poll failed: {}", std::strerror(errno));
    for (size_t i = 0; i < sinks.size(); ++i) {
      if (poll_fds[first_sink + i].revents != 0) sinks[i]->flush();
    }
    for (size_t i = 1; i < first_sink; ++i) {
      if (poll_fds[i].revents != 0) drain(*polled[i]);
    }
  }

  // SIGINT/SIGTERM/SIGHUP: forwarded, then the stop sequence; during a stop
  // (a failure's, or an earlier signal's) they cut it short with SIGKILL.
  void handle_launcher_signals() {
    int signal_number = take_stop_signal(options_.signal_fd);
    if (signal_number == 0) return;
    if (!any_running()) {
      // Every worker is gone; what is left is output a reader has not taken.
      size_t unwritten = 0;
      for (OutputSink* sink : sinks_of_workers()) {
        unwritten += sink->pending_bytes();
        sink->discard();
      }
      output_dropped_ = true;
      say(fmt::format("received {}; every worker has exited; dropping {} bytes of their output not yet written",
                      signal_name(signal_number), unwritten));
      result_ = {AttemptResult::Kind::launcher_signal, 128 + signal_number};
      return;
    }
    bool again = result_.kind == AttemptResult::Kind::launcher_signal;
    // Also when a failure's stop is under way: the user wants out now, without a restart.
    result_ = {AttemptResult::Kind::launcher_signal, 128 + signal_number};
    say(fmt::format("received {}{}; {} rank(s) {}", signal_name(signal_number), again ? " again" : "",
                    stopping_ ? "killing" : "stopping", rank_list(workers_)));
    if (!stopping_) {
      begin_stop(signal_number);
    } else if (!killed_) {
      kill_all();
    }
  }

  // Every iteration rather than only on SIGCHLD: signals coalesce.
  void reap() {
    const Worker* first_failure = nullptr;
    int first_status = 0;
    for (Worker& worker : workers_) {
      if (!worker.running) continue;
      int status = 0;
      if (waitpid(worker.pid, &status, WNOHANG) != worker.pid) continue;
      worker.running = false;
      watchdog_->forget(worker.pid);
      bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      // Exits after the stop began are its consequences, not failures to report.
      if (!failed || stopping_) continue;
      // Failures found in one pass came in an order the pass cannot see. A
      // worker killed by a signal (kill -9, the OOM killer, a crash) is the
      // cause, and one that exited with an error most likely noticed it.
      if (!first_failure || (WIFSIGNALED(status) && !WIFSIGNALED(first_status))) {
        first_failure = &worker;
        first_status = status;
      }
    }
    if (!first_failure) return;
    say(describe_exit(*first_failure, first_status));
    result_ = {AttemptResult::Kind::worker_failed, exit_code_of(first_status)};
    std::string others = rank_list(workers_);
    if (!others.empty()) {
      say(fmt::format("stopping rank(s) {} (SIGTERM, then SIGKILL after {} ms)", others, options_.grace.count()));
    }
    begin_stop(SIGTERM);
  }

  void signal_all(int signal_number) {
    for (const Worker& worker : workers_) {
      if (!worker.running) continue;
      // The worker's group holds the processes it started too; a worker that
      // left its group (setsid) is still reached by its pid.
      if (kill(-worker.pid, signal_number) != 0) kill(worker.pid, signal_number);
      // A stopped (SIGSTOP) worker acts on SIGTERM only once continued.
      if (signal_number != SIGKILL && kill(-worker.pid, SIGCONT) != 0) kill(worker.pid, SIGCONT);
    }
  }

  void begin_stop(int signal_number) {
    stopping_ = true;
    kill_at_ = Clock::now() + options_.grace;
    signal_all(signal_number);
  }

  void kill_all() {
    killed_ = true;
    give_up_at_ = Clock::now() + kReapTime;
    signal_all(SIGKILL);
  }

  const AttemptOptions& options_;
  CStrings argv_;
  std::vector<Worker> workers_;
  AttemptResult result_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_{};
  Clock::time_point give_up_at_{};
  std::optional<Clock::time_point> drain_until_;
  bool output_dropped_ = false;
  Watchdog* watchdog_ = nullptr;  // run()'s
};

}  // namespace

std::string signal_name(int signal_number) {
  const char* abbreviation = sigabbrev_np(signal_number);
  return abbreviation ? fmt::format("SIG{}", abbreviation) : fmt::format("signal {}", signal_number);
}

void hold_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  struct sigaction hangup {};
  sigaction(SIGHUP, nullptr, &hangup);
  if (hangup.sa_handler != SIG_IGN) sigaddset(&set, SIGHUP);
  // Blocked first: Linux keeps a blocked signal pending even while its
  // action is SIG_IGN, and the default action of an unblocked one would end
  // the launcher without stopping anything. Then the disposition: a shell
  // starts background jobs with SIGINT ignored, and an ignored signal that
  // is unblocked later is dropped.
  EMBER_CHECK(pthread_sigmask(SIG_BLOCK, &set, nullptr) == 0, "ember launch: cannot block signals");
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  for (int signal_number : {SIGINT, SIGTERM}) sigaction(signal_number, &action, nullptr);
}

int block_launcher_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  // An inherited SIG_IGN is kept for SIGHUP only (nohup). Shells also ignore
  // SIGINT in background jobs, but a `kill -INT` to the launcher should still stop the job.
  struct sigaction hangup {};
  sigaction(SIGHUP, nullptr, &hangup);
  if (hangup.sa_handler != SIG_IGN) sigaddset(&set, SIGHUP);
  struct sigaction action {};
  action.sa_handler = SIG_DFL;  // an inherited SIG_IGN would let the kernel reap workers unseen
  sigaction(SIGCHLD, &action, nullptr);
  action.sa_handler = SIG_IGN;  // a closed terminal must not kill a launcher that has workers to stop
  sigaction(SIGPIPE, &action, nullptr);
  EMBER_CHECK(pthread_sigmask(SIG_BLOCK, &set, nullptr) == 0, "cannot block signals");
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  EMBER_CHECK(fd >= 0, "signalfd failed: {}", std::strerror(errno));
  return fd;
}

int take_stop_signal(int signal_fd) {
  int found = 0;
  signalfd_siginfo info;
  while (read(signal_fd, &info, sizeof info) == sizeof info) {
    if (info.ssi_signo != SIGCHLD && found == 0) found = int(info.ssi_signo);
  }
  return found;
}

AttemptResult run_attempt(const AttemptOptions& options) { return Attempt(options).run(); }

}  // namespace ember::launch
