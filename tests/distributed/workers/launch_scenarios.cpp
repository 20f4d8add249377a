// Worker scenarios for tests/distributed/test_launch.cpp and
// tests/tools/test_launch_config.cpp: what `ember launch` gives a worker
// (environment, the Accelerator's variables, descriptors, store), how its
// output and exits reach the launcher, and a two-launcher Gloo job. Each prints what it saw;
// "ready pid N" tells a test that the worker runs and which process it is.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "core/error.h"
#include "core/ops/creation.h"
#include "distributed/accelerator/accelerator_options.h"
#include "distributed/environment.h"
#include "distributed/process_group.h"
#include "distributed/store/tcp_store.h"
#include "workers/scenario.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;
namespace dist = ember::distributed;

std::string env_or(const char* name, const std::string& fallback = "<unset>") {
  const char* value = std::getenv(name);
  return value ? value : fallback;
}

int env_int(const char* name) { return std::stoi(env_or(name, "-1")); }

// Prints a failed check on this rank; returns the number of failures (0 or 1).
int check(bool condition, const std::string& what) {
  if (!condition) std::printf("rank %s: CHECK FAILED: %s\n", env_or("RANK").c_str(), what.c_str());
  return condition ? 0 : 1;
}

void say_ready() {
  std::printf("ready pid %d rank %d\n", int(getpid()), env_int("RANK"));
  std::fflush(stdout);
}

// Stopped from outside: the launcher's stop sequence is what ends it.
void sleep_until_stopped() { std::this_thread::sleep_for(60s); }

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

std::string link_target(const std::string& path) {
  char buffer[4096];
  ssize_t n = readlink(path.c_str(), buffer, sizeof buffer - 1);
  return n > 0 ? std::string(buffer, size_t(n)) : "";
}

// This process's open descriptors (without the one reading the list).
std::vector<int> open_descriptors() {
  std::vector<int> fds;
  DIR* directory = opendir("/proc/self/fd");
  if (!directory) return fds;
  int own = dirfd(directory);
  while (dirent* entry = readdir(directory)) {
    if (entry->d_name[0] == '.') continue;
    int fd = std::atoi(entry->d_name);
    if (fd != own) fds.push_back(fd);
  }
  closedir(directory);
  return fds;
}

struct TcpConnection {
  std::string local;   // dotted IPv4 address
  std::string remote;
};

// "0100007F" (little-endian hex, as /proc/net/tcp writes it) -> "127.0.0.1".
std::string ipv4_from_proc(const std::string& hex) {
  unsigned long value = std::stoul(hex, nullptr, 16);
  return std::to_string(value & 0xff) + "." + std::to_string((value >> 8) & 0xff) + "." +
         std::to_string((value >> 16) & 0xff) + "." + std::to_string((value >> 24) & 0xff);
}

// The established IPv4 TCP connections this process holds: its socket inodes
// (from /proc/self/fd) matched against /proc/self/net/tcp.
std::vector<TcpConnection> established_connections() {
  std::set<std::string> inodes;
  for (int fd : open_descriptors()) {
    std::string target = link_target("/proc/self/fd/" + std::to_string(fd));
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<TcpConnection> found;
  std::istringstream table(read_file("/proc/self/net/tcp"));
  std::string line;
  std::getline(table, line);  // header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state != "01" || !inodes.count(inode)) continue;  // 01: ESTABLISHED
    found.push_back({ipv4_from_proc(local.substr(0, 8)), ipv4_from_proc(remote.substr(0, 8))});
  }
  return found;
}

dist::StoreOptions store_options_from_env() {
  return dist::StoreOptions{.host = env_or("MASTER_ADDR"),
                            .port = env_int("MASTER_PORT"),
                            .token = env_or("EMBER_STORE_TOKEN", ""),
                            .timeout = 20s,
                            .rank = env_int("RANK")};
}

}  // namespace

// args: world_size expected_omp_threads [gloo_addr]. Checks every variable
// the launcher sets, that the token is not on the command line, that only
// stdin (/dev/null), stdout and stderr are open, and that the hosted store
// accepts the token.
EMBER_SCENARIO(launch_env) {
  int world_size = std::stoi(args.at(0));
  int rank = env_int("RANK");
  int local_rank = env_int("LOCAL_RANK");
  int local_world_size = env_int("LOCAL_WORLD_SIZE");
  int group_rank = env_int("GROUP_RANK");
  std::string token = env_or("EMBER_STORE_TOKEN", "");
  std::string job_id = env_or("EMBER_JOB_ID", "");
  std::printf("rank %d: WORLD_SIZE=%s LOCAL_RANK=%d LOCAL_WORLD_SIZE=%d GROUP_RANK=%d MASTER_ADDR=%s MASTER_PORT=%s "
              "EMBER_STORE_HOSTED=%s EMBER_TIMEOUT=%s EMBER_JOB_ID=%s EMBER_RESTART_COUNT=%s OMP_NUM_THREADS=%s "
              "OMP_WAIT_POLICY=%s EMBER_GLOO_ADDR=%s\n",
              rank, env_or("WORLD_SIZE").c_str(), local_rank, local_world_size, group_rank,
              env_or("MASTER_ADDR").c_str(), env_or("MASTER_PORT").c_str(), env_or("EMBER_STORE_HOSTED").c_str(),
              env_or("EMBER_TIMEOUT").c_str(), job_id.c_str(), env_or("EMBER_RESTART_COUNT").c_str(),
              env_or("OMP_NUM_THREADS").c_str(), env_or("OMP_WAIT_POLICY").c_str(),
              env_or("EMBER_GLOO_ADDR").c_str());
  int failures = 0;
  failures += check(env_int("WORLD_SIZE") == world_size, "WORLD_SIZE");
  failures += check(rank >= 0 && rank < world_size, "RANK in range");
  failures += check(rank == group_rank * local_world_size + local_rank, "RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK");
  failures += check(local_rank >= 0 && local_rank < local_world_size, "LOCAL_RANK in range");
  failures += check(env_or("MASTER_ADDR") == "127.0.0.1", "MASTER_ADDR");
  failures += check(env_int("MASTER_PORT") > 0, "MASTER_PORT");
  failures += check(env_or("EMBER_STORE_HOSTED") == "1", "EMBER_STORE_HOSTED");
  failures += check(env_or("EMBER_TIMEOUT") == "300", "EMBER_TIMEOUT (default 300)");
  failures += check(env_or("EMBER_RESTART_COUNT") == "0", "EMBER_RESTART_COUNT");
  failures += check(env_or("OMP_NUM_THREADS") == args.at(1), "OMP_NUM_THREADS is " + args.at(1));
  failures += check(env_or("OMP_WAIT_POLICY") == "passive", "OMP_WAIT_POLICY");
  failures += check(env_or("EMBER_GLOO_ADDR") == (args.size() > 2 ? args[2] : "<unset>"), "EMBER_GLOO_ADDR");
  failures += check(token.size() >= 32, "EMBER_STORE_TOKEN is a long secret");
  failures += check(job_id.size() == 12 && job_id.find_first_not_of("0123456789abcdef") == std::string::npos,
                    "EMBER_JOB_ID is 12 hex digits");
  failures += check(token.find(job_id) == std::string::npos, "EMBER_JOB_ID is not part of the token");
  std::string command_line = read_file("/proc/self/cmdline");
  failures += check(command_line.find(token) == std::string::npos, "the token is not on the command line");
  failures += check(open_descriptors() == std::vector<int>{0, 1, 2}, "only descriptors 0, 1, 2 are open");
  failures += check(link_target("/proc/self/fd/0") == "/dev/null", "stdin is /dev/null");

  dist::TcpStore store(store_options_from_env());
  store.set("launch_env/" + std::to_string(rank), std::to_string(getpid()));
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) keys.push_back("launch_env/" + std::to_string(r));
  store.wait(keys);
  std::printf("rank %d: env %s\n", rank, failures == 0 ? "ok" : "BAD");
  return failures == 0 ? 0 : 1;
}

// The Accelerator's variables (Note [Launcher configuration]) as this rank
// sees them, on one line: "rank R: EMBER_MIXED_PRECISION=bf16 ... EMBER_MAX_GRAD_NORM=<unset>";
// then what the Accelerator makes of them, on another: "rank R: resolved
// strategy=zero2 gradient_accumulation_steps=4 max_grad_norm=1", or its error
// (and exit code 1), so that every launch test also checks that the Accelerator
// takes what the launcher passes.
EMBER_SCENARIO(launch_accelerator_env) {
  const char* variables[] = {"EMBER_MIXED_PRECISION", "EMBER_GRADIENT_ACCUMULATION_STEPS", "EMBER_USE_CPU",
                             "EMBER_SPLIT_BATCHES", "EMBER_EVEN_BATCHES", "EMBER_SEED", "EMBER_PROJECT_DIR",
                             "EMBER_AUTOMATIC_CHECKPOINT_NAMING", "EMBER_TOTAL_LIMIT", "EMBER_STRATEGY",
                             "EMBER_WRAP_POLICY", "EMBER_WRAP_MODULE_TYPES", "EMBER_WRAP_MIN_NUM_PARAMS",
                             "EMBER_STATE_DICT_TYPE", "EMBER_FORWARD_PREFETCH", "EMBER_BACKWARD_PREFETCH",
                             "EMBER_ACTIVATION_CHECKPOINTING", "EMBER_MAX_GRAD_NORM"};
  std::string line = "rank " + env_or("RANK") + ":";
  for (const char* variable : variables) line += std::string(" ") + variable + "=" + env_or(variable);
  std::printf("%s\n", line.c_str());
  try {
    ResolvedAcceleratorOptions resolved = resolve_accelerator_options({});
    std::printf("rank %s: resolved strategy=%s gradient_accumulation_steps=%lld max_grad_norm=%s\n", env_or("RANK").c_str(),
                std::string(dist::to_string(resolved.sharding.strategy)).c_str(),
                static_cast<long long>(resolved.gradient_accumulation_steps),
                resolved.sharding.max_grad_norm ? fmt::format("{}", *resolved.sharding.max_grad_norm).c_str() : "none");
  } catch (const Error& error) {
    std::printf("rank %s: the Accelerator refuses its environment: %s\n", env_or("RANK").c_str(), error.what());
    return 1;
  }
  return 0;
}

// args: lines. Many long lines, stdout and stderr mixed, written through
// stdio's buffer (so pipe reads split lines), and a last line without a newline.
EMBER_SCENARIO(launch_print) {
  int lines = std::stoi(args.at(0));
  int rank = env_int("RANK");
  std::string padding(300, char('a' + rank));
  for (int i = 0; i < lines; ++i) std::fprintf(i % 5 == 4 ? stderr : stdout, "line %d of rank %d %s\n", i, rank, padding.c_str());
  std::printf("partial of rank %d", rank);
  return 0;
}

// args: failing_rank exit_code delay_ms. The failing rank calls exit(code);
// the others run until the launcher stops them.
EMBER_SCENARIO(launch_exit) {
  say_ready();
  if (env_int("RANK") == std::stoi(args.at(0))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(args.at(2))));
    std::printf("rank %d: exiting with %s\n", env_int("RANK"), args.at(1).c_str());
    std::fflush(stdout);
    std::exit(std::stoi(args.at(1)));
  }
  sleep_until_stopped();
  return 0;
}

// args: rank code [others_code]. As launch_exit, for any job engine (the
// rank as read_distributed_env finds it, e.g. under mpirun): that rank exits
// with `code` after half a second; the others wait to be stopped, or, given
// `others_code`, exit with it after a second (for engines that report the
// highest status of tasks that all ended by themselves, as srun does).
EMBER_SCENARIO(engine_exit) {
  say_ready();
  const int rank = dist::read_distributed_env().rank;
  if (rank == std::stoi(args.at(0))) {
    std::this_thread::sleep_for(500ms);
    std::printf("rank %d: exiting with %s\n", rank, args.at(1).c_str());
    std::fflush(stdout);
    std::exit(std::stoi(args.at(1)));
  }
  if (args.size() < 3) {
    sleep_until_stopped();
    return 0;
  }
  std::this_thread::sleep_for(1s);
  return std::stoi(args.at(2));
}

// args: failing_rank delay_ms. The failing rank kills itself with SIGKILL,
// leaving a shared-memory segment of the job behind for the launcher to remove.
EMBER_SCENARIO(launch_raise_kill) {
  say_ready();
  if (env_int("RANK") == std::stoi(args.at(0))) {
    std::string segment = "/ember-" + env_or("EMBER_JOB_ID") + "-launch-test";
    int fd = shm_open(segment.c_str(), O_CREAT | O_RDWR, 0600);
    if (check(fd >= 0, "shm_open " + segment) != 0) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(args.at(1))));
    raise(SIGKILL);
  }
  sleep_until_stopped();
  return 0;
}

// args: ["ignore-stop-signals"]. Waits to be stopped; optionally ignores
// SIGINT and SIGTERM, so that only the launcher's SIGKILL ends it.
EMBER_SCENARIO(launch_wait) {
  if (!args.empty() && args[0] == "ignore-stop-signals") {
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
  }
  say_ready();
  sleep_until_stopped();
  return 0;
}

// Attempt 0: rank 1 fails (after leaving a key in the store) and the others
// wait to be stopped. Attempt 1: every rank succeeds and checks that its
// store is a fresh one.
EMBER_SCENARIO(launch_restart) {
  int rank = env_int("RANK");
  int attempt = env_int("EMBER_RESTART_COUNT");
  dist::TcpStore store(store_options_from_env());
  if (attempt == 0) {
    store.set("launch_restart/attempt0/" + std::to_string(rank), "here");
    say_ready();
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);
      return 4;
    }
    sleep_until_stopped();
    return 0;
  }
  bool fresh = !store.check({"launch_restart/attempt0/0"}) && !store.check({"launch_restart/attempt0/1"});
  std::printf("rank %d: attempt %d ok, fresh store: %s\n", rank, attempt, fresh ? "yes" : "no");
  return fresh ? 0 : 1;
}

// args: stopped_rank backend. Every rank joins the group and does one
// allreduce; then `stopped_rank` stops itself (SIGSTOP) and the others
// allreduce again, which fails through EMBER_TIMEOUT.
EMBER_SCENARIO(launch_stop_allreduce) {
  dist::ProcessGroup& group = dist::init_process_group({.backend = args.at(1), .timeout = std::nullopt});
  Tensor value = full({1}, Scalar(double(group.rank())));
  group.allreduce(value)->wait();
  say_ready();
  if (group.rank() == std::stoi(args.at(0))) raise(SIGSTOP);
  group.allreduce(value)->wait();
  std::printf("rank %d: the second allreduce completed, which it should not have\n", group.rank());
  return 1;
}

// args: victim_rank go_file. Every rank joins a shared-memory group, does one
// allreduce, says ready and waits (polling, at most a minute) until go_file
// exists; then the victim SIGKILLs itself and the others' next allreduce
// fails naming it (exit 2).
EMBER_SCENARIO(launch_kill_on_go) {
  dist::ProcessGroup& group = dist::init_process_group({.backend = "shm", .timeout = std::nullopt});
  Tensor value = full({1}, Scalar(1.0));
  group.allreduce(value)->wait();
  say_ready();
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (access(args.at(1).c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  if (group.rank() == std::stoi(args.at(0))) raise(SIGKILL);
  group.allreduce(value)->wait();
  std::printf("rank %d: the allreduce after the kill completed, which it should not have\n", group.rank());
  return 1;
}

// args: [backend]. Makes the default group with the backend the program
// names (none: InitOptions' default, "auto", which EMBER_BACKEND replaces),
// prints the backend that runs and checks an allreduce of the ranks' values.
EMBER_SCENARIO(launch_backend) {
  dist::InitOptions options;
  if (!args.empty()) options.backend = args[0];
  dist::ProcessGroup& group = dist::init_process_group(options);
  Tensor value = full({1}, Scalar(double(group.rank())));
  group.allreduce(value)->wait();
  const double expected = group.size() * (group.size() - 1) / 2.0;
  std::printf("rank %d: backend %s, allreduce sum %g\n", group.rank(), group.backend_name().c_str(),
              value.item<double>());
  std::fflush(stdout);
  dist::destroy_process_group();
  return value.item<double>() == expected ? 0 : 1;
}

// args: ("local" | "peer") address. A Gloo allreduce of the ranks' values
// across launchers; then this rank must hold a Gloo connection whose local
// end ("local") or far end ("peer") is `address`.
EMBER_SCENARIO(launch_allreduce) {
  dist::ProcessGroup& group = dist::init_process_group({.backend = "gloo", .timeout = std::nullopt});
  Tensor value = full({1}, Scalar(double(group.rank())));
  group.allreduce(value)->wait();
  double sum = value.item<double>();
  double expected = group.size() * (group.size() - 1) / 2.0;
  int failures = check(sum == expected, "allreduce sum " + std::to_string(sum) + " == " + std::to_string(expected));
  const std::string& end = args.at(0);
  const std::string& address = args.at(1);
  std::string connections;
  bool seen = false;
  for (const TcpConnection& connection : established_connections()) {
    connections += " " + connection.local + "->" + connection.remote;
    seen |= (end == "local" ? connection.local : connection.remote) == address;
  }
  std::printf("rank %d of %d: sum %g, connections:%s\n", group.rank(), group.size(), sum, connections.c_str());
  failures += check(seen, "a connection with " + address + " at its " + end + " end");
  dist::destroy_process_group();
  return failures == 0 ? 0 : 1;
}

}  // namespace ember::test
