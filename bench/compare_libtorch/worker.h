// The harness shared by the two comparison workers (worker_ember.cpp and
// worker_libtorch.cpp): each lists the same named workloads, this times them
// the same way and prints JSON for the driver (compare_libtorch.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ember::compare {

// The timed part of a workload.
using Step = std::function<void()>;

// A named workload: `prepare` builds its inputs, untimed, and returns the step
// to time. Both workers list the same names (the driver pairs them by name);
// autograd and training-step workloads are more rows, whose prepare builds the
// model and batch and whose step runs forward, backward and the optimizer.
struct Workload {
  std::string name;
  std::function<Step()> prepare;
};

// Parses --threads N (passed to set_threads), --min-time SECONDS and
// --filter TEXT, times every workload whose name contains TEXT, and prints
//   {"framework": ..., "threads": N, "results": [{"name", "ns_per_step", "steps"} or {"name", "error"}]}
// Returns the process exit code.
int worker_main(int argc, char** argv, const std::string& framework, const std::vector<Workload>& workloads,
                const std::function<void(int)>& set_threads);

}  // namespace ember::compare
