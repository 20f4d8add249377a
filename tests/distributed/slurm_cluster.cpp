// See slurm_cluster.h. Every daemon runs in the foreground (-D, -F) under a
// Process of its own, its log in the cluster's directory, and carries
// SLURM_CONF=<this cluster's slurm.conf> in its environment, as do the job
// steps slurmd starts: that is how the checks tell this cluster's processes
// from any other Slurm's on the host.
#include "distributed/slurm_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "distributed/environment.h"

namespace ember::test {
namespace {

using namespace std::chrono_literals;

const char* const kPrograms[] = {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/srun",
                                 "/usr/bin/sinfo"};

std::string read_text(const std::filesystem::path& path) {
  std::ifstream file(path);
  return std::string((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
}

// A first job id whose jobs' derived store ports (Note [Job engines]: one
// per job id modulo 1000) are free for the next 15 jobs: the tests that
// leave MASTER_PORT unset use them.
uint64_t first_job_id() {
  std::random_device random;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const uint64_t first = 1000 + random() % 900000;
    bool all_free = true;
    for (uint64_t job = first; job < first + 15 && all_free; ++job)
      all_free = loopback_port_free(distributed::slurm_port(job, 0));
    if (all_free) return first;
  }
  throw std::runtime_error("no 15 consecutive job ids with free derived ports");
}

// Whether a child started by a Process still runs (not yet a zombie): it
// stays unreaped, for its Process to wait for.
bool running(pid_t pid) {
  const std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
  return !stat.empty() && stat.find(") Z ") == std::string::npos;
}

// This host's node line from `slurmd -C` (its CPUs, sockets, cores, memory), as node `localhost`.
std::string node_line() {
  const ProcessResult probe = run_process({"/usr/sbin/slurmd", "-C"}, 30s);
  std::istringstream lines(probe.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("NodeName=", 0) != 0) continue;
    return "NodeName=localhost NodeAddr=127.0.0.1" + line.substr(line.find(' '));
  }
  throw std::runtime_error("slurmd -C printed no NodeName line:\n" + probe.output);
}

class SlurmEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    if (started) SlurmCluster::shared().stop();
  }
  static inline bool started = false;
};

[[maybe_unused]] ::testing::Environment* const registered = ::testing::AddGlobalTestEnvironment(new SlurmEnvironment);

}  // namespace

SlurmCluster& SlurmCluster::shared() {
  static SlurmCluster cluster;
  if (!SlurmEnvironment::started) {
    SlurmEnvironment::started = true;
    try {
      cluster.start();
    } catch (const std::exception& error) {
      cluster.unavailable_ = fmt::format("the Slurm cluster could not be set up: {}", error.what());
      cluster.stop();
    }
  }
  return cluster;
}

std::string SlurmCluster::conf_assignment() const { return "SLURM_CONF=" + (directory_ / "slurm.conf").string(); }

void SlurmCluster::start() {
  for (const char* program : kPrograms)
    if (!std::filesystem::exists(program)) {
      unavailable_ = fmt::format("{} not found (scripts/test.sh installs slurmd slurmctld slurm-client munge)", program);
      return;
    }
  if (geteuid() != 0) {
    unavailable_ = "needs root: slurmd starts each task as the user who ran srun, and the test's SlurmUser is root";
    return;
  }
  std::string pattern = (std::filesystem::temp_directory_path() / "ember_slurm_XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern + " failed");
  directory_ = pattern;
  // munged refuses a socket in a directory that others cannot traverse.
  std::filesystem::permissions(directory_, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                               std::filesystem::perms::group_exec |
                                               std::filesystem::perms::others_read |
                                               std::filesystem::perms::others_exec);
  for (const char* name : {"state", "spool"}) std::filesystem::create_directory(directory_ / name);
  {
    std::random_device random;
    std::ofstream key(directory_ / "munge.key", std::ios::binary);
    for (int word = 0; word < 32; ++word) {
      const uint32_t value = random();
      key.write(reinterpret_cast<const char*>(&value), sizeof value);
    }
  }
  std::filesystem::permissions(directory_ / "munge.key", std::filesystem::perms::owner_read);

  const std::string path = directory_.string();
  std::ofstream(directory_ / "slurm.conf") << fmt::format(
      "ClusterName=ember-test\n"
      "SlurmctldHost=localhost\n"
      "SlurmctldPort={}\n"
      "SlurmdPort={}\n"
      "SlurmUser=root\n"
      "SlurmdUser=root\n"
      "AuthType=auth/munge\n"
      "CredType=cred/munge\n"
      "AuthInfo=socket={}/munge.socket\n"
      "StateSaveLocation={}/state\n"
      "SlurmdSpoolDir={}/spool\n"
      "SlurmctldPidFile={}/slurmctld.pid\n"
      "SlurmdPidFile={}/slurmd.pid\n"
      // No cgroups in a container: processes tracked by parentage, tasks not bound.
      "ProctrackType=proctrack/linuxproc\n"
      "TaskPlugin=task/none\n"
      "SelectType=select/cons_tres\n"
      "SelectTypeParameters=CR_Core\n"
      "MpiDefault=none\n"
      "SchedulerType=sched/builtin\n"
      "JobAcctGatherType=jobacct_gather/none\n"
      "AccountingStorageType=accounting_storage/none\n"
      "JobCompType=jobcomp/none\n"
      "PropagateResourceLimits=NONE\n"
      "MailProg=/bin/true\n"
      "ReturnToService=2\n"
      // A step being ended gets SIGTERM, then SIGKILL after KillWait seconds.
      "KillWait=2\n"
      "FirstJobId={}\n"
      "{}\n"
      // Jobs share the cores: a job still completing does not hold the next one back.
      "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4\n",
      free_port(), free_port(), path, path, path, path, path, first_job_id(), node_line());

  start_daemon("munged", fmt::format("/usr/sbin/munged -F --socket='{0}/munge.socket' --key-file='{0}/munge.key' "
                                     "--pid-file='{0}/munged.pid' --seed-file='{0}/munged.seed'",
                                     path));
  if (!wait_until("munged to create its socket", 10s,
                  [&] { return std::filesystem::exists(directory_ / "munge.socket"); }))
    return;
  start_daemon("slurmctld", fmt::format("/usr/sbin/slurmctld -D -i -f '{}/slurm.conf'", path));
  start_daemon("slurmd", fmt::format("/usr/sbin/slurmd -D -N localhost -f '{}/slurm.conf'", path));
  wait_until("sinfo to show node localhost idle", 30s, [&] {
    const ProcessResult sinfo = run_process({"/usr/bin/sinfo", "-h", "-o", "%t"}, 10s, {conf_assignment()});
    return sinfo.exit_code == 0 && sinfo.output.rfind("idle", 0) == 0;
  });
}

void SlurmCluster::start_daemon(const std::string& name, const std::string& command) {
  const std::string log = (directory_ / (name + ".log")).string();
  std::vector<std::string> argv = {"/bin/sh", "-c", fmt::format("exec {} > '{}' 2>&1", command, log)};
  daemons_.emplace_back(name, std::make_unique<Process>(argv, std::vector<std::string>{conf_assignment()}));
}

bool SlurmCluster::wait_until(const std::string& what, std::chrono::milliseconds timeout,
                              const std::function<bool()>& ready) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string exited;
  while (std::chrono::steady_clock::now() < deadline && exited.empty()) {
    if (ready()) return true;
    for (const auto& daemon : daemons_)
      if (!running(daemon.second->pid())) exited = daemon.first;
    std::this_thread::sleep_for(200ms);
  }
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout).count();
  unavailable_ = fmt::format("the Slurm cluster in {} did not come up: {}", directory_.string(),
                             exited.empty() ? fmt::format("no {} within {} s", what, seconds)
                                            : fmt::format("{} exited while the test waited for {}", exited, what));
  for (const auto& daemon : daemons_) unavailable_ += log_tail(daemon.first);
  stop();
  return false;
}

std::string SlurmCluster::log_tail(const std::string& name) const {
  std::istringstream lines(read_text(directory_ / (name + ".log")));
  std::vector<std::string> kept;
  for (std::string line; std::getline(lines, line);) {
    kept.push_back(line);
    if (kept.size() > 15) kept.erase(kept.begin());
  }
  std::string tail = fmt::format("\n--- {}.log, last lines:", name);
  for (const std::string& line : kept) tail += "\n" + line;
  return tail;
}

std::vector<pid_t> SlurmCluster::processes(const std::string& comm) const {
  const std::string marker = conf_assignment();
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string environment = '\0' + read_text(entry.path() / "environ");
    const bool ours = environment.find('\0' + marker + '\0') != std::string::npos;
    if (!ours || read_text(entry.path() / "stat").find(") Z ") != std::string::npos) continue;
    if (!comm.empty() && read_text(entry.path() / "comm") != comm + "\n") continue;
    found.push_back(pid_t(std::stoi(name)));
  }
  return found;
}

std::vector<pid_t> SlurmCluster::leftover_steps(std::chrono::milliseconds grace) const {
  const auto deadline = std::chrono::steady_clock::now() + grace;
  std::vector<pid_t> steps = processes("slurmstepd");
  while (!steps.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    steps = processes("slurmstepd");
  }
  return steps;
}

void SlurmCluster::stop() {
  if (directory_.empty()) return;
  // slurmd first, munged last: each daemon still has what it needs to shut down.
  for (auto daemon = daemons_.rbegin(); daemon != daemons_.rend(); ++daemon) {
    daemon->second->signal(SIGTERM);
    const ProcessResult result = daemon->second->wait(20s);
    EXPECT_FALSE(result.timed_out) << daemon->first << " ignored SIGTERM for 20 s" << log_tail(daemon->first);
  }
  daemons_.clear();
  EXPECT_EQ(processes(""), std::vector<pid_t>{}) << "processes of the Slurm cluster in " << directory_.string()
                                                 << " left after its daemons stopped";
  std::filesystem::remove_all(directory_);
  directory_.clear();
}

SlurmCluster::~SlurmCluster() {
  daemons_.clear();  // each Process kills its daemon's process group if still running
  if (!directory_.empty()) std::filesystem::remove_all(directory_);
}

}  // namespace ember::test
