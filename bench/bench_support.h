// Helpers shared by the Google Benchmark suites in bench/: deterministic
// inputs, and a console reporter that records each run's counters so a suite
// can print its ember-versus-peer ratio table after RunSpecifiedBenchmarks.
#pragma once

#include <benchmark/benchmark.h>

#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::bench {

// Deterministic values in [-1, 1) (a fixed-seed LCG: runs are comparable).
void fill_uniform(float* data, int64_t count, uint32_t seed);
// A contiguous tensor of `shape` filled by fill_uniform, converted to `dtype`.
Tensor uniform_tensor(const Shape& shape, DType dtype, uint32_t seed);

// Runs `op` once before timing (first touch, caches); if it throws, the
// benchmark is skipped with the message instead of ending the whole run.
template <class F>
bool warm_up(benchmark::State& state, F&& op) {
  try {
    op();
    return true;
  } catch (const std::exception& error) {
    state.SkipWithError(error.what());
    return false;
  }
}

// Prints the usual console table and keeps, per registered benchmark name
// (without the "/real_time" suffix), the counters of the median aggregate when
// repetitions were asked for, else of the plain run.
class RecordingReporter : public benchmark::ConsoleReporter {
 public:
  RecordingReporter();
  void ReportRuns(const std::vector<Run>& runs) override;
  std::optional<double> counter(const std::string& benchmark_name, const std::string& counter_name) const;

 private:
  std::map<std::string, benchmark::UserCounters> counters_;
};

// One row of a ratio table: ember's run against its peer's, compared on one counter.
struct Comparison {
  std::string label;
  std::string ember_run;
  std::string peer_run;
};

// Which counter a table compares, and how it is shown (e.g. "bytes/s" as GB/s: scale 1e-9).
struct Measure {
  std::string counter_name;
  std::string unit;
  double scale;
};

// Prints "label  ember  peer  ember/peer" for each row whose runs both ran
// (rows filtered out by --benchmark_filter are skipped).
void print_ratio_table(const RecordingReporter& reporter, const std::string& title, const Measure& measure,
                       const std::vector<Comparison>& rows);

// Initialize, run every registered benchmark through `reporter`, shut down.
// Returns false when the command line was not understood.
bool run_benchmarks(int argc, char** argv, RecordingReporter& reporter);

}  // namespace ember::bench
