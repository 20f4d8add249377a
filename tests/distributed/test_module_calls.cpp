// Models with other forward signatures under the Accelerator (scenarios in
// workers/module_call_scenarios.cpp): a model taking (input, mask) and one
// returning (logits, loss), on 2 and 3 processes, f32 and bf16 autocast, equal
// one process on the global batch; a forward that skips the hooks is refused
// across processes (DDP) and in one process (the Accelerator's autocast check).
#include <gtest/gtest.h>

#include "distributed/accelerator/accelerator.h"
#include "distributed/process_runner.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

using std::chrono::seconds;

void expect_clean_success(const ProcessResult& result) {
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(leftover_workers().empty());
  EXPECT_TRUE(leftover_segments().empty());
}

ProcessResult run_ranks(int ranks, const std::vector<std::string>& args, const std::string& scenario) {
  return launch({"--nproc-per-node", std::to_string(ranks)}, scenario, args, seconds(90));
}

TEST(ModuleCalls, InputAndMaskOnTwoAndThreeProcessesEqualOneProcess) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(ranks);
    expect_clean_success(run_ranks(ranks, {"masked", "no"}, "module_call_matches_single_process"));
    expect_clean_success(run_ranks(ranks, {"masked", "bf16"}, "module_call_matches_single_process"));
  }
}

TEST(ModuleCalls, LogitsAndLossOnTwoAndThreeProcessesEqualOneProcess) {
  for (int ranks : {2, 3}) {
    SCOPED_TRACE(ranks);
    expect_clean_success(run_ranks(ranks, {"loss", "no"}, "module_call_matches_single_process"));
    expect_clean_success(run_ranks(ranks, {"loss", "bf16"}, "module_call_matches_single_process"));
  }
}

TEST(ModuleCalls, DirectForwardIsRefusedAcrossProcesses) {
  expect_clean_success(run_ranks(2, {}, "module_call_direct_forward_is_refused"));
}

// One process, bf16: no DDP, so the Accelerator's own gradient check refuses
// a forward that ran without autocast (mutation caught: not installing the
// check, or resetting it anywhere but the optimizer step).
TEST(ModuleCalls, DirectForwardWithoutAutocastIsRefusedInOneProcess) {
  Accelerator accelerator({.mixed_precision = "bf16"});
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(6, 8), nn::Tanh(), nn::Linear(8, 3));
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  Tensor inputs = randn({4, 6});
  Tensor targets = randint(0, 3, {4});
  auto loss_of = [&](const Tensor& logits) { return nn::functional::cross_entropy(logits, targets); };

  accelerator.backward(loss_of((*model)(inputs)));
  accelerator.backward(loss_of((*model)(inputs)));  // two calls, two backwards before a step: fine
  optimizer.step();
  optimizer.zero_grad();
  EXPECT_EMBER_ERROR(accelerator.backward(loss_of(model->forward(inputs))),
                     "got a gradient from a forward that ran without the model's hooks, so without the bf16 "
                     "autocast");
  optimizer.zero_grad();
  accelerator.backward(loss_of((*model)(inputs)));  // through the call again: accepted
}

}  // namespace
}  // namespace ember::test
