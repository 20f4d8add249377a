// Step and zero_grad pre-hooks on optimizers and schedulers: what the
// Accelerator installs to skip an optimizer step on accumulation steps (or
// after an fp16 overflow) and to step a scheduler only after a real update.
#include "optim/optim_golden.h"

namespace ember::testing {
namespace {

Tensor leaf_with_grad(double value, double grad) {
  Tensor t = full({2}, value);
  t.requires_grad_(true);
  t.set_grad(full({2}, grad));
  return t;
}

TEST(OptimizerHooks, AStepPreHookReturningFalseSkipsTheUpdate) {
  Tensor w = leaf_with_grad(1.0, 1.0);
  optim::SGD optimizer({w}, {.lr = 0.5});
  bool allow = false;
  int calls = 0;
  HookId id = optimizer.register_step_pre_hook([&](optim::Optimizer& seen) {
    EXPECT_EQ(&seen, &optimizer);
    ++calls;
    return allow;
  });
  optimizer.step();
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));  // skipped
  EXPECT_EQ(optimizer.steps_taken(), 0);
  allow = true;
  optimizer.step();
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(optimizer.steps_taken(), 1);
  EXPECT_EQ(calls, 2);
  optimizer.remove_hook(id);
  allow = false;
  optimizer.step();  // no hook left: steps
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EMBER_ERROR(optimizer.remove_hook(id), "no hook with id");
}

TEST(OptimizerHooks, EveryHookRunsEvenAfterOneSaysSkip) {
  Tensor w = leaf_with_grad(1.0, 1.0);
  optim::Adam optimizer({w});
  std::vector<int> order;
  optimizer.register_step_pre_hook([&](optim::Optimizer&) {
    order.push_back(1);
    return false;
  });
  optimizer.register_step_pre_hook([&](optim::Optimizer&) {
    order.push_back(2);
    return true;
  });
  optimizer.step();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
  EXPECT_EQ(optimizer.state(0, 0), nullptr);  // no update, so no state either
}

TEST(OptimizerHooks, AZeroGradPreHookCanKeepTheGradients) {
  Tensor w = leaf_with_grad(1.0, 3.0);
  optim::SGD optimizer({w}, {.lr = 0.1});
  bool allow = false;
  std::vector<bool> told;
  optimizer.register_zero_grad_pre_hook([&](optim::Optimizer&, bool set_to_none) {
    told.push_back(set_to_none);
    return allow;
  });
  optimizer.zero_grad();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));
  allow = true;
  optimizer.zero_grad(false);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0.0f, 0.0f}));
  optimizer.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  EXPECT_EQ(told, (std::vector<bool>{true, false, true}));
  EXPECT_EMBER_ERROR(optimizer.register_step_pre_hook(nullptr), "the hook is empty");
  EXPECT_EMBER_ERROR(optimizer.register_zero_grad_pre_hook(nullptr), "the hook is empty");
}

TEST(SchedulerHooks, AStepPreHookReturningFalseLeavesTheScheduleWhereItWas) {
  Tensor w = leaf_with_grad(1.0, 1.0);
  optim::SGD optimizer({w}, {.lr = 1.0});
  optim::StepLR scheduler(optimizer, /*step_size=*/1, /*gamma=*/0.5);
  // Step the schedule only after a real optimizer step (the Accelerator's rule).
  int64_t seen_steps = 0;
  HookId id = scheduler.register_step_pre_hook([&](optim::LRScheduler& seen) {
    EXPECT_EQ(&seen, &scheduler);
    bool stepped = optimizer.steps_taken() != seen_steps;
    seen_steps = optimizer.steps_taken();
    return stepped;
  });
  scheduler.step();
  EXPECT_EQ(scheduler.last_epoch(), 0);
  EXPECT_DOUBLE_EQ(optimizer.lr(0), 1.0);
  optimizer.step();
  scheduler.step();
  EXPECT_EQ(scheduler.last_epoch(), 1);
  EXPECT_DOUBLE_EQ(optimizer.lr(0), 0.5);
  scheduler.remove_hook(id);
  scheduler.step();
  EXPECT_DOUBLE_EQ(optimizer.lr(0), 0.25);
  EXPECT_EMBER_ERROR(scheduler.remove_hook(id), "no hook with id");
}

TEST(SchedulerHooks, SequentialLRIsGatedAsAWhole) {
  Tensor w = leaf_with_grad(1.0, 1.0);
  optim::SGD optimizer({w}, {.lr = 1.0});
  auto first = std::make_shared<optim::StepLR>(optimizer, 1, 0.5);
  auto second = std::make_shared<optim::ExponentialLR>(optimizer, 0.1);
  optim::SequentialLR scheduler(optimizer, {first, second}, {2});
  bool allow = false;
  scheduler.register_step_pre_hook([&](optim::LRScheduler&) { return allow; });
  scheduler.step();
  EXPECT_EQ(scheduler.last_epoch(), 0);
  allow = true;
  scheduler.step();
  scheduler.step();
  EXPECT_EQ(scheduler.last_epoch(), 2);
  EXPECT_DOUBLE_EQ(optimizer.lr(0), 1.0);  // the second schedule restarts at its epoch 0
}

}  // namespace
}  // namespace ember::testing
