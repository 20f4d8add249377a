// Helpers shared by the benches (bench_support.h). No tests: the benches'
// smoke runs in scripts/bench.sh exercise them.
#include "bench_support.h"

#include <unistd.h>

#include <cstdio>

#include "core/ops/creation.h"

namespace ember::bench {

void fill_uniform(float* data, int64_t count, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 1;
  for (int64_t i = 0; i < count; ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = float(state >> 8) * (2.0f / float(1u << 24)) - 1.0f;
  }
}

Tensor uniform_tensor(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor values = empty(shape, {.dtype = DType::f32});
  fill_uniform(values.data_ptr<float>(), values.numel(), seed);
  return dtype == DType::f32 ? values : values.to(dtype);
}

// Colour only on a terminal, as the default reporter does with --benchmark_color=auto.
RecordingReporter::RecordingReporter()
    : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular : OO_Tabular) {}

void RecordingReporter::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  for (const Run& run : runs) {
    if (run.error_occurred) continue;
    bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
    if (run.run_type == Run::RT_Iteration || median) counters_[run.run_name.function_name] = run.counters;
  }
}

std::optional<double> RecordingReporter::counter(const std::string& benchmark_name,
                                                 const std::string& counter_name) const {
  auto run = counters_.find(benchmark_name);
  if (run == counters_.end()) return std::nullopt;
  auto value = run->second.find(counter_name);
  if (value == run->second.end()) return std::nullopt;
  return value->second.value;
}

void print_ratio_table(const RecordingReporter& reporter, const std::string& title, const Measure& measure,
                       const std::vector<Comparison>& rows) {
  bool header_printed = false;
  for (const Comparison& row : rows) {
    std::optional<double> ours = reporter.counter(row.ember_run, measure.counter_name);
    std::optional<double> peer = reporter.counter(row.peer_run, measure.counter_name);
    if (!ours || !peer) continue;
    *ours *= measure.scale;
    *peer *= measure.scale;
    if (!header_printed) {
      std::printf("\n%s (%s; ratio > 1: ember faster)\n", title.c_str(), measure.unit.c_str());
      std::printf("%-28s %12s %12s %12s\n", "workload", "ember", "peer", "ember/peer");
      header_printed = true;
    }
    std::printf("%-28s %12.2f %12.2f %12.3f\n", row.label.c_str(), *ours, *peer, *peer > 0 ? *ours / *peer : 0.0);
  }
  std::fflush(stdout);
}

bool run_benchmarks(int argc, char** argv, RecordingReporter& reporter) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return false;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return true;
}

}  // namespace ember::bench
