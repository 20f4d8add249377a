// See launch.h. This file decides what the workers get (environment, store,
// output targets) and the restart policy; supervisor.cpp runs each attempt.
#include "launch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "config_file.h"
#include "node_rendezvous.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/ember_variables.h"
#include "core/output_directory.h"
#include "distributed/environment.h"
#include "distributed/store/tcp_store.h"
#include "output_prefixer.h"
#include "supervisor.h"

extern char** environ;

namespace ember::launch {
namespace {

// The variables the launcher sets for each worker; inherited values of them
// (from an outer job, say) are dropped.
constexpr const char* kLauncherVariables[] = {
    "RANK",          "WORLD_SIZE",      "LOCAL_RANK",         "LOCAL_WORLD_SIZE", "GROUP_RANK",
    "MASTER_ADDR",   "MASTER_PORT",     "EMBER_STORE_TOKEN",  "EMBER_STORE_HOSTED",
    "EMBER_TIMEOUT", "EMBER_JOB_ID",    "EMBER_GLOO_ADDR",    "EMBER_RESTART_COUNT",
};

void validate(const LaunchOptions& options) {
  EMBER_CHECK(!options.command.empty(), "no program given: ember launch [options] -- program [args...]");
  EMBER_CHECK(options.nproc_per_node >= 1, "--nproc-per-node must be at least 1, got {}", options.nproc_per_node);
  EMBER_CHECK(options.nnodes >= 1, "--nnodes must be at least 1, got {}", options.nnodes);
  // Ranks are ints everywhere (RANK, WORLD_SIZE, the process groups).
  const int64_t world_size = int64_t(options.nnodes) * int64_t(options.nproc_per_node);
  EMBER_CHECK(world_size <= std::numeric_limits<int>::max(),
              "--nnodes {} times --nproc-per-node {} is {} processes, more than a world size can be ({})",
              options.nnodes, options.nproc_per_node, world_size, std::numeric_limits<int>::max());
  EMBER_CHECK(options.node_rank >= 0 && options.node_rank < options.nnodes,
              "--node-rank {} is not a node of --nnodes {} (0 to {})", options.node_rank, options.nnodes,
              options.nnodes - 1);
  EMBER_CHECK(options.master_port >= 0 && options.master_port <= 65535, "--master-port {} is not a TCP port",
              options.master_port);
  EMBER_CHECK(options.max_restarts >= 0, "--max-restarts must be at least 0, got {}", options.max_restarts);
  EMBER_CHECK(options.backend.empty() || distributed::is_backend_name(options.backend),
              "--backend '{}' is not a backend: use {}", options.backend, distributed::kBackendNames);
  EMBER_CHECK(options.timeout_seconds >= 1, "--timeout must be at least 1 second, got {}", options.timeout_seconds);
  // What the workers' parse_env_seconds accepts for EMBER_TIMEOUT, or every
  // worker would refuse it after the job started.
  EMBER_CHECK(options.timeout_seconds < distributed::kMaxTimeoutSeconds,
              "--timeout {} is more than the workers accept (EMBER_TIMEOUT below {:g} seconds)",
              options.timeout_seconds, distributed::kMaxTimeoutSeconds);
  // `inf` would become a grace of no milliseconds at all (the conversion
  // overflows), NaN likewise: a finite number of seconds, bounded as --timeout.
  EMBER_CHECK(std::isfinite(options.grace_period_seconds) && options.grace_period_seconds >= 0 &&
                  options.grace_period_seconds < distributed::kMaxTimeoutSeconds,
              "--grace-period must be a finite number of seconds from 0 to below {:g}, got {}",
              distributed::kMaxTimeoutSeconds, options.grace_period_seconds);
  if (options.nnodes > 1) {
    EMBER_CHECK(options.master_port > 0, "--nnodes {} needs --master-port: every node must know the store's port",
                options.nnodes);
    // Note [Launcher supervision]: a restart would have to be agreed by every node's launcher.
    EMBER_CHECK(options.max_restarts == 0, "--max-restarts works on a single node only (--nnodes {} given)",
                options.nnodes);
  }
}

// Note [Launcher configuration]: what a flag sets beats the config file,
// which beats the defaults (and, for the Accelerator's options, the inherited
// environment). num_processes counts every machine's processes, as in
// Accelerate; the launcher starts its share of them.
// Accelerate's and torchrun's flags that are more than another spelling of
// ember's (Note [Accelerate's and torchrun's flags] in tools/README.md):
// --num_processes counts every machine's processes, --standalone is one node
// with a store on a free loopback port.
void apply_total_and_standalone(const LaunchOptions& flags, LaunchOptions& options) {
  if (flags.flags_given.count("--num-processes")) {
    EMBER_CHECK(!flags.flags_given.count("--nproc-per-node"),
                "--num_processes {} (Accelerate's: the processes of every machine together) and --nproc-per-node {} "
                "(this machine's) are both given: use one",
                flags.num_processes, flags.nproc_per_node);
    EMBER_CHECK(flags.num_processes >= 1, "--num_processes must be at least 1, got {}", flags.num_processes);
    EMBER_CHECK(options.nnodes >= 1, "--nnodes must be at least 1, got {}", options.nnodes);
    EMBER_CHECK(flags.num_processes % options.nnodes == 0,
                "--num_processes {} (the processes of every machine together) is not divisible by the {} machines "
                "(--nnodes / --num_machines / num_machines)",
                flags.num_processes, options.nnodes);
    options.nproc_per_node = flags.num_processes / options.nnodes;
  }
  if (!flags.standalone) return;
  EMBER_CHECK(options.nnodes == 1, "--standalone is a job on one node, but --nnodes (or num_machines) is {}",
              options.nnodes);
  for (const char* flag : {"--master-addr", "--master-port"}) {
    EMBER_CHECK(!flags.flags_given.count(flag),
                "--standalone hosts the store on a free loopback port: it takes no {} (torchrun ignores it there)",
                flag);
  }
  options.master_addr = "127.0.0.1";
  options.master_port = 0;
}

LaunchOptions with_config_file(const LaunchOptions& flags) {
  LaunchOptions options = flags;
  for (auto& [name, value] : options.accelerator) value = canonical_value(*find_config_key(name), value, flag_name(name));
  std::optional<ConfigFile> config = active_config_file(flags.config_file);
  if (!config) {
    // EMBER_CONFIG_FILE may name the file `ember config` is yet to write; a
    // job that runs without it says so, since a misspelt path means the same.
    const char* named = std::getenv("EMBER_CONFIG_FILE");
    if (named && *named)
      say(fmt::format("warning: no config file: EMBER_CONFIG_FILE names '{}', which does not exist "
                      "(ember config writes it)",
                      named));
    return options;
  }
  for (const std::string& warning : config->warnings) say("warning: " + warning);
  say(config->origin.empty() ? fmt::format("config file '{}'", config->path)
                              : fmt::format("config file '{}' ({})", config->path, config->origin));
  const Settings& file = config->settings;
  // An int in [low, INT_MAX], or an error naming the key: a value cut to an
  // int (or num_machines 0, a division by zero below) would be a silent mistake.
  auto from_file = [&](const char* flag, const char* key, long long low) -> std::optional<int> {
    if (flags.flags_given.count(flag)) return std::nullopt;
    const auto value = integer_setting(file, key);
    if (!value) return std::nullopt;
    EMBER_CHECK(*value >= low && *value <= std::numeric_limits<int>::max(),
                "config file '{}': {} {} is not between {} and {}", config->path, key, *value, low,
                std::numeric_limits<int>::max());
    return int(*value);
  };
  if (auto machines = from_file("--nnodes", "num_machines", 1)) options.nnodes = *machines;
  if (auto rank = from_file("--node-rank", "machine_rank", 0)) options.node_rank = *rank;
  if (auto port = from_file("--master-port", "main_process_port", 0)) options.master_port = *port;
  if (!flags.flags_given.count("--master-addr") && file.count("main_process_ip")) {
    options.master_addr = file.at("main_process_ip");
  }
  auto total = from_file("--nproc-per-node", "num_processes", 1);
  if (flags.flags_given.count("--num-processes")) total.reset();  // the flag's total beats the file's
  if (total) {
    EMBER_CHECK(options.nnodes >= 1, "--nnodes must be at least 1, got {}", options.nnodes);
    EMBER_CHECK(*total % options.nnodes == 0,
                "config file '{}': num_processes {} (the processes of every machine together) is not divisible by "
                "{} {}",
                config->path, *total, flags.flags_given.count("--nnodes") ? "--nnodes" : "num_machines",
                options.nnodes);
    options.nproc_per_node = *total / options.nnodes;
  }
  for (const ConfigKey& key : config_keys()) {
    std::string name(key.name);
    if (!key.variable.empty() && !options.accelerator.count(name) && file.count(name)) {
      options.accelerator[name] = file.at(name);
    }
  }
  return options;
}

bool is_executable_file(const std::string& path) {
  struct stat info {};
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && access(path.c_str(), X_OK) == 0;
}

// The program's path, found as execvp would; resolved here, before any
// worker starts, so that a typo fails once and clearly.
std::string resolve_program(const std::string& name) {
  auto fail = [&](int error) {
    EMBER_CHECK(false, "cannot run '{}': {}", name, std::strerror(error));
    return std::string();
  };
  auto error_of = [](const std::string& path) {
    struct stat info {};
    if (stat(path.c_str(), &info) != 0) return errno;
    return S_ISDIR(info.st_mode) ? EISDIR : EACCES;
  };
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? name : fail(error_of(name));
  const char* path_variable = std::getenv("PATH");
  std::string search = path_variable ? path_variable : "/usr/local/bin:/usr/bin:/bin";
  int error = ENOENT;
  size_t start = 0;
  while (start <= search.size()) {
    size_t end = std::min(search.find(':', start), search.size());
    std::string directory = search.substr(start, end - start);
    std::string candidate = (directory.empty() ? "." : directory) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    if (error_of(candidate) != ENOENT) error = EACCES;
    start = end + 1;
  }
  return fail(error);
}

// EMBER_JOB_ID: the same on every node because it derives from the shared
// token, and short. 48 bits of a hash of a 256-bit token leave the token
// unguessable, so the id may appear in /dev/shm names and logs.
std::string job_id_from_token(const std::string& token) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a
  for (unsigned char c : token) hash = (hash ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", hash).substr(0, 12);
}

// The CPUs this launcher may run on (its affinity mask), empty if unknown.
std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

int usable_cores() {
  const size_t cpus = usable_cpus().size();
  return cpus > 0 ? int(cpus) : std::max(1, int(sysconf(_SC_NPROCESSORS_ONLN)));
}

// --bind-cores: local rank r runs on the r-th of `local_ranks` equal,
// contiguous shares of the launcher's CPUs, so that the scheduler cannot
// stack two ranks on one core (bench/RESULTS.md, issue 22: the 2-rank shm
// all-reduce is bimodal without it). Opt-in: on a machine other jobs share,
// a pinned rank cannot move away from them.
std::vector<std::vector<int>> cpu_shares(int local_ranks) {
  const std::vector<int> cpus = usable_cpus();
  EMBER_CHECK(int(cpus.size()) >= local_ranks,
              "--bind-cores: {} workers on this node, but the launcher may run on only {} CPU(s) ({}); start fewer "
              "workers or leave out --bind-cores",
              local_ranks, cpus.size(), fmt::join(cpus, ","));
  std::vector<std::vector<int>> shares(static_cast<size_t>(local_ranks));
  const size_t n = cpus.size();
  for (size_t r = 0; r < shares.size(); ++r)
    shares[r].assign(cpus.begin() + long(r * n / shares.size()), cpus.begin() + long((r + 1) * n / shares.size()));
  return shares;
}

// The launcher's environment without the variables it sets: its own, and
// those of the Accelerator's options that a flag or the config file sets.
// An Accelerator variable that stays is checked like a flag, so that no
// worker starts with a value the Accelerator would refuse, and a misspelt
// EMBER_* name is reported (Note [Misspelt variables]).
std::vector<std::string> inherited_environment(const Settings& accelerator) {
  std::vector<std::string> environment;
  for (char** entry = environ; *entry; ++entry) {
    std::string_view text(*entry);
    size_t equals = text.find('=');
    std::string_view name = text.substr(0, equals);
    if (std::optional<std::string> unknown = unknown_ember_variable_warning(name)) say("warning: " + *unknown);
    bool ours = std::any_of(std::begin(kLauncherVariables), std::end(kLauncherVariables),
                            [&](const char* variable) { return name == variable; });
    // The one launcher variable a user sets by hand: replaced without a word,
    // an exported EMBER_TIMEOUT=5 left the workers at the default 300 s.
    if (name == "EMBER_TIMEOUT")
      say(fmt::format("warning: {} in the environment is replaced by --timeout (default 300 s); give --timeout instead",
                      text));
    for (const ConfigKey& key : config_keys()) {
      if (key.variable.empty() || key.variable != name) continue;
      if (accelerator.count(std::string(key.name))) {
        ours = true;
      } else if (equals != std::string_view::npos && key.kind == ValueKind::boolean) {
        // The Accelerator's own reading of a flag variable (1/0 too), not the config file's.
        distributed::parse_env_flag(std::string(name).c_str(), std::string(text.substr(equals + 1)).c_str());
      } else if (equals != std::string_view::npos) {
        canonical_value(key, text.substr(equals + 1), fmt::format("{} in the environment", name));
      }
    }
    if (!ours) environment.emplace_back(text);
  }
  return environment;
}

// "EMBER_MIXED_PRECISION=bf16", ... in the order of the contract.
std::vector<std::string> accelerator_variables(const Settings& accelerator) {
  std::vector<std::string> variables;
  for (const ConfigKey& key : config_keys()) {
    auto found = accelerator.find(std::string(key.name));
    if (found != accelerator.end()) variables.push_back(fmt::format("{}={}", key.variable, found->second));
  }
  return variables;
}

// Lines like "OMP_NUM_THREADS=1 (2 cores / 2 local ranks)" for the summary.
struct OmpSettings {
  std::vector<std::string> added;  // "KEY=value" the launcher adds
  std::string summary;
};

OmpSettings omp_settings(int local_ranks) {
  OmpSettings settings;
  std::vector<std::string> parts;
  if (const char* threads = std::getenv("OMP_NUM_THREADS")) {
    parts.push_back(fmt::format("OMP_NUM_THREADS={} (from the environment)", threads));
  } else {
    int cores = usable_cores();
    int threads_per_rank = std::max(1, cores / local_ranks);
    settings.added.push_back(fmt::format("OMP_NUM_THREADS={}", threads_per_rank));
    parts.push_back(fmt::format("OMP_NUM_THREADS={} ({} cores / {} local rank{})", threads_per_rank, cores,
                                local_ranks, local_ranks == 1 ? "" : "s"));
  }
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
    parts.push_back(fmt::format("OMP_WAIT_POLICY={} (from the environment)", policy));
  } else {
    // Spinning OpenMP threads of several ranks would fight over the same cores.
    settings.added.push_back("OMP_WAIT_POLICY=passive");
    parts.push_back("OMP_WAIT_POLICY=passive");
  }
  settings.summary = fmt::format("{}", fmt::join(parts, ", "));
  return settings;
}

// One file per local rank, kept open across restarts so that attempts follow each other.
class LogFiles {
 public:
  LogFiles(const std::string& directory, int first_rank, int count) {
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    EMBER_CHECK(!error, "cannot create the log directory '{}': {}", directory, error.message());
    for (int rank = first_rank; rank < first_rank + count; ++rank) {
      std::string path = fmt::format("{}/rank_{}.log", directory, rank);
      // Never through a link planted at rank_<r>.log, never a FIFO (core/file_io.h).
      try {
        fds_.push_back(open_log_file("ember launch", path, /*append=*/false).release());
      } catch (const Error& open_error) {
        close_all();
        EMBER_CHECK(false, "cannot write the log file '{}' in --log-dir '{}': {}", path, directory, open_error.what());
      }
    }
  }
  ~LogFiles() { close_all(); }
  LogFiles(const LogFiles&) = delete;
  LogFiles& operator=(const LogFiles&) = delete;
  int fd(int local_rank) const { return fds_.at(size_t(local_rank)); }
  void write_all(const std::string& line) {
    for (int fd : fds_) output_sink(fd).push(line);
  }

 private:
  void close_all() {
    for (int fd : fds_) {
      forget_output_sink(fd);
      close(fd);
    }
    fds_.clear();
  }
  std::vector<int> fds_;
};

// Shared-memory segments are named /ember-<job id>-...; workers unlink their
// own, but one that was killed cannot. Once every local worker is gone the
// launcher removes what is left, so that no attempt or job leaks them.
void remove_leftover_segments(const std::string& job_id) {
  std::error_code error;
  std::string prefix = "ember-" + job_id + "-";
  int removed = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    std::string name = entry.path().filename();
    if (name.rfind(prefix, 0) == 0 && std::filesystem::remove(entry.path(), error)) ++removed;
  }
  if (removed > 0) say(fmt::format("removed {} shared-memory segment(s) the workers left in /dev/shm", removed));
}

// Hosts the store for one attempt (node 0 only).
std::unique_ptr<distributed::TcpStoreServer> host_store(const LaunchOptions& options, const std::string& token) {
  try {
    return std::make_unique<distributed::TcpStoreServer>(
        distributed::StoreServerOptions{.host = options.master_addr, .port = options.master_port, .token = token});
  } catch (const std::exception& error) {
    EMBER_CHECK(false, "cannot host the store on {}:{}: {}", options.master_addr, options.master_port, error.what());
    return nullptr;
  }
}

}  // namespace

int run_launch(const LaunchOptions& given) {
  // A launcher started with 0, 1 or 2 closed would hand those numbers to its
  // pipes, and then write its messages into them.
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1) EMBER_CHECK(open("/dev/null", O_RDWR) == fd, "cannot open /dev/null");
  }
  LaunchOptions options = with_config_file(given);
  apply_total_and_standalone(given, options);
  validate(options);
  std::string program = resolve_program(options.command.front());
  // Checks the inherited Accelerator variables: before anything is created.
  std::vector<std::string> base = inherited_environment(options.accelerator);

  std::string token;
  if (options.nnodes > 1) {
    const char* shared = std::getenv("EMBER_STORE_TOKEN");
    EMBER_CHECK(shared && *shared,
                "--nnodes {} needs the job's token in EMBER_STORE_TOKEN, the same for every node's launcher "
                "(e.g. export EMBER_STORE_TOKEN=$(openssl rand -hex 32))",
                options.nnodes);
    token = shared;
  } else {
    // A fresh one even if EMBER_STORE_TOKEN is inherited: a job started from
    // inside another job's worker must not share its store or segment names.
    token = distributed::make_job_token();
  }
  std::string job_id = job_id_from_token(token);
  const int local_ranks = options.nproc_per_node;
  const int world_size = options.nnodes * local_ranks;
  const int first_rank = options.node_rank * local_ranks;

  std::optional<LogFiles> logs;
  if (!options.log_dir.empty()) logs.emplace(options.log_dir, first_rank, local_ranks);

  std::vector<std::vector<int>> shares;
  if (options.bind_cores) {
    shares = cpu_shares(local_ranks);
    std::vector<std::string> described;
    for (size_t r = 0; r < shares.size(); ++r)
      described.push_back(fmt::format("local rank {} on CPU {}", r, fmt::join(shares[r], ",")));
    say(fmt::format("--bind-cores: {}", fmt::join(described, ", ")));
  }
  OmpSettings omp = omp_settings(local_ranks);
  base.insert(base.end(), omp.added.begin(), omp.added.end());
  std::vector<std::string> accelerator = accelerator_variables(options.accelerator);
  base.insert(base.end(), accelerator.begin(), accelerator.end());
  if (!accelerator.empty()) say(fmt::format("{}", fmt::join(accelerator, ", ")));
  if (!options.backend.empty()) {
    std::erase_if(base, [](const std::string& entry) { return entry.starts_with("EMBER_BACKEND="); });
    base.push_back("EMBER_BACKEND=" + options.backend);
    say("EMBER_BACKEND=" + options.backend);
  }
  if (!options.profile_dir.empty()) {
    // Absolute, so a worker that changes directory writes where the user asked.
    const std::filesystem::path directory = std::filesystem::absolute(options.profile_dir);
    prepare_output_directory("--profile", directory);
    const std::string profile = "EMBER_PROFILE=" + directory.string();
    std::erase_if(base, [](const std::string& entry) { return entry.starts_with("EMBER_PROFILE="); });
    base.push_back(profile);
    say(profile);
  }

  // Before the store server's thread exists, so that it inherits the mask.
  int signal_fd = block_launcher_signals();
  auto grace = std::chrono::milliseconds(int64_t(1000 * options.grace_period_seconds));
  // The wait after a failure is bounded by --timeout too.
  grace = std::min(grace, std::chrono::milliseconds(int64_t(1000) * options.timeout_seconds));

  for (int attempt = 0;; ++attempt) {
    // Note [Launcher supervision]: a fresh store for every attempt, so that no
    // key of a failed attempt is seen by the next one.
    std::unique_ptr<distributed::TcpStoreServer> server;
    if (options.node_rank == 0) server = host_store(options, token);
    int port = server ? server->port() : options.master_port;
    std::string store = fmt::format("{}:{}", options.master_addr, port);
    if (options.nnodes > 1) store += options.node_rank == 0 ? " (hosted here)" : " (hosted by node 0)";
    if (attempt == 0) {
      std::string who = fmt::format("{} worker{}", local_ranks, local_ranks == 1 ? "" : "s");
      if (options.nnodes > 1) {
        who += fmt::format(" (ranks {}-{} of {}, node {} of {})", first_rank, first_rank + local_ranks - 1,
                           world_size, options.node_rank, options.nnodes);
      }
      say(fmt::format("{}, {}, store {}", who, omp.summary, store));
      if (options.nnodes > 1) meet_other_nodes(options, token);
    } else {
      std::string notice = fmt::format("restarting ({} of {}), store {}", attempt, options.max_restarts, store);
      say(notice);
      if (logs) logs->write_all("ember launch: " + notice + "\n");
    }

    AttemptOptions attempt_options{
        .program = program, .argv = options.command, .workers = {}, .grace = grace, .signal_fd = signal_fd};
    for (int local_rank = 0; local_rank < local_ranks; ++local_rank) {
      int rank = first_rank + local_rank;
      std::vector<std::string> environment = base;
      environment.insert(environment.end(), {
          fmt::format("RANK={}", rank),
          fmt::format("WORLD_SIZE={}", world_size),
          fmt::format("LOCAL_RANK={}", local_rank),
          fmt::format("LOCAL_WORLD_SIZE={}", local_ranks),
          fmt::format("GROUP_RANK={}", options.node_rank),
          fmt::format("MASTER_ADDR={}", options.master_addr),
          fmt::format("MASTER_PORT={}", port),
          fmt::format("EMBER_STORE_TOKEN={}", token),
          "EMBER_STORE_HOSTED=1",
          fmt::format("EMBER_TIMEOUT={}", options.timeout_seconds),
          fmt::format("EMBER_JOB_ID={}", job_id),
          fmt::format("EMBER_RESTART_COUNT={}", attempt),
      });
      if (!options.local_addr.empty()) environment.push_back("EMBER_GLOO_ADDR=" + options.local_addr);
      // With --log-dir both streams go, unprefixed, into the rank's file.
      attempt_options.workers.push_back(WorkerSpec{
          .rank = rank,
          .environment = std::move(environment),
          .stdout_target = logs ? logs->fd(local_rank) : 1,
          .stderr_target = logs ? logs->fd(local_rank) : 2,
          .prefix = logs ? "" : fmt::format("[rank {}] ", rank),
          .cpus = shares.empty() ? std::vector<int>{} : shares[size_t(local_rank)],
      });
    }

    AttemptResult result = run_attempt(attempt_options);
    server.reset();
    remove_leftover_segments(job_id);
    if (result.kind != AttemptResult::Kind::worker_failed || attempt >= options.max_restarts) {
      close(signal_fd);
      return result.exit_code;
    }
    if (int signal_number = take_stop_signal(signal_fd)) {
      say(fmt::format("received {}; not restarting", signal_name(signal_number)));
      close(signal_fd);
      return 128 + signal_number;
    }
  }
}

}  // namespace ember::launch
