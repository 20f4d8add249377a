// The comparison workers' timing harness (worker.h). Exercised by
// scripts/bench.sh through the driver compare_libtorch.
#include "worker.h"

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

namespace ember::compare {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatches = 5;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Seconds per step over `count` steps.
double time_batch(const Step& step, int64_t count) {
  Clock::time_point start = Clock::now();
  for (int64_t i = 0; i < count; ++i) step();
  return seconds_since(start) / double(count);
}

struct Timing {
  double seconds_per_step;
  int64_t steps;
};

// Warm-up first (allocator caches, primitive caches, first-touch page faults),
// then batch sizes grow until one batch fills its share of `min_seconds`, as
// Google Benchmark does; then kBatches batches of that size. The median batch
// mean is robust to a batch that another process interrupted.
Timing time_step(const Step& step, double min_seconds) {
  Clock::time_point start = Clock::now();
  int64_t warm_steps = 0;
  do {
    step();
    ++warm_steps;
  } while (warm_steps < 2 || seconds_since(start) < 0.1 * min_seconds);
  const double batch_seconds = min_seconds / kBatches;
  int64_t per_batch = 1;
  for (;;) {
    double seconds = time_batch(step, per_batch) * double(per_batch);
    if (seconds >= 0.5 * batch_seconds) break;
    double growth = std::min(10.0, 1.2 * batch_seconds / std::max(seconds, 1e-9));
    per_batch = std::max(per_batch + 1, int64_t(double(per_batch) * growth));
  }
  std::vector<double> means;
  for (int batch = 0; batch < kBatches; ++batch) means.push_back(time_batch(step, per_batch));
  std::nth_element(means.begin(), means.begin() + kBatches / 2, means.end());
  return {means[kBatches / 2], per_batch * kBatches};
}

// The resident set now (VmRSS), in bytes; 0 where /proc is unreadable.
int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return 0;
}

// The process's peak resident set so far (ru_maxrss is in KiB on Linux).
int64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return int64_t(usage.ru_maxrss) * 1024;
}

struct Selection {
  std::string filter;
  std::string name;
  bool selects(const std::string& workload) const {
    return workload.find(filter) != std::string::npos && (name.empty() || workload == name);
  }
};

// One workload's result: `run` prepares and times it and returns its fields;
// this adds the memory figures, or the error that stopped it.
template <class Run>
nlohmann::json measure(const std::string& framework, const std::string& name, Run&& run) {
  try {
    int64_t start_rss = resident_bytes();
    nlohmann::json result = {{"name", name}};
    result.update(run());
    result["start_rss_bytes"] = start_rss;
    result["peak_rss_bytes"] = peak_resident_bytes();
    return result;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s worker: %s failed: %s\n", framework.c_str(), name.c_str(), error.what());
    return {{"name", name}, {"error", error.what()}};
  }
}

nlohmann::json timing_fields(const Timing& timing) {
  return {{"ns_per_step", timing.seconds_per_step * 1e9}, {"steps", timing.steps}};
}

}  // namespace

int worker_main(int argc, char** argv, const std::string& framework, const std::vector<Workload>& workloads,
                const std::vector<TrainingWorkload>& training_workloads, const std::function<void(int)>& set_threads) {
  CLI::App app("Times the comparison workloads on " + framework + " and prints JSON");
  int threads = 0;
  double min_seconds = 0.2;
  int loss_steps = 5;
  bool list = false;
  Selection selection;
  app.add_option("--threads", threads, "threads for the framework's pool (default: its own choice)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--min-time", min_seconds, "seconds of timed steps per workload")
      ->check(CLI::Range(0.001, 600.0));
  app.add_option("--filter", selection.filter, "only workloads whose name contains this");
  app.add_option("--name", selection.name, "only the workload of exactly this name");
  app.add_option("--loss-steps", loss_steps, "training rows: report the losses of this many first steps")
      ->check(CLI::Range(1, 100000));
  app.add_flag("--list", list, "print the workload names as JSON and stop");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    nlohmann::json names = nlohmann::json::array();
    for (const Workload& workload : workloads) names.push_back(workload.name);
    for (const TrainingWorkload& workload : training_workloads) names.push_back(workload.name);
    std::printf("%s\n", nlohmann::json({{"framework", framework}, {"workloads", names}}).dump(2).c_str());
    return 0;
  }
  if (threads > 0) set_threads(threads);

  nlohmann::json results = nlohmann::json::array();
  for (const Workload& workload : workloads) {
    if (!selection.selects(workload.name)) continue;
    results.push_back(measure(framework, workload.name, [&] {
      Step step = workload.prepare();
      return timing_fields(time_step(step, min_seconds));
    }));
  }
  for (const TrainingWorkload& workload : training_workloads) {
    if (!selection.selects(workload.name)) continue;
    results.push_back(measure(framework, workload.name, [&] {
      TrainingStep train = workload.prepare();
      std::vector<double> losses;
      for (int i = 0; i < loss_steps; ++i) losses.push_back(train());
      nlohmann::json fields = timing_fields(time_step([&train] { train(); }, min_seconds));
      fields["losses"] = losses;
      return fields;
    }));
  }
  nlohmann::json report = {{"framework", framework}, {"threads", threads}, {"results", results}};
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}

}  // namespace ember::compare
