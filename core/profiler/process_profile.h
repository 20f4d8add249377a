// The process-wide profile: the one EMBER_PROFILE=<dir> starts with the first
// op (each rank writes <dir>/rank<r>.json and prints its table when the
// process exits or the Accelerator ends), that `ember launch --profile <dir>`
// and AcceleratorOptions::profile_dir ask for, and that EMBER_DDP_TRACE=<prefix>
// starts with only backward nodes and distributed events (<prefix>.rank<r>.json).
// Called by: core/dispatch.cpp (first op), distributed/init.cpp, the
// Accelerator, DistributedDataParallel and ShardedDataParallel.
// Tests: tests/distributed/test_profiler.cpp.
#pragma once

#include <string>

#include "core/profiler/profile.h"

namespace ember::profiler {

struct ProcessProfileOptions {
  // The trace goes to path_prefix + <rank> + ".json".
  std::string path_prefix;
  ProfileOptions record;
  bool print_table = true;  // key_averages and summary on stderr at the end
};

// Starts the EMBER_PROFILE (or EMBER_DDP_TRACE) profile if the environment
// asks for one and none records yet; cheap after the first call.
void start_environment_profile();
// Starts a process-wide profile unless one is already recording (then false).
// The directory is made absolute and checked now: an ember::Error if it
// cannot be written.
bool start_process_profile(ProcessProfileOptions options);
// Whether a process-wide profile records, and where its trace will go (empty if none).
std::string process_profile_path();
// Stops the process-wide profile, writes its trace and prints its table;
// nothing when none records. Runs at exit too.
void finish_process_profile();

}  // namespace ember::profiler
