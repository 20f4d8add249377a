// The profiler across processes: `ember launch --profile DIR` makes every rank
// of a 2-rank DDP run write DIR/rank<r>.json with its kernels, backward nodes,
// collectives and bucket all-reduces and print its table; `ember trace merge
// DIR` joins them into one trace with a process per rank, on rank 0's clock.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "core/profiler/profile.h"
#include "distributed/process_runner.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

using std::chrono::seconds;

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << "no file at " << path;
  return nlohmann::json::parse(file);
}

// Catches: collectives or buckets missing from the profile (ProcessGroup's or
// the reducer's recording removed), a rank writing another's file, the
// clock offset not measured, and a merge that keeps each file's pid or
// leaves the timestamps on the rank's own clock (seen failing with merge not
// subtracting the offset; a measured offset of exactly 0 ns would hide that).
TEST(Profiler, LaunchedDdpRunProfilesEveryRankAndMergesOnOneClock) {
  testing::ScratchDirectory directory;
  const std::string profile_dir = (directory.path() / "profile").string();
  ProcessResult result =
      launch({"--nproc-per-node", "2", "--profile", profile_dir}, "ddp_trace", {"auto"}, seconds(60));
  expect_clean_success(result);
  EXPECT_NE(result.output.find("[ember profiler] rank 1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("exposed communication"), std::string::npos) << result.output;

  std::map<int, nlohmann::json> traces;
  for (int rank = 0; rank < 2; ++rank) {
    nlohmann::json trace = read_json(directory.path() / "profile" / ("rank" + std::to_string(rank) + ".json"));
    ASSERT_EQ(trace["ember"]["rank"], rank);
    ASSERT_TRUE(trace["ember"].contains("clock_offset_ns")) << "rank " << rank;
    if (rank == 0) {
      EXPECT_EQ(trace["ember"]["clock_offset_ns"], 0);
    }
    std::map<std::string, int> by_category;
    for (const auto& event : trace["traceEvents"]) {
      if (event["ph"] != "X") continue;
      EXPECT_EQ(event["pid"], rank);
      ++by_category[event["cat"]];
      if (event["cat"] == "collective") {
        EXPECT_EQ(event["tid"], profiler::kCommunicationTrack);
        EXPECT_EQ(event["args"]["group_size"], 2);
        EXPECT_FALSE(event["args"]["backend"].get<std::string>().empty());
        EXPECT_TRUE(event["args"]["bytes"].is_number());
      }
    }
    EXPECT_GT(by_category["op"], 0) << "rank " << rank;
    EXPECT_GT(by_category["backward"], 0) << "rank " << rank;
    EXPECT_GT(by_category["module"], 0) << "rank " << rank;
    EXPECT_GE(by_category["collective"], 9) << "rank " << rank;  // 3 buckets x 3 iterations, and the broadcasts
    EXPECT_GE(by_category["bucket"], 9) << "rank " << rank;
    EXPECT_EQ(by_category["optimizer"], 3) << "rank " << rank;  // one SGD step per iteration
    traces[rank] = std::move(trace);
  }

  ProcessResult merge = run_process({EMBER_CLI, "trace", "merge", profile_dir}, seconds(60));
  ASSERT_EQ(merge.exit_code, 0) << merge.output;
  nlohmann::json merged = read_json(directory.path() / "profile" / "merged.json");
  std::set<int> pids;
  size_t events = 0;
  for (const auto& event : merged["traceEvents"]) {
    pids.insert(event["pid"].get<int>());
    ++events;
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(events, traces[0]["traceEvents"].size() + traces[1]["traceEvents"].size());
  // Rank 1's first timed event, moved onto rank 0's clock by its offset.
  const double offset_us = traces[1]["ember"]["clock_offset_ns"].get<double>() / 1000.0;
  auto first_timed = [](const nlohmann::json& list, int pid) {
    for (const auto& event : list)
      if (event["pid"] == pid && event.contains("ts")) return event;
    return nlohmann::json();
  };
  const nlohmann::json original = first_timed(traces[1]["traceEvents"], 1);
  const nlohmann::json moved = first_timed(merged["traceEvents"], 1);
  ASSERT_FALSE(original.is_null());
  EXPECT_EQ(moved["name"], original["name"]);
  EXPECT_DOUBLE_EQ(moved["ts"].get<double>(), original["ts"].get<double>() - offset_us);
  EXPECT_EQ(merged["ember"]["clock_offsets_ns"]["1"], traces[1]["ember"]["clock_offset_ns"]);
}

TEST(Profiler, TraceMergeOfADirectoryWithoutTracesNamesIt) {
  testing::ScratchDirectory directory;
  ProcessResult merge = run_process({EMBER_CLI, "trace", "merge", directory.path().string()}, seconds(30));
  EXPECT_EQ(merge.exit_code, 1);
  EXPECT_NE(merge.output.find("no rank<r>.json in"), std::string::npos) << merge.output;
}

}  // namespace
}  // namespace ember::test
