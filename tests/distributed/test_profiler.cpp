// The profiler across processes: `ember launch --profile DIR` makes every rank
// of a 2-rank DDP run write DIR/rank<r>.json with its kernels, backward nodes,
// collectives and bucket all-reduces and print its table; `ember trace merge
// DIR` joins them into one trace with a process per rank, on rank 0's clock.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

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
// clock offset not recorded or not 0 for ranks of one host (the ping's error
// moved rank 1's events by 0.5-0.8 ms), and a merge that keeps each file's
// pid. (The merge's subtraction of an offset: TraceMergeRefuses..., below.)
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
    EXPECT_EQ(trace["ember"]["clock_offset_ns"], 0) << "rank " << rank << ": one host, one clock";
    std::map<std::string, int> by_category;
    for (const auto& event : trace["traceEvents"]) {
      if (event["ph"] != "X") continue;
      EXPECT_EQ(event["pid"], rank);
      ++by_category[event["cat"]];
      if (event["cat"] == "collective") {
        // On a lane of the communication track (Note [Communication lanes]).
        EXPECT_GE(event["tid"], profiler::kCommunicationTrack);
        EXPECT_LT(event["tid"], profiler::kDeviceTrackBase);
        EXPECT_EQ(event["args"]["group_size"], 2);
        EXPECT_FALSE(event["args"]["backend"].get<std::string>().empty());
        EXPECT_FALSE(event["args"]["algorithm"].get<std::string>().empty());
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

// Every collective span names the algorithm its backend ran, per backend,
// and EMBER_REFERENCE_ALLREDUCE changes the reference backend's all-reduce.
struct AlgorithmCase {
  std::string backend;
  std::string reference_allreduce;  // EMBER_REFERENCE_ALLREDUCE, "" for unset
  std::map<std::string, std::string> expected;  // span name -> algorithm
};

std::string case_name(const ::testing::TestParamInfo<AlgorithmCase>& info) {
  return info.param.backend + (info.param.reference_allreduce.empty() ? "" : "_" + info.param.reference_allreduce);
}

// The reference backend's transport on one node is shm.
std::map<std::string, std::string> reference_algorithms(const std::string& allreduce) {
  return {{"allreduce", allreduce},           {"broadcast", "binomial_tree"}, {"allgather", "ring"},
          {"reduce_scatter", "ring"},         {"all_to_all", "shm direct"},   {"barrier", "shm counters"},
          {"send", "shm mailbox"},            {"recv", "shm mailbox"}};
}

class ProfilerAlgorithm : public ::testing::TestWithParam<AlgorithmCase> {};

// Catches: a backend naming another's algorithm or a fixed one (the
// reference backend saying "ring" whatever EMBER_REFERENCE_ALLREDUCE ran:
// seen failing with algorithm() returning "ring" for every all-reduce), the
// field missing from the span, and an empty buffer credited with an algorithm;
// also that each span names its peers (global ranks: the other rank here).
TEST_P(ProfilerAlgorithm, EveryCollectiveSpanNamesTheAlgorithmItsBackendRan) {
  const AlgorithmCase& param = GetParam();
  testing::ScratchDirectory directory;
  const std::string profile_dir = (directory.path() / "profile").string();
  std::vector<std::string> env;
  if (!param.reference_allreduce.empty()) env.push_back("EMBER_REFERENCE_ALLREDUCE=" + param.reference_allreduce);
  ProcessResult result = launch({"--nproc-per-node", "2", "--profile", profile_dir}, "profiled_collectives",
                                {param.backend}, seconds(60), env);
  expect_clean_success(result);
  for (int rank = 0; rank < 2; ++rank) {
    nlohmann::json trace = read_json(directory.path() / "profile" / ("rank" + std::to_string(rank) + ".json"));
    std::map<std::string, int> seen;
    int empty = 0;
    for (const auto& event : trace["traceEvents"]) {
      if (event["ph"] != "X" || event["cat"] != "collective") continue;
      const std::string name = event["name"];
      ASSERT_TRUE(event["args"].contains("algorithm")) << name << " on rank " << rank;
      EXPECT_EQ(event["args"]["backend"], param.backend) << name;
      EXPECT_EQ(event["args"]["peers"], nlohmann::json::array({1 - rank})) << name << " on rank " << rank;
      if (event["args"]["bytes"] == 0 && name != "barrier") {
        EXPECT_EQ(event["args"]["algorithm"], "none (empty buffer)") << name << " on rank " << rank;
        ++empty;
        continue;
      }
      ASSERT_TRUE(param.expected.count(name)) << "unexpected span " << name;
      EXPECT_EQ(event["args"]["algorithm"], param.expected.at(name)) << name << " on rank " << rank;
      ++seen[name];
    }
    EXPECT_EQ(empty, 1) << "rank " << rank;
    for (const auto& [name, algorithm] : param.expected) EXPECT_EQ(seen[name], 1) << name << " on rank " << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, ProfilerAlgorithm,
    ::testing::Values(
        AlgorithmCase{"reference", "", reference_algorithms("ring")},
        AlgorithmCase{"reference", "naive", reference_algorithms("naive")},
        AlgorithmCase{"reference", "halving_doubling", reference_algorithms("halving_doubling")},
        AlgorithmCase{"gloo", "",
                      {{"allreduce", "ring"}, {"broadcast", "binomial_tree"}, {"allgather", "ring"},
                       {"reduce_scatter", "ring"}, {"all_to_all", "pairwise_exchange"}, {"barrier", "dissemination"},
                       {"send", "point_to_point"}, {"recv", "point_to_point"}}},
        AlgorithmCase{"shm", "",
                      {{"allreduce", "direct_reduce_scatter_allgather"}, {"broadcast", "direct_from_root"},
                       {"allgather", "direct"}, {"reduce_scatter", "direct_reduce_scatter"}, {"all_to_all", "direct"},
                       {"barrier", "counters"}, {"send", "mailbox"}, {"recv", "mailbox"}}}),
    case_name);

// Catches, each seen failing: a profile directory that cannot be written
// found out only at exit (every trace lost, exit code 0); a relative
// EMBER_PROFILE followed the program's chdir; a worker without a process group
// wrote rank1.json stamped rank 0; a thread name that is not UTF-8 lost the
// whole trace (nlohmann::json's dump threw).
TEST(Profiler, TracesOfWorkersWithoutAGroupAndBadProfileDirectories) {
  testing::ScratchDirectory directory;
  const std::filesystem::path file = directory.path() / "a_file";
  std::ofstream(file) << "x";
  ProcessResult refused = launch({"--nproc-per-node", "1", "--profile", file.string()}, "profiled_without_a_group",
                                 {directory.path().string()}, seconds(30));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--profile: cannot create the directory '" + file.string() + "'"), std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("rank 0"), std::string::npos) << "a worker started: " << refused.output;

  const std::filesystem::path elsewhere = directory.path() / "elsewhere";
  std::filesystem::create_directories(elsewhere);
  ProcessResult alone = run_process({"/usr/bin/env", "-C", directory.path().string(), "EMBER_PROFILE=relative",
                                     EMBER_WORKER, "profiled_without_a_group", elsewhere.string()},
                                    seconds(30));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_FALSE(std::filesystem::exists(elsewhere / "relative"));
  const nlohmann::json trace = read_json(directory.path() / "relative" / "rank0.json");
  bool replaced = false;
  for (const auto& event : trace["traceEvents"])
    if (event["name"] == "thread_name") replaced |= event["args"]["name"].get<std::string>().find("\xef\xbf\xbd") != std::string::npos;
  EXPECT_TRUE(replaced) << trace.dump();

  // Catches: a relative EMBER_PROFILE resolved where the program was at its
  // first op or its Accelerator (the trace went under `elsewhere`), and
  // EMBER_PROFILE_SHAPES dropped when the Accelerator started the profile.
  ProcessResult moved = run_process({"/usr/bin/env", "-C", directory.path().string(), "EMBER_PROFILE=moved",
                                     "EMBER_PROFILE_SHAPES=1", EMBER_WORKER, "profiled_after_a_chdir",
                                     elsewhere.string()},
                                    seconds(30));
  ASSERT_EQ(moved.exit_code, 0) << moved.output;
  EXPECT_FALSE(std::filesystem::exists(elsewhere / "moved"));
  bool shaped = false;
  const nlohmann::json moved_trace = read_json(directory.path() / "moved" / "rank0.json");
  for (const auto& event : moved_trace["traceEvents"])
    if (event["name"] == "matmul") shaped |= event["args"].contains("shapes");
  EXPECT_TRUE(shaped) << "no matmul with its shapes in the trace";

  const std::filesystem::path profile = directory.path() / "launched";
  ProcessResult launched = launch({"--nproc-per-node", "2", "--profile", profile.string()}, "profiled_without_a_group",
                                  {elsewhere.string()}, seconds(30));
  expect_clean_success(launched);
  for (int rank = 0; rank < 2; ++rank) {
    const nlohmann::json ranked = read_json(profile / ("rank" + std::to_string(rank) + ".json"));
    EXPECT_EQ(ranked["ember"]["rank"], rank);
    EXPECT_EQ(ranked["ember"]["world_size"], 2);
    for (const auto& event : ranked["traceEvents"]) EXPECT_EQ(event["pid"], rank) << event.dump();
  }
  EXPECT_EQ(run_process({EMBER_CLI, "trace", "merge", profile.string()}, seconds(30)).exit_code, 0);
}

// Catches: files of an earlier run in the directory merged in silently, two
// files for one rank (rank1.json, rank01.json), one dropped, and a merge that
// leaves a rank's timestamps on its own clock (not subtracting its offset).
TEST(Profiler, TraceMergeRefusesFilesOfAnotherJobAndMissingOrDoubledRanks) {
  testing::ScratchDirectory directory;
  // Rank 1's clock runs 5 us ahead of rank 0's: merge moves its event back.
  auto trace = [&](const std::string& name, int rank, const std::string& job, int world_size) {
    nlohmann::json ember = {{"rank", rank}, {"job", job}, {"world_size", world_size}, {"clock_offset_ns", 5000 * rank}};
    nlohmann::json event = {{"name", "op"}, {"ph", "X"}, {"ts", 100.0}, {"dur", 1.0}, {"pid", 0}, {"tid", 1}};
    std::ofstream(directory.path() / name) << nlohmann::json{{"traceEvents", {event}}, {"ember", ember}};
  };
  auto merge = [&] { return run_process({EMBER_CLI, "trace", "merge", directory.path().string()}, seconds(30)); };
  trace("rank0.json", 0, "new", 2);
  trace("rank1.json", 1, "new", 2);
  ASSERT_EQ(merge().exit_code, 0);
  const nlohmann::json merged = read_json(directory.path() / "merged.json");
  std::map<int, double> times;
  for (const auto& event : merged["traceEvents"]) times[event["pid"].get<int>()] = event["ts"].get<double>();
  EXPECT_EQ(times, (std::map<int, double>{{0, 100.0}, {1, 95.0}}));
  trace("rank2.json", 2, "old", 3);
  ProcessResult extra = merge();
  EXPECT_EQ(extra.exit_code, 1);
  EXPECT_NE(extra.output.find("holds 3 rank files (an earlier run's?)"), std::string::npos) << extra.output;
  std::filesystem::remove(directory.path() / "rank2.json");
  trace("rank1.json", 1, "old", 2);
  ProcessResult mixed = merge();
  EXPECT_EQ(mixed.exit_code, 1);
  EXPECT_NE(mixed.output.find("is from job new but"), std::string::npos) << mixed.output;
  trace("rank1.json", 1, "new", 2);
  trace("rank01.json", 1, "new", 2);
  ProcessResult doubled = merge();
  EXPECT_EQ(doubled.exit_code, 1);
  EXPECT_NE(doubled.output.find("are both rank 1's trace"), std::string::npos) << doubled.output;
  std::filesystem::remove(directory.path() / "rank01.json");
  std::filesystem::remove(directory.path() / "rank1.json");
  ProcessResult missing = merge();
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("is one of 2 ranks, but " + directory.path().string() + " has no rank1.json"),
            std::string::npos)
      << missing.output;
}

// Catches: nlohmann's bare type_error ("cannot use operator[] with a string
// argument with number") for a field of another type, naming no file.
TEST(Profiler, TraceMergeOfAFieldOfAnotherTypeNamesTheFile) {
  testing::ScratchDirectory directory;
  for (const std::string& text : {std::string(R"({"traceEvents":[3]})"), std::string(R"({"traceEvents":[],"ember":{"job":5}})"),
                                  std::string(R"({"traceEvents":[{"ts":"x"}]})")}) {
    std::ofstream(directory.path() / "rank0.json") << text;
    ProcessResult merge = run_process({EMBER_CLI, "trace", "merge", directory.path().string()}, seconds(30));
    EXPECT_EQ(merge.exit_code, 1) << text;
    EXPECT_NE(merge.output.find((directory.path() / "rank0.json").string() + ": a field is not what ember writes"),
              std::string::npos)
        << merge.output;
  }
}

// A run of one process without ember launch (EMBER_PROFILE alone) writes a
// rank0.json naming no job and no world size; it merges alone, and never with
// another run's files. Mutation: merge_traces checking job and world_size
// only where a file has them -> the earlier launched job's rank1.json is
// merged with the new rank0.json (exit 0).
TEST(Profiler, TraceMergeRefusesARunWithoutLaunchBesideAnotherRunsFiles) {
  testing::ScratchDirectory directory;
  auto trace = [&](const std::string& name, int rank, const nlohmann::json& job_and_size) {
    nlohmann::json ember = job_and_size;
    ember["rank"] = rank;
    nlohmann::json event = {{"name", "op"}, {"ph", "X"}, {"ts", 100.0}, {"dur", 1.0}, {"pid", 0}, {"tid", 1}};
    std::ofstream(directory.path() / name) << nlohmann::json{{"traceEvents", {event}}, {"ember", ember}};
  };
  auto merge = [&] { return run_process({EMBER_CLI, "trace", "merge", directory.path().string()}, seconds(30)); };
  const std::string rank0 = (directory.path() / "rank0.json").string();
  const std::string rank1 = (directory.path() / "rank1.json").string();
  trace("rank0.json", 0, nlohmann::json::object());
  ProcessResult alone = merge();
  EXPECT_EQ(alone.exit_code, 0) << alone.output;

  trace("rank1.json", 1, {{"job", "old"}, {"world_size", 2}});
  ProcessResult beside_a_job = merge();
  EXPECT_EQ(beside_a_job.exit_code, 1);
  EXPECT_NE(beside_a_job.output.find(rank0 + " names no world size (a run of one process, without ember launch), but " +
                                     directory.path().string() + " holds 2 rank files (rank0.json, rank1.json)"),
            std::string::npos)
      << beside_a_job.output;

  trace("rank0.json", 0, {{"world_size", 2}});  // a world size but no job
  ProcessResult without_job = merge();
  EXPECT_EQ(without_job.exit_code, 1);
  EXPECT_NE(without_job.output.find(rank1 + " is from job old but " + rank0 + " names no job"), std::string::npos)
      << without_job.output;
}

// Mutation: main.cpp taking "--" as the start of a program for every command
// -> `trace merge -- DIR` fails for want of DIR, and `config -- --flag value`
// saves without the flag (exit 0). Mutation: -o without kNonEmptyPath -> ""
// writes DIR/merged.json (exit 0).
TEST(Profiler, TraceMergeTakesDoubleDashAsEndOfOptionsAndRefusesAnEmptyOutput) {
  testing::ScratchDirectory directory;
  nlohmann::json event = {{"name", "op"}, {"ph", "X"}, {"ts", 100.0}, {"dur", 1.0}, {"pid", 0}, {"tid", 1}};
  std::ofstream(directory.path() / "rank0.json") << nlohmann::json{{"traceEvents", {event}}};
  ProcessResult after_dashes = run_process({EMBER_CLI, "trace", "merge", "--", directory.path().string()}, seconds(30));
  EXPECT_EQ(after_dashes.exit_code, 0) << after_dashes.output;
  EXPECT_TRUE(std::filesystem::exists(directory.path() / "merged.json"));
  std::filesystem::remove(directory.path() / "merged.json");
  ProcessResult empty = run_process({EMBER_CLI, "trace", "merge", directory.path().string(), "-o", ""}, seconds(30));
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_NE(empty.output.find("an empty path"), std::string::npos) << empty.output;
  EXPECT_FALSE(std::filesystem::exists(directory.path() / "merged.json"));
}

// Two Accelerators one after the other in one program under a relative
// EMBER_PROFILE, the second changing directory before it ends, with
// EMBER_DDP_TRACE set too; then an EMBER_PROFILE that is a file.
// Mutations caught: start_process_profile keeping the prefix relative -> the
// second trace lands under `elsewhere`; finish_process_profile writing
// <prefix><rank>.json again -> the first run's trace replaced, no rank0-2.json;
// no EMBER_DDP_TRACE line -> its absence unexplained; no
// prepare_output_directory at the start -> the Accelerator runs and the trace
// is lost at exit (exit 0).
TEST(Profiler, AcceleratorProfilesAreAbsoluteCheckedAtStartAndNeverReplaced) {
  testing::ScratchDirectory directory;
  const std::filesystem::path root = std::filesystem::canonical(directory.path());  // as the worker's getcwd says it
  const std::filesystem::path elsewhere = root / "elsewhere";
  std::filesystem::create_directories(elsewhere);
  ProcessResult result = run_process({"/usr/bin/env", "-C", root.string(), "EMBER_PROFILE=relative",
                                      "EMBER_DDP_TRACE=ddp", EMBER_WORKER, "profiled_accelerators", elsewhere.string()},
                                     seconds(60));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::filesystem::path profile = root / "relative";
  EXPECT_FALSE(std::filesystem::exists(elsewhere / "relative"));
  EXPECT_NE(result.output.find("[ember profiler] rank 0: " + (profile / "rank0.json").string() +
                               " holds this process's earlier profile; this one is in " +
                               (profile / "rank0-2.json").string()),
            std::string::npos)
      << result.output;
  // The first Accelerator ran 3 steps, the second 5: each trace keeps its own.
  for (const auto& [name, steps] : {std::pair{"rank0.json", 3}, std::pair{"rank0-2.json", 5}}) {
    int optimizer_steps = 0;
    const nlohmann::json trace = read_json(profile / name);
    for (const auto& event : trace["traceEvents"])
      optimizer_steps += event["ph"] == "X" && event["cat"] == "optimizer";
    EXPECT_EQ(optimizer_steps, steps) << name;
  }
  EXPECT_NE(result.output.find("[ember profiler] EMBER_DDP_TRACE=ddp writes no trace of its own: its backward nodes "
                               "and communication are in EMBER_PROFILE's trace, " +
                               (profile / "rank<r>.json").string()),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(root / "ddp.rank0.json"));
  EXPECT_EQ(run_process({EMBER_CLI, "trace", "merge", profile.string()}, seconds(30)).exit_code, 0);

  const std::filesystem::path file = root / "a_file";
  std::ofstream(file) << "x";
  ProcessResult refused = run_process({"/usr/bin/env", "EMBER_PROFILE=" + file.string(), EMBER_WORKER,
                                       "profiled_accelerators", elsewhere.string()},
                                      seconds(60));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.output.find("profiler: cannot create the directory '" + file.string() + "'"), std::string::npos)
      << refused.output;
  EXPECT_EQ(refused.output.find("profiled_accelerators done"), std::string::npos) << refused.output;
}

TEST(Profiler, TraceMergeOfADirectoryWithoutTracesNamesIt) {
  testing::ScratchDirectory directory;
  ProcessResult merge = run_process({EMBER_CLI, "trace", "merge", directory.path().string()}, seconds(30));
  EXPECT_EQ(merge.exit_code, 1);
  EXPECT_NE(merge.output.find("no rank<r>.json in"), std::string::npos) << merge.output;
}

}  // namespace
}  // namespace ember::test
