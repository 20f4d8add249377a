// `ember launch`: starts a job's workers on this node with the environment of
// a distributed job (RANK, WORLD_SIZE, MASTER_ADDR, EMBER_STORE_TOKEN, ...),
// hosts the job's store on node 0, prefixes or logs their output, and stops
// every worker when one fails (Note [Launcher supervision]). It also passes
// the Accelerator's options on as EMBER_* variables, from its flags, else the
// config file, else the inherited environment (Note [Launcher configuration]
// in tools/README.md). tools/main.cpp parses the command line into LaunchOptions.
// Tests: tests/distributed/test_launch.cpp, tests/tools/test_launch_config.cpp.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "config_keys.h"

namespace ember::launch {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: a free port (single node only)
  int max_restarts = 0;
  int timeout_seconds = 300;          // EMBER_TIMEOUT; also bounds the wait after a failure
  double grace_period_seconds = 5;    // from SIGTERM to SIGKILL when stopping workers
  std::string log_dir;                // "": prefixed lines on the terminal; else D/rank_N.log
  std::string local_addr;             // EMBER_GLOO_ADDR, when given
  std::vector<std::string> command;   // the program and its arguments
  int num_processes = 0;              // --num_processes: every machine's together (Accelerate's); 0: not given
  bool standalone = false;            // --standalone (torchrun's): one node, a store on a free loopback port
  std::string config_file;            // --config-file; "": the default one, when it exists
  std::string profile_dir;            // --profile: EMBER_PROFILE for the workers (core/profiler)
  bool bind_cores = false;            // --bind-cores: each local rank on its own share of the CPUs
  std::string backend;                // --backend: EMBER_BACKEND for the workers; "": not given
  Settings accelerator;               // by config key: the Accelerator's options from the flags
  std::set<std::string> flags_given;  // "--nproc-per-node", ...: they beat the config file
};

// Runs the job; returns the launcher's exit code (0, or the first failed
// worker's, or 128+signal). Errors in the options throw ember::Error.
int run_launch(const LaunchOptions& options);

}  // namespace ember::launch
