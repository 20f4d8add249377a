// DistributedDataParallel on real processes (scenarios in
// workers/ddp_scenarios.cpp): N ranks on slices of the global batch equal one
// process on all of it (plain, with no_sync accumulation, with an unused
// layer), the error without find_unused_parameters, BatchNorm buffers
// broadcast, and the trace showing buckets launched in order while backward
// still runs. Each test checks the exit code and that nothing is left behind.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "core/profiler/profile.h"
#include "distributed/process_runner.h"

namespace ember::test {
namespace {

using std::chrono::seconds;

ProcessResult run_ranks(int ranks, const std::string& scenario, const std::string& backend = "auto",
                        const std::vector<std::string>& extra_env = {}) {
  return launch({"--nproc-per-node", std::to_string(ranks)}, scenario, {backend}, seconds(60), extra_env);
}

// Mutation caught (run once, failed as expected): the reducer all-reducing
// its buckets with ReduceOp::sum instead of avg (the sums left undivided)
// doubles every gradient on 2 ranks: the parameters part.
TEST(DDP, TwoRanksEqualOneProcessOnTheGlobalBatch) {
  expect_clean_success(run_ranks(2, "ddp_matches_single_process"));
}

TEST(DDP, ThreeRanksEqualOneProcessOnTheGlobalBatch) {
  expect_clean_success(run_ranks(3, "ddp_matches_single_process"));
}

// Note [Buckets in symmetric memory]: on shm the buckets are mapped by every
// rank, on gloo they are ordinary memory; both train as one process does
// (tests/distributed/test_shm.cpp: the fallback when /dev/shm is too small).
// Mutation caught: the reducer allocating its buckets with zeros() again
// (the shm run's gradients are then not symmetric).
TEST(DDP, BucketsLiveInSymmetricMemoryOnSharedMemory) {
  ProcessResult shm = launch({"--nproc-per-node", "2"}, "ddp_bucket_memory", {"shm", "symmetric"}, seconds(60));
  expect_clean_success(shm);
  ProcessResult gloo = launch({"--nproc-per-node", "2"}, "ddp_bucket_memory", {"gloo", "ordinary"}, seconds(60));
  expect_clean_success(gloo);
}

TEST(DDP, OneRankNeedsNoCommunication) { expect_clean_success(run_ranks(1, "ddp_matches_single_process")); }

TEST(DDP, OverGloo) { expect_clean_success(run_ranks(2, "ddp_matches_single_process", "gloo")); }

TEST(DDP, NoSyncAccumulationEqualsTheWholeBatch) {
  expect_clean_success(run_ranks(2, "ddp_no_sync_matches_single_process"));
  expect_clean_success(run_ranks(3, "ddp_no_sync_matches_single_process"));
}

// Accelerate's comm_hook: gradients travel as fp16 or bf16 (Note [Compressed gradients]).
TEST(DDP, CompressedGradientsAreTheAverageOfTheCastShares) {
  for (const char* hook : {"fp16", "bf16"}) {
    expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_compressed_gradients", {"auto", hook}, seconds(60)));
    expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_compressed_gradients", {"gloo", hook}, seconds(60)));
  }
}

// Scenarios and their mutations: workers/ddp_scenarios.cpp.
TEST(DDP, GradientsStayBucketViewsAcrossZeroGrad) {
  expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_gradients_stay_bucket_views", {"auto", "none"}, seconds(60)));
  expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_gradients_stay_bucket_views", {"auto", "zero"}, seconds(60)));
}

TEST(DDP, NoSyncAccumulatesInTheBucketViews) {
  expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_accumulation_in_bucket_views", {"auto", "none"}, seconds(60)));
  expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_accumulation_in_bucket_views", {"auto", "zero"}, seconds(60)));
}

TEST(DDP, FirstBucketIsSmallSoItsAllReduceStartsEarly) {
  expect_clean_success(run_ranks(2, "ddp_first_bucket_is_small"));
}

TEST(DDP, FindUnusedParametersCompletesTheBuckets) { expect_clean_success(run_ranks(2, "ddp_unused_parameters")); }

TEST(DDP, ALayerUsedOnAlternateStepsGetsNoStaleGradient) {
  expect_clean_success(run_ranks(2, "ddp_sometimes_unused"));
  expect_clean_success(run_ranks(2, "ddp_used_under_no_sync_counts_as_used"));
}

TEST(DDP, UnusedParametersWithoutFindUnusedAreNamedInTheError) {
  expect_clean_success(run_ranks(2, "ddp_unused_parameters_error"));
}

TEST(DDP, ForwardsWithoutTheirBackwardAreAcceptedAsInPyTorch) {
  expect_clean_success(run_ranks(2, "ddp_forwards_before_a_backward"));
}

TEST(DDP, AModelChangedAfterWrappingIsRefused) {
  expect_clean_success(run_ranks(2, "ddp_model_changed_after_wrapping"));
}

TEST(DDP, BuffersAreBroadcastFromRankZero) { expect_clean_success(run_ranks(2, "ddp_broadcast_buffers")); }

TEST(DDP, FrozenParametersStartFromRankZerosAndEvaluationForwardsAreAllowed) {
  expect_clean_success(run_ranks(2, "ddp_frozen_parameters_and_evaluation_forwards"));
}

TEST(DDP, RanksWithOtherParameterDtypesAreRefusedNamingTheParameter) {
  for (const char* engine : {"ddp", "zero3"})
    expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_mismatched_parameters", {"dtype", engine}, seconds(60)));
}

TEST(DDP, RanksWithOtherFrozenParametersAreRefusedNamingTheParameter) {
  for (const char* engine : {"ddp", "zero3"})
    expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_mismatched_parameters", {"frozen", engine}, seconds(60)));
}

TEST(DDP, RanksWithOtherBufferShapesAreRefusedNamingTheBuffer) {
  for (const char* engine : {"ddp", "zero3"})
    expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_mismatched_parameters", {"buffer", engine}, seconds(60)));
}

TEST(DDP, RanksWithOtherParameterShapesAreRefusedNamingTheParameter) {
  for (const char* engine : {"ddp", "zero3"})
    expect_clean_success(launch({"--nproc-per-node", "2"}, "ddp_mismatched_parameters", {"shape", engine}, seconds(60)));
}

// The trace of ddp_trace (three buckets, three iterations): in every
// iteration the buckets launch in index order, bucket 0 holds the last
// registered layer, and bucket 0 launches before backward has computed its
// last gradient (communication overlaps backward). The reducer marks that
// moment ("last gradient", a span of no length on the backward thread) before it waits:
// the last AccumulateGrad's span contains that wait, so comparing with the
// end of the backward lane (as this test once did) passed even when every
// all-reduce ran after backward's work.
// Mutation caught (run once, failed as expected): a reducer that launches
// no bucket until every bucket is full (`launch_in_order` returning while
// any bucket is pending, then launching all) fails "no overlap" in every
// iteration, while the old end-of-lane comparison still passed it.
TEST(DDP, TraceShowsBucketsLaunchedInOrderDuringBackward) {
  std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("ember-ddp-trace-" + std::to_string(::getpid()));
  std::filesystem::create_directories(directory);
  std::string prefix = (directory / "trace").string();
  expect_clean_success(run_ranks(2, "ddp_trace", "auto", {"EMBER_DDP_TRACE=" + prefix}));

  for (int rank = 0; rank < 2; ++rank) {
    std::string path = prefix + ".rank" + std::to_string(rank) + ".json";
    std::ifstream file(path);
    ASSERT_TRUE(file.good()) << "no trace at " << path;
    nlohmann::json trace = nlohmann::json::parse(file);
    struct Launch {
      int64_t bucket;
      double ts;
      std::vector<std::string> parameters;
    };
    std::map<int64_t, std::vector<Launch>> launches;  // by iteration
    std::map<int64_t, double> last_gradient;           // by iteration
    // The profiler's trace (core/profiler): backward nodes on the thread
    // that ran them, bucket all-reduces on the communication track.
    int backward_nodes = 0;
    for (const auto& event : trace.at("traceEvents")) {
      if (event.at("ph") != "X") continue;
      EXPECT_EQ(event.at("pid"), rank);
      backward_nodes += event.at("cat") == "backward";
      if (event.at("name") == "last gradient") {
        EXPECT_NE(event.at("tid"), profiler::kCommunicationTrack);
        last_gradient[event.at("args").at("iteration")] = event.at("ts").get<double>();
      }
      if (event.at("cat") == "bucket" && event.at("name").get<std::string>().starts_with("allreduce bucket")) {
        // Overlapping spans of the communication track go on lanes beside it (Note [Communication lanes]).
        EXPECT_GE(event.at("tid"), profiler::kCommunicationTrack);
        EXPECT_LT(event.at("tid"), profiler::kDeviceTrackBase);
        launches[event.at("args").at("iteration")].push_back(
            {event.at("args").at("bucket"), event.at("ts").get<double>(),
             event.at("args").at("parameters").get<std::vector<std::string>>()});
      }
    }
    EXPECT_GT(backward_nodes, 0) << "rank " << rank << ": no backward node in the trace";
    ASSERT_EQ(launches.size(), 3u) << "rank " << rank;
    for (auto& [iteration, in_iteration] : launches) {
      ASSERT_GE(in_iteration.size(), 3u) << "rank " << rank << " iteration " << iteration;
      std::sort(in_iteration.begin(), in_iteration.end(),
                [](const Launch& a, const Launch& b) { return a.bucket < b.bucket; });
      for (size_t i = 0; i < in_iteration.size(); ++i) {
        EXPECT_EQ(in_iteration[i].bucket, int64_t(i));
        if (i > 0) {
          EXPECT_LE(in_iteration[i - 1].ts, in_iteration[i].ts) << "bucket " << i << " launched early";
        }
      }
      // Reverse registration order: bucket 0 starts with the last layer's
      // parameters, the last bucket holds the first layer's.
      EXPECT_EQ(in_iteration.front().parameters.front(), "6.bias");
      const auto& last = in_iteration.back().parameters;
      EXPECT_NE(std::find(last.begin(), last.end(), "0.weight"), last.end());
      ASSERT_EQ(last_gradient.count(iteration), 1u) << "rank " << rank << " iteration " << iteration;
      EXPECT_LT(in_iteration.front().ts, last_gradient[iteration])
          << "rank " << rank << " iteration " << iteration << ": no overlap";
    }
  }
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace ember::test
