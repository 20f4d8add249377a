// ZeRO stages 1-3 on real processes (scenarios in workers/zero_scenarios.cpp):
// on 2, 3 and 4 ranks each strategy ends with the parameters and optimizer
// state of DDP on the same batches, with accumulation, clipping, bf16
// autocast, tied weights and an unused layer.
#include <gtest/gtest.h>

#include "distributed/process_runner.h"

namespace ember::test {
namespace {

using std::chrono::seconds;

void expect_clean_success(const ProcessResult& result) {
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(leftover_workers().empty());
  EXPECT_TRUE(leftover_segments().empty());
}

ProcessResult run_ranks(int ranks, const std::vector<std::string>& args) {
  return launch({"--nproc-per-node", std::to_string(ranks)}, "zero_matches_ddp", args, seconds(120));
}

class ZeroMatchesDdp : public ::testing::TestWithParam<std::string> {};

TEST_P(ZeroMatchesDdp, OnTwoThreeAndFourRanks) {
  for (int ranks : {2, 3, 4}) expect_clean_success(run_ranks(ranks, {GetParam(), "auto"}));
}

TEST_P(ZeroMatchesDdp, WithAccumulationAndClipping) {
  expect_clean_success(run_ranks(2, {GetParam(), "auto", "accumulate", "clip"}));
  expect_clean_success(run_ranks(3, {GetParam(), "auto", "accumulate", "clip", "sgd"}));
}

TEST_P(ZeroMatchesDdp, WithBf16Autocast) { expect_clean_success(run_ranks(2, {GetParam(), "auto", "bf16"})); }

TEST_P(ZeroMatchesDdp, OverGloo) { expect_clean_success(run_ranks(2, {GetParam(), "gloo", "accumulate"})); }

INSTANTIATE_TEST_SUITE_P(Strategies, ZeroMatchesDdp, ::testing::Values("zero1", "zero2", "zero3"));

}  // namespace
}  // namespace ember::test
