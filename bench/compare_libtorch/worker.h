// The harness shared by the two comparison workers (worker_ember.cpp and
// worker_libtorch.cpp): each lists the same named workloads, this times them
// the same way, records each process's peak resident memory and prints JSON
// for the driver (compare_libtorch.cpp).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ember::compare {

// The timed part of a workload.
using Step = std::function<void()>;
// The timed part of a training workload: one whole step (zero_grad, forward,
// loss, backward, optimizer step), returning the loss it computed.
using TrainingStep = std::function<double()>;

// A named workload: `prepare` builds its inputs, untimed, and returns the step
// to time. Both workers list the same names (the driver pairs them by name);
// autograd workloads are more rows.
struct Workload {
  std::string name;
  std::function<Step()> prepare;
};

// A training workload: `prepare` builds the model, optimizer and batch
// (training_spec.h), untimed, and returns the step.
struct TrainingWorkload {
  std::string name;
  std::function<TrainingStep()> prepare;
};

// Parses --threads N (passed to set_threads), --min-time SECONDS,
// --filter TEXT (names containing it), --name NAME (that name only),
// --loss-steps N and --list, times every selected workload and prints
//   {"framework": ..., "threads": N, "results": [{"name", "ns_per_step", "steps",
//    "start_rss_bytes", "peak_rss_bytes", "losses" (training rows)} or {"name", "error"}]}
// start_rss_bytes is VmRSS before `prepare`; peak_rss_bytes is the process's
// high-water mark (getrusage ru_maxrss) after timing, so it is the workload's
// own peak only when the process runs that workload alone, as the driver does.
// "losses" are the losses of the first N steps from the initial parameters,
// which double as warm-up. --list prints {"framework", "workloads": [names]}.
// Returns the process exit code.
int worker_main(int argc, char** argv, const std::string& framework, const std::vector<Workload>& workloads,
                const std::vector<TrainingWorkload>& training_workloads, const std::function<void(int)>& set_threads);

}  // namespace ember::compare
