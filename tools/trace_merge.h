// `ember trace merge DIR`: joins the per-rank traces the profiler wrote
// (DIR/rank<r>.json, from EMBER_PROFILE or `ember launch --profile DIR`) into
// one Chrome trace that Perfetto opens with a process track per rank and a
// thread track per thread, every rank on rank 0's clock (Note [One clock for
// every rank] in core/profiler/README.md). tools/main.cpp parses the command
// line into TraceMergeOptions.
//
//   ember launch --nproc-per-node 2 --profile prof -- ./train
//   ember trace merge prof            # writes prof/merged.json
//
// Tests: tests/distributed/test_profiler.cpp (a 2-rank launched run).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ember::launch {

struct TraceMergeOptions {
  std::string directory;  // where the rank<r>.json files are
  std::string output;     // "": DIR/merged.json
};

// The merged trace of every rank<r>.json in `directory`: each event's pid
// becomes its rank and its timestamp moves by the rank's clock offset.
nlohmann::json merge_traces(const std::string& directory);

// Writes merge_traces(options.directory) and returns the path written.
std::string run_trace_merge(const TraceMergeOptions& options);

}  // namespace ember::launch
