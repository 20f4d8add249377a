// A real Slurm cluster of one node on this host, for the tests that run
// jobs through `srun` (JobEngines.Srun* in test_cluster_environment.cpp):
// munged, slurmctld and slurmd from Debian's packages, configured in a
// temporary directory of their own (tests/distributed/README.md says what
// the host needs). One cluster serves every test of a run: started at first
// use, stopped after the last test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/process_runner.h"

namespace ember::test {

class SlurmCluster {
 public:
  // The run's cluster, started on the first call. When it cannot start, it
  // says why in unavailable() and every later call returns it unstarted.
  static SlurmCluster& shared();

  // Empty when the cluster runs; else why it does not (for GTEST_SKIP).
  const std::string& unavailable() const { return unavailable_; }
  // SLURM_CONF=<its slurm.conf>, for srun's environment.
  std::string conf_assignment() const;
  // Job steps (slurmstepd) of this cluster still running after `grace`.
  std::vector<pid_t> leftover_steps(std::chrono::milliseconds grace) const;
  // Stops the daemons (SIGTERM, then SIGKILL after a timeout), checks that no
  // process of the cluster is left, and removes its directory.
  void stop();

  ~SlurmCluster();

 private:
  SlurmCluster() = default;
  void start();
  void start_daemon(const std::string& name, const std::string& command);
  bool wait_until(const std::string& what, std::chrono::milliseconds timeout, const std::function<bool()>& ready);
  std::string log_tail(const std::string& name) const;
  std::vector<pid_t> processes(const std::string& comm) const;

  std::filesystem::path directory_;
  std::string unavailable_;
  std::vector<std::pair<std::string, std::unique_ptr<Process>>> daemons_;  // in start order
};

}  // namespace ember::test
