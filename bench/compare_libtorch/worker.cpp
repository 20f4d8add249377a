// The comparison workers' timing harness (worker.h). Exercised by
// scripts/bench.sh through the driver compare_libtorch.
#include "worker.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>

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

}  // namespace

int worker_main(int argc, char** argv, const std::string& framework, const std::vector<Workload>& workloads,
                const std::function<void(int)>& set_threads) {
  CLI::App app("Times the comparison workloads on " + framework + " and prints JSON");
  int threads = 0;
  double min_seconds = 0.2;
  std::string filter;
  app.add_option("--threads", threads, "threads for the framework's pool (default: its own choice)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--min-time", min_seconds, "seconds of timed steps per workload")
      ->check(CLI::Range(0.001, 600.0));
  app.add_option("--filter", filter, "only workloads whose name contains this");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) set_threads(threads);

  nlohmann::json results = nlohmann::json::array();
  for (const Workload& workload : workloads) {
    if (workload.name.find(filter) == std::string::npos) continue;
    try {
      Step step = workload.prepare();
      Timing timing = time_step(step, min_seconds);
      results.push_back({{"name", workload.name}, {"ns_per_step", timing.seconds_per_step * 1e9},
                         {"steps", timing.steps}});
    } catch (const std::exception& error) {
      std::fprintf(stderr, "%s worker: %s failed: %s\n", framework.c_str(), workload.name.c_str(), error.what());
      results.push_back({{"name", workload.name}, {"error", error.what()}});
    }
  }
  nlohmann::json report = {{"framework", framework}, {"threads", threads}, {"results", results}};
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}

}  // namespace ember::compare
