// The Accelerator. Multi-process behaviour on real processes (scenarios in
// workers/accelerator_scenarios.cpp, 2 and 3 processes): accumulation equals
// a larger batch, fp16 overflow skipped everywhere, gather_for_metrics,
// sharding modes and the collectives. In this process (one process, no
// launcher): the hooks prepare() installs, mixed precision really running
// the low-precision GEMM, the fp16 scaler, clipping, lifetimes and errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "distributed/accelerator/accelerator.h"
#include "distributed/amp/grad_scaler.h"
#include "distributed/process_runner.h"
#include "support/test_support.h"

namespace ember {
namespace {

using std::chrono::seconds;
using test::launch;
using test::ProcessResult;
namespace F = nn::functional;
using test::expect_clean_success;

ProcessResult run_processes(int processes, const std::string& scenario, const std::vector<std::string>& args = {}) {
  return launch({"--nproc-per-node", std::to_string(processes)}, scenario, args, seconds(90));
}

// --- Several processes --------------------------------------------------------

TEST(AcceleratorProcesses, AccumulationEqualsOneStepOnAKTimesLargerBatch) {
  expect_clean_success(run_processes(2, "accelerator_accumulation_matches_large_batch", {"3", "4"}));
  expect_clean_success(run_processes(3, "accelerator_accumulation_matches_large_batch", {"2", "4"}));
  expect_clean_success(run_processes(1, "accelerator_accumulation_matches_large_batch", {"4", "3"}));
}

// The same scenarios under ZeRO (EMBER_STRATEGY, as `ember launch
// --strategy` sets it), every Linear a unit: accumulation through no_sync,
// the fp16 overflow agreed across ranks on the optimizer's pieces, bf16
// autocast and forwards with two inputs or two outputs, each equal to one
// process (Note [ZeRO stages]).
TEST(AcceleratorProcesses, ZeroStrategiesThroughTheAccelerator) {
  for (const char* strategy : {"zero1", "zero2", "zero3"}) {
    SCOPED_TRACE(strategy);
    const std::vector<std::string> env{std::string("EMBER_STRATEGY=") + strategy, "EMBER_WRAP_MIN_NUM_PARAMS=50"};
    auto run = [&](int processes, const std::string& scenario, const std::vector<std::string>& args) {
      expect_clean_success(
          launch({"--nproc-per-node", std::to_string(processes)}, scenario, args, seconds(90), env));
    };
    run(2, "accelerator_accumulation_matches_large_batch", {"3", "4"});
    run(3, "accelerator_fp16_overflow_skips_everywhere", {});
    run(2, "accelerator_fp16_clip_each_of_two_models", {});
    run(2, "module_call_matches_single_process", {"masked", "bf16"});
    run(3, "module_call_matches_single_process", {"loss", "no"});
  }
  // Activation checkpointing of the units (fsdp_activation_checkpointing)
  // changes what is stored, not the result.
  expect_clean_success(launch({"--nproc-per-node", "2"}, "module_call_matches_single_process", {"masked", "no"},
                              seconds(90),
                              {"EMBER_STRATEGY=zero3", "EMBER_WRAP_MIN_NUM_PARAMS=50", "EMBER_ACTIVATION_CHECKPOINTING=true"}));
}

TEST(AcceleratorProcesses, Fp16OverflowSkipsTheSameStepAndBacksOffEverywhere) {
  expect_clean_success(run_processes(2, "accelerator_fp16_overflow_skips_everywhere"));
  expect_clean_success(run_processes(3, "accelerator_fp16_overflow_skips_everywhere"));
}

TEST(AcceleratorProcesses, GatherForMetricsCountsEachSampleOnce) {
  // 3 processes, batches of 4: 11 samples need one padded round; 3 samples fewer than a round.
  expect_clean_success(run_processes(3, "accelerator_gather_for_metrics_counts_each_sample_once", {"11", "4", "even"}));
  expect_clean_success(run_processes(3, "accelerator_gather_for_metrics_counts_each_sample_once", {"3", "4", "even"}));
  expect_clean_success(run_processes(2, "accelerator_gather_for_metrics_counts_each_sample_once", {"13", "2", "even"}));
}

TEST(AcceleratorProcesses, EveryProcessSeesTheSameOrderInTheEpochTheUserSet) {
  expect_clean_success(run_processes(2, "accelerator_sampler_orders"));
}

TEST(AcceleratorProcesses, UnevenBatchesCoverTheDataWithoutPadding) {
  expect_clean_success(run_processes(3, "accelerator_gather_for_metrics_counts_each_sample_once", {"11", "2", "uneven"}));
}

TEST(AcceleratorProcesses, SplitBatchesCutsEachGlobalBatch) {
  expect_clean_success(run_processes(2, "accelerator_split_batches"));
  expect_clean_success(run_processes(3, "accelerator_split_batches"));
}

TEST(AcceleratorProcesses, CollectivesAndGuards) {
  expect_clean_success(run_processes(2, "accelerator_collectives"));
  expect_clean_success(run_processes(3, "accelerator_collectives"));
}

// --- One process ----------------------------------------------------------------

data::TensorDataset make_dataset(int64_t size) {
  Generator generator(3);
  return data::TensorDataset(randn({size, 6}, {}, &generator),
                             randint(0, 3, {size}, {.dtype = DType::i64}, &generator));
}

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(1);
  return std::make_shared<nn::Sequential>(nn::Linear(6, 16), nn::ReLU(), nn::Linear(16, 3));
}

// Models whose forward is not one tensor in, one out (scenarios in
// workers/module_call_scenarios.cpp): (input, mask) and (logits, loss), on 2
// and 3 processes, f32 and bf16 autocast, equal one process on the global
// batch, with every rank's parameters bit-identical.
TEST(Accelerator, ModelTakingInputAndMaskEqualsOneProcess) {
  for (int processes : {2, 3}) {
    SCOPED_TRACE(processes);
    expect_clean_success(run_processes(processes, "module_call_matches_single_process", {"masked", "no"}));
    expect_clean_success(run_processes(processes, "module_call_matches_single_process", {"masked", "bf16"}));
  }
}

TEST(Accelerator, ModelReturningLogitsAndLossEqualsOneProcess) {
  for (int processes : {2, 3}) {
    SCOPED_TRACE(processes);
    expect_clean_success(run_processes(processes, "module_call_matches_single_process", {"loss", "no"}));
    expect_clean_success(run_processes(processes, "module_call_matches_single_process", {"loss", "bf16"}));
  }
}

TEST(Accelerator, DirectForwardIsRefusedAcrossProcesses) {
  expect_clean_success(run_processes(2, "module_call_direct_forward_is_refused"));
}

// One process, bf16: no DDP, so the Accelerator's own gradient check refuses
// a forward that ran without autocast (mutation caught: not installing the
// check, or resetting it anywhere but the optimizer step).
TEST(Accelerator, DirectForwardWithoutAutocastIsRefusedInOneProcess) {
  Accelerator accelerator({.mixed_precision = "bf16"});
  manual_seed(3);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(6, 8), nn::Tanh(), nn::Linear(8, 3));
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  Tensor inputs = randn({4, 6});
  Tensor targets = randint(0, 3, {4});
  auto loss_of = [&](const Tensor& logits) { return F::cross_entropy(logits, targets); };

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

// A GAN's order: G's forward, D's step, then the backward into G. Any
// optimizer's step reset every model's call, so one bf16 process refused
// this loop (two processes and Accelerate take it). Mutation caught:
// forget_calls_of_models_updated_by resetting every model.
TEST(Accelerator, AnotherModelsStepKeepsAModelsCall) {
  Accelerator accelerator({.mixed_precision = "bf16"});
  manual_seed(4);
  auto generator = std::make_shared<nn::Linear>(3, 3);
  auto discriminator = std::make_shared<nn::Linear>(3, 1);
  optim::SGD generator_optimizer(generator->parameters(), {.lr = 0.1});
  optim::SGD discriminator_optimizer(discriminator->parameters(), {.lr = 0.1});
  accelerator.prepare(generator, discriminator, generator_optimizer, discriminator_optimizer);
  Tensor real = randn({4, 3}), noise = randn({4, 3});
  discriminator_optimizer.zero_grad();
  Tensor fake = (*generator)(noise);
  accelerator.backward(mean((*discriminator)(real)) - mean((*discriminator)(fake.detach())));
  discriminator_optimizer.step();
  generator_optimizer.zero_grad();
  accelerator.backward(-mean((*discriminator)(fake)));
  EXPECT_TRUE(generator->weight.grad().defined());
  generator_optimizer.step();
  // The message names the model by its place among the prepared ones.
  generator_optimizer.zero_grad();
  EXPECT_EMBER_ERROR(accelerator.backward(mean(generator->forward(noise))),
                     "of prepared model 0 (Linear) got a gradient");
}

TEST(Accelerator, OneProcessWithoutALauncher) {
  Accelerator accelerator;
  EXPECT_EQ(accelerator.num_processes(), 1);
  EXPECT_EQ(accelerator.process_index(), 0);
  EXPECT_TRUE(accelerator.is_main_process());
  EXPECT_TRUE(accelerator.is_local_main_process());
  EXPECT_EQ(accelerator.distributed_type(), DistributedType::no);
  EXPECT_EQ(accelerator.device(), kCPU);
  EXPECT_EQ(accelerator.mixed_precision(), "no");
  EXPECT_EQ(accelerator.process_group(), nullptr);
  EXPECT_EQ(accelerator.scaler(), nullptr);
  EXPECT_TRUE(accelerator.sync_gradients());
  // Collectives are the identity.
  Tensor t = from_vector<float>({1, 2, 3});
  EXPECT_TRUE(testing::all_close(accelerator.gather(t), t));
  EXPECT_TRUE(testing::all_close(accelerator.reduce(t, "mean"), t));
  EXPECT_EQ(accelerator.gather(scalar_tensor(4.0, {})).shape(), Shape{1});
  EXPECT_EQ(accelerator.split_between_processes(std::vector<int>{1, 2, 3}), (std::vector<int>{1, 2, 3}));
  EXPECT_EMBER_ERROR(accelerator.reduce(t, "median"), "unknown reduction 'median'");
  // The mean of integers failed on several processes only, inside the
  // collective; it is refused here too, naming reduce and what to do.
  EXPECT_EMBER_ERROR(accelerator.reduce(from_vector<int64_t>({1}), "mean"),
                     "Accelerator::reduce: \"mean\" needs a floating tensor, got int64 [1]; reduce with \"sum\"");
  EXPECT_EMBER_ERROR(accelerator.broadcast(t, 1), "from_process 1 is not a process index");
  EXPECT_EMBER_ERROR(accelerator.pad_across_processes(t, 2), "dim 2 is out of range");
  accelerator.wait_for_everyone();
}

// With k = 3 over 7 batches: the optimizer steps after batches 3, 6 and 7
// (the data's end), zero_grad clears only then, and the scheduler steps once
// per real optimizer step.
TEST(Accelerator, AccumulationGatesTheOptimizerAndTheScheduler) {
  Accelerator accelerator({.gradient_accumulation_steps = 3});
  data::TensorDataset dataset = make_dataset(14);
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  optim::StepLR scheduler(optimizer, 1, 0.5);
  data::DataLoader loader(dataset, {.batch_size = 2});
  accelerator.prepare(model, optimizer, loader, scheduler);
  std::vector<bool> syncs;
  for (auto& [inputs, targets] : loader) {
    auto step = accelerator.accumulate(model);
    accelerator.backward(F::cross_entropy((*model)(inputs), targets));
    syncs.push_back(accelerator.sync_gradients());
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
    EXPECT_EQ(model->parameters()[0].grad().defined(), !accelerator.sync_gradients());
  }
  EXPECT_EQ(syncs, (std::vector<bool>{false, false, true, false, false, true, true}));
  EXPECT_EQ(optimizer.steps_taken(), 3);
  EXPECT_EQ(scheduler.last_epoch(), 3);
  EXPECT_DOUBLE_EQ(optimizer.lr(0), 0.1 / 8);
}

// The scheduler stepped only when its optimizer had stepped since its last
// step, so a second call per iteration and a call at each epoch's start
// (before the optimizer's first step) did nothing, silently; Accelerate
// steps both. Mutation caught: the hook gating on steps_taken() (lr 0.5 and
// 1 - 0.5 - 0.25 instead of 0.25 and 0.5 - 0.25 - 0.125).
TEST(Accelerator, ASchedulerStepsOnEveryCallOutsideAccumulation) {
  Accelerator accelerator;
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 1.0});
  optim::StepLR twice(optimizer, 1, 0.5);
  accelerator.prepare(model, optimizer, twice);
  optimizer.step();
  twice.step();
  twice.step();
  EXPECT_DOUBLE_EQ(optimizer.lr(0), 0.25);

  auto other = make_model();
  optim::SGD epochs_optimizer(other->parameters(), {.lr = 1.0});
  optim::StepLR at_epoch_start(epochs_optimizer, 1, 0.5);
  accelerator.prepare(other, epochs_optimizer, at_epoch_start);
  std::vector<double> lrs;
  for (int epoch = 0; epoch < 3; ++epoch) {
    at_epoch_start.step();
    lrs.push_back(epochs_optimizer.lr(0));
    epochs_optimizer.step();
  }
  EXPECT_EQ(lrs, (std::vector<double>{0.5, 0.25, 0.125}));
}

// An evaluation loop inside a training loop: once it ends, the training
// loader is the data again (Accelerate's dataloader_references). Catches:
// the evaluation loader's last batch left as the current one, which made the
// next training batch sync and step (syncs . S . . S ... instead of . . S).
TEST(Accelerator, AnInnerLoopEndingLeavesTheOuterLoopsAccumulation) {
  Accelerator accelerator({.gradient_accumulation_steps = 3});
  data::TensorDataset train = make_dataset(12), evaluation = make_dataset(5);
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  data::DataLoader train_loader(train, {.batch_size = 2}), evaluation_loader(evaluation, {.batch_size = 2});
  accelerator.prepare(model, optimizer, train_loader, evaluation_loader);
  std::vector<bool> syncs;
  int64_t batch = 0;
  for (auto& [inputs, targets] : train_loader) {
    if (batch++ == 1) {
      NoGradGuard no_grad;
      for (auto& evaluation_batch : evaluation_loader) (void)(*model)(evaluation_batch.input);
    }
    auto step = accelerator.accumulate(model);
    accelerator.backward(F::cross_entropy((*model)(inputs), targets));
    syncs.push_back(accelerator.sync_gradients());
    optimizer.step();
    optimizer.zero_grad();
  }
  EXPECT_EQ(syncs, (std::vector<bool>{false, false, true, false, false, true}));
  EXPECT_EQ(optimizer.steps_taken(), 2);
}

// A loader made, prepared and destroyed per evaluation is no part of a later
// checkpoint. Catches: save_state reading the destroyed loader (a
// segmentation fault), and load_state counting it.
TEST(Accelerator, SaveAndLoadStateAfterAPreparedLoaderIsGone) {
  testing::ScratchDirectory directory;
  Accelerator accelerator;
  data::TensorDataset dataset = make_dataset(4);
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  {
    auto evaluation = std::make_unique<data::DataLoader>(dataset, data::DataLoaderOptions{.batch_size = 2});
    accelerator.prepare(*evaluation);
    for (auto& batch : *evaluation) (void)accelerator.gather_for_metrics(batch.target);
  }
  const std::filesystem::path saved = accelerator.save_state(directory.path() / "after_evaluation");
  accelerator.load_state(saved);
}

// Accumulating k micro-batches (loss / k each) gives the gradient of their
// union's mean loss: one step on the k-times larger batch.
TEST(Accelerator, AccumulatedGradientsEqualTheLargeBatchGradient) {
  Accelerator accelerator({.gradient_accumulation_steps = 4});
  data::TensorDataset dataset = make_dataset(16);
  auto model = make_model(), reference = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.5});
  optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.5});
  data::DataLoader loader(dataset, {.batch_size = 4}), big(dataset, {.batch_size = 16});
  accelerator.prepare(model, optimizer, loader);
  for (auto& [inputs, targets] : loader) {
    auto step = accelerator.accumulate(model);
    accelerator.backward(F::cross_entropy((*model)(inputs), targets));
    optimizer.step();
    optimizer.zero_grad();
  }
  for (auto& [inputs, targets] : big) {
    F::cross_entropy((*reference)(inputs), targets).backward();
    reference_optimizer.step();
  }
  for (size_t i = 0; i < model->parameters().size(); ++i)
    EXPECT_TRUE(testing::all_close(model->parameters()[i], reference->parameters()[i], 1e-5, 1e-6));
}

// retain_graph and create_graph reach the loss's backward, as Accelerate's
// keyword arguments do: a second backward through the same graph adds the
// same (divided) gradient again, and create_graph leaves .grad
// differentiable. Mutation caught: the options not passed on (the second
// backward refused, the grads constants).
TEST(Accelerator, BackwardTakesRetainGraphAndCreateGraph) {
  Accelerator accelerator({.gradient_accumulation_steps = 2});
  data::TensorDataset dataset = make_dataset(4);
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.5});
  data::DataLoader loader(dataset, {.batch_size = 4});
  accelerator.prepare(model, optimizer, loader);
  for (auto& [inputs, targets] : loader) {
    auto step = accelerator.accumulate(model);
    (void)targets;
    const Tensor out = (*model)(inputs);
    Tensor loss = mean(out * out);  // cross_entropy's fused gradient has no gradient of its own
    Tensor expected = autograd::grad({loss / 2.0}, {model->parameters()[0]}, {}, true)[0];
    accelerator.backward(loss, /*retain_graph=*/true);
    accelerator.backward(loss, std::nullopt, /*create_graph=*/true);
    const Tensor& grad = model->parameters()[0].grad();
    EXPECT_TRUE(testing::all_close(grad.detach(), expected * 2.0, 1e-6, 1e-7));
    EXPECT_TRUE(grad.requires_grad());
    optimizer.zero_grad();
  }
}

// Accelerate wraps model.forward in autocast, so hooks on the model run
// outside it: a forward hook sees the f32 outputs, and what it computes is
// not autocast (hooks registered before or after prepare alike). Catches:
// the autocast wrapper registered around the whole call (the hooks saw
// autocast on and bf16 outputs), or the outputs converted after the hooks.
TEST(Accelerator, ForwardHooksOnAModelRunOutsideAutocast) {
  Accelerator accelerator({.mixed_precision = "bf16"});
  auto model = make_model();
  struct Seen {
    bool autocast = true;
    DType output = DType::bf16, product = DType::bf16;
  };
  Seen before_prepare, after_prepare;
  auto watcher = [](Seen& seen) {
    return [&seen](nn::ForwardCall& call) {
      seen.autocast = is_autocast_enabled(DeviceType::cpu);
      seen.output = call.outputs.at(0)->dtype();
      seen.product = matmul(*call.outputs[0], call.outputs[0]->transpose(0, 1)).dtype();
    };
  };
  model->register_forward_hook(watcher(before_prepare));
  accelerator.prepare(model);
  model->register_forward_hook(watcher(after_prepare));
  bool pre_hook_autocast = true;
  model->register_forward_pre_hook([&](nn::ForwardCall&) { pre_hook_autocast = is_autocast_enabled(DeviceType::cpu); });
  KernelCallCounter counter;
  (*model)(randn({5, 6}));
  EXPECT_EQ(counter.calls("matmul", DeviceType::cpu, DType::bf16), 2);  // the forward still ran in bf16
  for (const Seen* seen : {&before_prepare, &after_prepare}) {
    EXPECT_FALSE(seen->autocast);
    EXPECT_EQ(seen->output, DType::f32);
    EXPECT_EQ(seen->product, DType::f32);
  }
  EXPECT_FALSE(pre_hook_autocast);
}

TEST(Accelerator, Bf16ModelRunsTheBf16GemmAndReturnsF32) {
  Accelerator accelerator({.mixed_precision = "bf16"});
  auto model = make_model();
  accelerator.prepare(model);
  Tensor inputs = randn({5, 6});
  Tensor logits;
  {
    KernelCallCounter counter;
    logits = (*model)(inputs);
    EXPECT_EQ(counter.calls("matmul", DeviceType::cpu, DType::bf16), 2);
    EXPECT_EQ(counter.calls("matmul", DeviceType::cpu, DType::f32), 0);
  }
  EXPECT_EQ(logits.dtype(), DType::f32);
  EXPECT_FALSE(is_autocast_enabled(DeviceType::cpu));  // only inside the forward
  F::cross_entropy(logits, randint(0, 3, {5})).backward();
  for (const Tensor& parameter : model->parameters()) {
    EXPECT_EQ(parameter.dtype(), DType::f32);  // master weights stay f32
    EXPECT_EQ(parameter.grad().dtype(), DType::f32);
  }
  // Close to the f32 model's output (bf16 keeps 8 bits of mantissa).
  EXPECT_TRUE(testing::all_close(logits, model->forward(inputs), 5e-2, 5e-2));
  {
    auto autocast = accelerator.autocast();
    EXPECT_TRUE(is_autocast_enabled(DeviceType::cpu));
    EXPECT_EQ(autocast_dtype(DeviceType::cpu), DType::bf16);
  }
}

TEST(Accelerator, Fp16ScalesTheLossAndSkipsAStepWithInfGradients) {
  Accelerator accelerator({.mixed_precision = "fp16", .scaler = {.init_scale = 256, .growth_interval = 2}});
  ASSERT_NE(accelerator.scaler(), nullptr);
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  Tensor inputs = randn({4, 6}), targets = randint(0, 3, {4});
  std::vector<double> scales;
  for (int step = 0; step < 4; ++step) {
    Tensor loss = F::cross_entropy((*model)(inputs), targets);
    if (step == 1) loss = loss * std::numeric_limits<double>::infinity();
    // The scaled loss reaches the gradients: unscaled, they are the plain ones.
    accelerator.backward(loss);
    Tensor before = model->parameters()[0].clone();
    optimizer.step();
    optimizer.zero_grad();
    EXPECT_EQ(accelerator.optimizer_step_was_skipped(), step == 1);
    EXPECT_EQ(testing::all_close(model->parameters()[0], before, 0, 0), step == 1) << "step " << step;
    scales.push_back(accelerator.scaler()->get_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{256, 128, 128, 256}));
}

// Note [One scaler update per iteration]: the scaler was updated inside each prepared
// optimizer's step, so with two optimizers the second was unscaled by a scale the
// first's update had changed (its gradient came out 1/2 of the true one with
// growth_interval 1), or, after clip_grad_norm_ unscaled both, unscaled twice (1/S).
// Now one update per iteration: both optimizers apply the true gradient and the
// scale grows once. Mutation caught: update() back in the step hook.
TEST(Accelerator, Fp16WithTwoOptimizersUnscalesEachOnceAndUpdatesOnce) {
  for (bool clip : {false, true}) {
    Accelerator accelerator({.mixed_precision = "fp16", .scaler = {.init_scale = 1024, .growth_interval = 1}});
    auto first = std::make_shared<nn::Linear>(1, 1, nn::LinearOptions{.bias = false});
    auto second = std::make_shared<nn::Linear>(1, 1, nn::LinearOptions{.bias = false});
    nn::init::zeros_(first->weight);
    nn::init::zeros_(second->weight);
    optim::SGD first_sgd(first->parameters(), {.lr = 1.0}), second_sgd(second->parameters(), {.lr = 1.0});
    accelerator.prepare(first, second, first_sgd, second_sgd);
    for (int iteration = 1; iteration <= 2; ++iteration) {
      Tensor x = ones({1, 1});
      accelerator.backward(sum((*first)(x)) + sum((*second)(x)));  // d/dw = 1 for each weight
      if (clip) accelerator.clip_grad_norm_({first->weight, second->weight}, 100.0);
      first_sgd.step();
      second_sgd.step();
      first_sgd.zero_grad();
      second_sgd.zero_grad();
      EXPECT_EQ(first->weight.item<float>(), -float(iteration)) << "clip " << clip;
      EXPECT_EQ(second->weight.item<float>(), -float(iteration)) << "clip " << clip;
      EXPECT_EQ(accelerator.scaler()->get_scale(), 1024.0 * (1 << iteration)) << "clip " << clip;  // once per iteration
    }
  }
}

// A bias-free 1x1 linear with a zero weight: its weight's gradient on ones is
// 1, and SGD with lr 1 moves it by exactly that.
std::shared_ptr<nn::Linear> zero_linear() {
  auto linear = std::make_shared<nn::Linear>(1, 1, nn::LinearOptions{.bias = false});
  nn::init::zeros_(linear->weight);
  return linear;
}

// Two zero linears a and b with an SGD (lr 1) each, prepared on an Accelerator
// of `precision` whose scale starts at 1024 and grows at every update.
struct TwoLinears {
  explicit TwoLinears(const std::string& precision)
      : accelerator({.mixed_precision = precision, .scaler = {.init_scale = 1024, .growth_interval = 1}}) {
    accelerator.prepare(a, b, a_sgd, b_sgd);
  }
  Tensor a_of(const Tensor& x) { return sum((*a)(x)); }
  Tensor b_of(const Tensor& x) { return sum((*b)(x)); }
  double scale() const { return accelerator.scaler() ? accelerator.scaler()->get_scale() : 0.0; }

  Accelerator accelerator;
  std::shared_ptr<nn::Linear> a = zero_linear(), b = zero_linear();
  optim::SGD a_sgd{a->parameters(), {.lr = 1.0}};
  optim::SGD b_sgd{b->parameters(), {.lr = 1.0}};
};

// Note [One scaler update per iteration]: backward(l1), a.step(), backward(l2),
// b.step(). The second backward used to update the scaler (a had stepped)
// while b still held gradients of the old scale: b's gradient was
// S*g1 + 2S*g2, unscaled by 2S (b = -3.5 instead of -4 after one iteration),
// and the scale moved twice per iteration. Now the update waits for b's step.
// Mutation caught: the update at the start of backward() made unconditional
// again (`detail::update_scaler_if_pending(*state_)` without the
// scaled_gradients_await_a_step test) -> the scale is 8192 after two
// iterations instead of 4096 (the weights stay right: the rescale of held
// gradients covers them; without it too, b is -3.5 after one).
TEST(Accelerator, Fp16InterleavedBackwardsAndStepsEqualF32) {
  TwoLinears fp16("fp16");
  Tensor x = ones({1, 1});
  for (int iteration = 1; iteration <= 2; ++iteration) {
    fp16.accelerator.backward(fp16.a_of(x) + fp16.b_of(x));  // d/da = d/db = 1
    fp16.a_sgd.step();
    fp16.accelerator.backward(3.0 * fp16.b_of(x));  // d/db = 3
    fp16.b_sgd.step();
    fp16.a_sgd.zero_grad();
    fp16.b_sgd.zero_grad();
    EXPECT_EQ(fp16.a->weight.item<float>(), -1.0f * float(iteration));  // as f32 training gives
    EXPECT_EQ(fp16.b->weight.item<float>(), -4.0f * float(iteration));
    EXPECT_EQ(fp16.scale(), 1024.0 * (1 << iteration));  // one update per iteration
  }
}

// b steps every second iteration on the gradients of two, a every iteration:
// the update at a's second step changes the scale while b holds S*g of the
// old scale, so b's gradients are brought to the new scale with it.
// Mutation caught: the rescale_gradients call removed from
// detail::update_scaler_if_pending -> after two iterations a is -1.5 and b -1
// instead of f32's -2 and -2.
TEST(Accelerator, Fp16GradientsHeldAcrossAnUpdateAreRescaled) {
  TwoLinears f32("no"), fp16("fp16");
  Tensor x = ones({1, 1});
  for (int iteration = 1; iteration <= 4; ++iteration) {
    for (TwoLinears* run : {&f32, &fp16}) {
      run->accelerator.backward(run->a_of(x) + run->b_of(x));
      run->a_sgd.step();
      run->a_sgd.zero_grad();
      if (iteration % 2 == 0) {
        run->b_sgd.step();
        run->b_sgd.zero_grad();
      }
    }
    EXPECT_EQ(fp16.a->weight.item<float>(), f32.a->weight.item<float>()) << "iteration " << iteration;
    EXPECT_EQ(fp16.b->weight.item<float>(), f32.b->weight.item<float>()) << "iteration " << iteration;
  }
  EXPECT_EQ(f32.b->weight.item<float>(), -4.0f);
  EXPECT_EQ(fp16.scale(), 1024.0 * 16);  // four iterations, four updates
}

// A GAN's order: D's backward, D clipped and stepped, then G's backward and
// step. Clipping unscaled every optimizer, G's too while its gradients were
// not there yet; G's step then skipped its unscale and stepped on gradients
// times the scale (b = -3072 instead of -3). Now a clip unscales the
// optimizers of the clipped parameters only. Mutation caught: steps_them
// always true in unscale_gradients_of -> b is -3 * 1024.
TEST(Accelerator, Fp16ClipOfOneModelLeavesAnotherModelsLaterGradientsToItsStep) {
  TwoLinears f32("no"), fp16("fp16");
  Tensor x = ones({1, 1});
  for (int iteration = 1; iteration <= 2; ++iteration) {
    for (TwoLinears* run : {&f32, &fp16}) {
      run->accelerator.backward(run->a_of(x));
      run->accelerator.clip_grad_norm_(run->a->parameters(), 1e9);
      run->a_sgd.step();
      run->accelerator.backward(3.0 * run->b_of(x));
      run->b_sgd.step();
      run->a_sgd.zero_grad();
      run->b_sgd.zero_grad();
    }
    EXPECT_EQ(fp16.a->weight.item<float>(), f32.a->weight.item<float>()) << "iteration " << iteration;
    EXPECT_EQ(fp16.b->weight.item<float>(), f32.b->weight.item<float>()) << "iteration " << iteration;
  }
  EXPECT_EQ(f32.b->weight.item<float>(), -6.0f);
}

// A second step without a new backward unscaled the same gradients again
// (divided by S^2: the parameter moved by 1/1024 more). It is refused, as
// GradScaler::step refuses it. Mutation caught: the check_gradients_are_scaled
// call removed from the step hook -> no error, and the weight moves again.
TEST(Accelerator, Fp16SecondStepWithoutABackwardIsRefused) {
  Accelerator accelerator({.mixed_precision = "fp16", .scaler = {.init_scale = 1024}});
  auto model = zero_linear();
  optim::SGD optimizer(model->parameters(), {.lr = 1.0});
  accelerator.prepare(model, optimizer);
  accelerator.backward(sum((*model)(ones({1, 1}))));
  optimizer.step();
  EXPECT_EQ(model->weight.item<float>(), -1.0f);
  EXPECT_EMBER_ERROR(optimizer.step(),
                     "SGD.step(): with mixed_precision \"fp16\" each step needs an Accelerator::backward() since the "
                     "optimizer's last step() or zero_grad(); its gradients are not scaled by the loss scale 1024");
  EXPECT_EQ(model->weight.item<float>(), -1.0f);
  optimizer.zero_grad();
  accelerator.backward(sum((*model)(ones({1, 1}))));  // a new iteration steps again
  optimizer.step();
  EXPECT_EQ(model->weight.item<float>(), -2.0f);
}

// Accelerate's GradScalerKwargs(enabled=False): fp16 autocast without loss
// scaling. The first step used to fail with "unscale_() has not been called".
// Mutation caught: active_scaler returning the disabled scaler -> that error.
TEST(Accelerator, Fp16WithADisabledScalerTrainsWithoutLossScaling) {
  Accelerator accelerator({.mixed_precision = "fp16", .scaler = {.enabled = false}});
  auto model = zero_linear();
  optim::SGD optimizer(model->parameters(), {.lr = 1.0});
  accelerator.prepare(model, optimizer);
  for (int iteration = 1; iteration <= 2; ++iteration) {
    accelerator.backward(sum((*model)(ones({1, 1}))));
    EXPECT_EQ(model->weight.grad().item<float>(), 1.0f);  // not scaled
    accelerator.clip_grad_norm_(model->parameters(), 100.0);
    optimizer.step();
    optimizer.zero_grad();
    EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
    EXPECT_EQ(model->weight.item<float>(), -float(iteration));
  }
}

// A loop that catches the scaler's floor error and skips the batch goes on:
// the error used to leave the optimizer marked as stepped, so every later
// backward() threw "no inf checks were recorded". Mutation caught: the
// stepped flags cleared after scaler->update() instead of before -> that error.
TEST(Accelerator, Fp16FloorErrorLetsALoopSkipTheBatch) {
  Accelerator accelerator({.mixed_precision = "fp16", .scaler = {.init_scale = 2}});
  auto model = zero_linear();
  optim::SGD optimizer(model->parameters(), {.lr = 1.0});
  accelerator.prepare(model, optimizer);
  for (int iteration = 0; iteration < 2; ++iteration) {  // NaN losses: 2 -> 1, then the floor
    accelerator.backward(sum((*model)(ones({1, 1}))) * std::numeric_limits<double>::quiet_NaN());
    if (iteration == 0) optimizer.step();
    if (iteration == 1) EXPECT_EMBER_ERROR(optimizer.step(), "inf/NaN gradients with the scale at its floor");
    optimizer.zero_grad();
  }
  for (int iteration = 1; iteration <= 2; ++iteration) {  // healthy batches train again
    accelerator.backward(sum((*model)(ones({1, 1}))));
    optimizer.step();
    optimizer.zero_grad();
    EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
    EXPECT_EQ(model->weight.item<float>(), -float(iteration));
  }
}

// Without mixed precision accelerator.autocast() is Accelerate's nullcontext:
// the user's own autocast around it stays on, and it turns nothing on either.
// Mutation caught: returning a disabled guard -> the products inside run in f32.
TEST(Accelerator, AutocastWithoutMixedPrecisionChangesNothing) {
  Accelerator accelerator;
  Tensor a = randn({2, 2}), b = randn({2, 2});
  {
    auto nothing = accelerator.autocast();
    EXPECT_FALSE(is_autocast_enabled(DeviceType::cpu));
  }
  AutocastGuard user(DeviceType::cpu, DType::f16);
  {
    auto nothing = accelerator.autocast();
    EXPECT_TRUE(is_autocast_enabled(DeviceType::cpu));
    EXPECT_EQ(autocast_dtype(DeviceType::cpu), DType::f16);
    EXPECT_EQ(matmul(a, b).dtype(), DType::f16);
  }
  EXPECT_TRUE(is_autocast_enabled(DeviceType::cpu));
  EXPECT_EQ(autocast_dtype(DeviceType::cpu), DType::f16);
}

TEST(Accelerator, ClippingUnscalesFp16GradientsOnceAndRefusesAccumulationSteps) {
  Accelerator accelerator({.mixed_precision = "fp16", .gradient_accumulation_steps = 2,
                           .scaler = {.init_scale = 1024}});
  auto model = make_model(), reference = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  Tensor inputs = randn({4, 6}), targets = randint(0, 3, {4});
  {
    auto step = accelerator.accumulate(model);  // batch 1 of 2
    accelerator.backward(F::cross_entropy((*model)(inputs), targets));
    EXPECT_EMBER_ERROR(accelerator.clip_grad_norm_(model->parameters(), 1.0), "called on an accumulation step");
  }
  auto step = accelerator.accumulate(model);  // batch 2: synchronised
  accelerator.backward(F::cross_entropy((*model)(inputs), targets));
  Tensor norm = accelerator.clip_grad_norm_(model->parameters(), 1e9);
  // The norm is the unscaled gradient's: the reference's on the same two batches.
  for (int i = 0; i < 2; ++i) (F::cross_entropy((*reference)(inputs), targets) / 2.0).backward();
  Tensor reference_norm = optim::clip_grad_norm_(reference->parameters(), 1e9);
  EXPECT_NEAR(norm.item<double>(), reference_norm.item<double>(), 1e-2 * reference_norm.item<double>());
  optimizer.step();  // unscale_ is not repeated (it would throw)
  EXPECT_FALSE(accelerator.optimizer_step_was_skipped());
}

TEST(Accelerator, PrepareRejectsObjectsPreparedTwice) {
  Accelerator accelerator;
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  data::TensorDataset dataset = make_dataset(4);
  data::DataLoader loader(dataset, {.batch_size = 2});
  accelerator.prepare(model, optimizer, loader);
  EXPECT_EMBER_ERROR(accelerator.prepare(model), "was prepared already");
  EXPECT_EMBER_ERROR(accelerator.prepare(optimizer), "was prepared already");
  EXPECT_EMBER_ERROR(accelerator.prepare(loader), "was prepared already");
  auto other = make_model();
  EXPECT_EMBER_ERROR((void)accelerator.accumulate(other), "was not prepared");
}

TEST(Accelerator, TrackersWriteUnderTheProjectDirectory) {
  testing::ScratchDirectory scratch;
  Accelerator accelerator({.project_dir = scratch.path().string(), .log_with = {"jsonl", "csv"}});
  accelerator.init_trackers("run", {{"lr", 0.1}});
  accelerator.log({{"loss", 0.5}, {"split", "train"}}, 3);
  accelerator.end_training();
  std::ifstream jsonl(scratch.path() / "run" / "metrics.jsonl"), csv(scratch.path() / "run" / "metrics.csv");
  std::string json_line, csv_header, csv_row;
  ASSERT_TRUE(std::getline(jsonl, json_line));
  nlohmann::json record = nlohmann::json::parse(json_line);
  EXPECT_EQ(record["step"], 3);
  EXPECT_EQ(record["loss"], 0.5);
  EXPECT_EQ(record["split"], "train");
  ASSERT_TRUE(std::getline(csv, csv_header) && std::getline(csv, csv_row));
  EXPECT_EQ(csv_header, "step,time,loss,split");
  EXPECT_TRUE(csv_row.starts_with("3,")) << csv_row;
  EXPECT_TRUE(std::filesystem::exists(scratch.path() / "run" / "config.json"));
  EXPECT_EMBER_ERROR(Accelerator({.log_with = {"wandb"}}), "unknown tracker 'wandb'");
}

// Catches: log_with naming a tracker twice (its two writers overwrote each
// other's lines: 2000 logs left 34 lines); a failed init_trackers keeping the
// trackers it had made (a retry refused as "already running", and log then
// wrote one file of two); log before init_trackers or after end_training
// dropping the metrics without a word.
TEST(Accelerator, TrackersAreAllOrNoneAndLogNeedsThem) {
  testing::ScratchDirectory scratch;
  EXPECT_EMBER_ERROR(Accelerator({.project_dir = scratch.path().string(), .log_with = {"jsonl", "jsonl"}}),
                     "log_with names 'jsonl' twice");
  Accelerator accelerator({.project_dir = scratch.path().string(), .log_with = {"jsonl", "csv"}});
  EXPECT_EMBER_ERROR(accelerator.log({{"loss", 0.5}}, 1), "Accelerator::log: no tracker is running: call init_trackers");
  std::filesystem::create_directories(scratch.path() / "run" / "metrics.csv");  // in the csv tracker's way
  EXPECT_EMBER_ERROR(accelerator.init_trackers("run"), "metrics.csv");
  EXPECT_EMBER_ERROR(accelerator.log({{"loss", 0.5}}, 1), "no tracker is running");
  std::filesystem::remove(scratch.path() / "run" / "metrics.csv");
  accelerator.init_trackers("run");
  accelerator.log({{"loss", 0.5}}, 1);
  accelerator.end_training();
  EXPECT_TRUE(std::filesystem::exists(scratch.path() / "run" / "metrics.csv"));
  EXPECT_EMBER_ERROR(accelerator.log({{"loss", 0.25}}, 2), "log nothing after end_training");
}

// free_memory removes every hook: the optimizer steps on every call again.
TEST(Accelerator, FreeMemoryRemovesTheHooks) {
  Accelerator accelerator({.gradient_accumulation_steps = 4});
  auto model = make_model();
  optim::SGD optimizer(model->parameters(), {.lr = 0.1});
  accelerator.prepare(model, optimizer);
  {
    auto step = accelerator.accumulate(model);
    F::cross_entropy((*model)(randn({2, 6})), randint(0, 3, {2})).backward();
    optimizer.step();
    EXPECT_EQ(optimizer.steps_taken(), 0);
  }
  accelerator.free_memory();
  optimizer.step();
  EXPECT_EQ(optimizer.steps_taken(), 1);
}

// Prepared objects may die before the accelerator and the accelerator before
// them (ASan checks that nothing touches freed memory).
TEST(Accelerator, ObjectsAndAcceleratorMayDieInEitherOrder) {
  auto model = make_model();
  optim::SGD outliving(model->parameters(), {.lr = 0.1});
  {
    Accelerator accelerator({.gradient_accumulation_steps = 2});
    optim::SGD dies_first(model->parameters(), {.lr = 0.1});
    data::TensorDataset dataset = make_dataset(4);
    auto loader = std::make_unique<data::DataLoader>(dataset, data::DataLoaderOptions{.batch_size = 2});
    accelerator.prepare(model, outliving, dies_first, *loader);
    loader.reset();
  }
  F::cross_entropy((*model)(randn({2, 6})), randint(0, 3, {2})).backward();
  outliving.step();  // the accelerator is gone: its hook lets the step through
  EXPECT_EQ(outliving.steps_taken(), 1);
}

}  // namespace
}  // namespace ember
