// The launchers of a multi-node job meet at the store before any worker
// starts: each claims its node rank and publishes its settings (--nnodes,
// --nproc-per-node), node 0 checks every other node's and publishes a
// verdict, the others check node 0's, read the verdict and acknowledge it,
// and only once every node has acknowledged does node 0 say "start": no node
// starts workers while another has gone away. Launchers
// that disagree on the world size, two launchers of one node rank (a job
// started twice), a store that cannot be reached or does not know the token
// (another job's) all stop here with an error naming them, instead of
// starting workers that time out or, worse, take each other's ranks (Note
// [Launcher supervision] in distributed/README.md). Called by launch.cpp;
// tests: tests/distributed/test_faults.cpp.
#pragma once

#include <string>

#include "launch.h"

namespace ember::launch {

// Returns once every node of `options.nnodes` has joined with the same
// settings; an error naming the node and the settings otherwise, or after
// --timeout seconds. A stop signal (SIGINT, SIGTERM, SIGHUP) meanwhile ends
// the launcher as it would any program: no worker exists yet.
void meet_other_nodes(const LaunchOptions& options, const std::string& token);

}  // namespace ember::launch
