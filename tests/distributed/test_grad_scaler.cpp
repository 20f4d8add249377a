// GradScaler (distributed/amp/grad_scaler.h) in one process: the exact scale
// sequence over a scripted run of clean and overflowing steps, unscaled
// gradient values, skipped steps, several optimizers, the disabled scaler,
// the floor (min_scale) that stops a run whose loss is NaN at every scale,
// state_dict round trips with PyTorch's keys, and every error. Then two real
// ranks (workers/grad_scaler_scenarios.cpp) where only one rank overflows and
// both skip the step.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "distributed/amp/grad_scaler.h"
#include "distributed/process_runner.h"
#include "support/test_support.h"

namespace ember::test {
namespace {

using distributed::GradScaler;
using distributed::GradScalerOptions;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// One parameter p = [1, 2] trained on sum(p * x): its gradient is x, scaled
// by the scaler's scale after backward.
struct OneParameter {
  Tensor parameter = from_vector<float>({1, 2}).requires_grad_();
  optim::SGD optimizer{std::vector<Tensor>{parameter}, {.lr = 0.25}};

  void backward(GradScaler& scaler, const Tensor& x) {
    optimizer.zero_grad();
    scaler.scale(sum(parameter * x)).backward();
  }
};

TEST(GradScaler, ScaleFollowsCleanAndOverflowingSteps) {
  OneParameter trained;
  GradScaler scaler({.init_scale = 8, .growth_interval = 3});
  // Each step's input, and what the scaler must do with it.
  struct Step {
    std::vector<float> x;
    bool steps;
    double scale_after;
    int64_t tracker_after;
  };
  const std::vector<Step> script = {
      {{1, 1}, true, 8, 1},     {{1, -1}, true, 8, 2},   {{2, 1}, true, 16, 0},  // the third clean step grows
      {{kInf, 1}, false, 8, 0},                                                   // overflow: back off, reset
      {{1, 1}, true, 8, 1},     {{1, 1}, true, 8, 2},    {{kNan, 1}, false, 4, 0},
      {{1, 1}, true, 4, 1},     {{1, 1}, true, 4, 2},    {{1, 1}, true, 8, 0},
  };
  for (size_t i = 0; i < script.size(); ++i) {
    const Step& step = script[i];
    std::vector<float> before = trained.parameter.to_vector<float>();
    trained.backward(scaler, from_vector(step.x));
    EXPECT_EQ(scaler.step(trained.optimizer), step.steps) << "step " << i;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), step.scale_after) << "step " << i;
    EXPECT_EQ(scaler.growth_tracker(), step.tracker_after) << "step " << i;
    std::vector<float> after = trained.parameter.to_vector<float>();
    if (step.steps) {
      // SGD with lr 0.25 on the unscaled gradient x.
      EXPECT_EQ(after, (std::vector<float>{before[0] - 0.25f * step.x[0], before[1] - 0.25f * step.x[1]}))
          << "step " << i;
    } else {
      EXPECT_EQ(after, before) << "step " << i << " was skipped and must leave the parameter alone";
    }
  }
  EXPECT_EQ(trained.optimizer.steps_taken(), 8);
}

TEST(GradScaler, UnscaleLeavesTheTrueGradients) {
  OneParameter trained;
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  Tensor loss = sum(trained.parameter * from_vector<float>({0.75, -3}));
  Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.item<float>(), loss.item<float>() * 65536.0f);
  scaled.backward();
  EXPECT_EQ(trained.parameter.grad().to_vector<float>(), (std::vector<float>{0.75f * 65536, -3.0f * 65536}));
  EXPECT_FALSE(scaler.is_unscaled(trained.optimizer));
  scaler.unscale_(trained.optimizer);
  EXPECT_TRUE(scaler.is_unscaled(trained.optimizer));
  EXPECT_FALSE(scaler.found_inf(trained.optimizer));
  EXPECT_EQ(trained.parameter.grad().to_vector<float>(), (std::vector<float>{0.75f, -3.0f}));
  EXPECT_TRUE(scaler.step(trained.optimizer));  // no second unscale
  EXPECT_EQ(trained.parameter.to_vector<float>(), (std::vector<float>{1 - 0.25f * 0.75f, 2 + 0.25f * 3}));
  scaler.update();
  EXPECT_FALSE(scaler.is_unscaled(trained.optimizer));
}

TEST(GradScaler, ScalesLowPrecisionLossesInF32) {
  GradScaler scaler({.init_scale = 1e6});
  Tensor loss = full({}, 100, {.dtype = DType::f16});
  Tensor scaled = scaler.scale(loss);  // 1e8 is far beyond f16's 65504
  EXPECT_EQ(scaled.dtype(), DType::f32);
  EXPECT_EQ(scaled.item<float>(), 1e8f);
  EXPECT_EQ(scaler.scale(full({}, 2, {.dtype = DType::f64})).dtype(), DType::f64);
}

// An f16 gradient was unscaled in f16: a gradient of 2^-26 came back 0 and
// the step went ahead, as if scaling had protected it. Refused, as PyTorch
// refuses it, before any gradient is touched. Mutation caught: unscale_
// without the f16 check (no error, the gradient 0).
TEST(GradScaler, Float16GradientsAreRefused) {
  Tensor kept = from_vector<float>({1}).requires_grad_();
  Tensor w = full({4}, 1.0, {.dtype = DType::f16}).requires_grad_();
  optim::SGD optimizer(std::vector<Tensor>{kept, w}, {.lr = 1});
  GradScaler scaler;
  scaler.scale(sum(kept) + sum(w * full({4}, std::ldexp(1.0, -20), {.dtype = DType::f16})).to(DType::f32) *
                               std::ldexp(1.0, -6))
      .backward();
  const float scaled = kept.grad().item<float>();
  EXPECT_EMBER_ERROR(scaler.unscale_(optimizer),
                     "GradScaler::unscale_: parameter 1 of param group 0 of SGD has a float16 gradient");
  EXPECT_EQ(kept.grad().item<float>(), scaled);  // untouched
}

TEST(GradScaler, ParametersWithoutGradientsAreSkipped) {
  Tensor used = from_vector<float>({1}).requires_grad_(), unused = from_vector<float>({5}).requires_grad_();
  optim::SGD optimizer(std::vector<Tensor>{used, unused}, {.lr = 1});
  GradScaler scaler({.init_scale = 4});
  scaler.scale(sum(used * 2)).backward();
  EXPECT_TRUE(scaler.step(optimizer));
  EXPECT_EQ(used.item<float>(), -1.0f);
  EXPECT_EQ(unused.item<float>(), 5.0f);
  EXPECT_FALSE(unused.grad().defined());
}

TEST(GradScaler, AnyOptimizersOverflowBacksOffOnce) {
  OneParameter first, second;
  GradScaler scaler({.init_scale = 64, .growth_interval = 1});
  first.backward(scaler, from_vector<float>({1, 1}));
  second.backward(scaler, from_vector<float>({1, kInf}));
  EXPECT_TRUE(scaler.step(first.optimizer));
  EXPECT_FALSE(scaler.step(second.optimizer));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32.0);
  EXPECT_EQ(second.parameter.to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(GradScaler, TheScaleNeverGrowsToInfinity) {
  const double largest = std::ldexp(1.0, 127);  // the largest power of two below f32's max
  OneParameter trained;
  GradScaler scaler({.init_scale = largest, .growth_interval = 1});
  trained.backward(scaler, from_vector<float>({0, 0}));
  scaler.step(trained.optimizer);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), largest);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// Note [Loss scaling across ranks]: a loss that is NaN at every scale backs
// the scale off to its floor (65536 -> 1: 16 skipped steps), and the next
// overflow there is an error instead of an eternity of skipped steps.
TEST(GradScaler, NanEveryStepBacksOffToTheFloorThenStops) {
  OneParameter trained;
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  double expected = 65536.0;
  for (int step = 1; step <= 16; ++step) {
    trained.backward(scaler, from_vector<float>({kNan, 1}));
    EXPECT_FALSE(scaler.step(trained.optimizer)) << "step " << step;
    scaler.update();
    expected /= 2;
    EXPECT_EQ(scaler.get_scale(), expected) << "step " << step;
  }
  EXPECT_EQ(scaler.get_scale(), 1.0);
  trained.backward(scaler, from_vector<float>({kNan, 1}));
  EXPECT_FALSE(scaler.step(trained.optimizer));
  EXPECT_EMBER_ERROR(scaler.update(),
                     "GradScaler::update: inf/NaN gradients with the scale at its floor (min_scale = 1), 17 steps in "
                     "a row skipped");
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(trained.optimizer.steps_taken(), 0);
  EXPECT_EQ(trained.parameter.to_vector<float>(), (std::vector<float>{1, 2}));
}

// The back-off stops at min_scale even when a factor overshoots it; clean
// steps at the floor are fine, and any overflow there is the error.
TEST(GradScaler, BackOffStopsAtMinScale) {
  OneParameter trained;
  GradScaler scaler({.init_scale = 10, .backoff_factor = 0.25, .growth_interval = 100, .min_scale = 2});
  const std::vector<std::pair<std::vector<float>, double>> script = {
      {{kInf, 1}, 2.5}, {{kInf, 1}, 2}, {{1, 1}, 2}, {{1, 1}, 2}};
  for (const auto& [x, scale_after] : script) {
    trained.backward(scaler, from_vector(x));
    scaler.step(trained.optimizer);
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), scale_after);
  }
  trained.backward(scaler, from_vector<float>({1, kInf}));
  scaler.step(trained.optimizer);
  EXPECT_EMBER_ERROR(scaler.update(), "(min_scale = 2), 1 step in a row skipped");
}

// min_scale = 0 is PyTorch's scaler: the scale falls below 1 and on.
TEST(GradScaler, MinScaleZeroTurnsTheFloorOff) {
  OneParameter trained;
  GradScaler scaler({.init_scale = 4, .min_scale = 0});
  for (int step = 0; step < 6; ++step) {
    trained.backward(scaler, from_vector<float>({kNan, 1}));
    scaler.step(trained.optimizer);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 1.0 / 16);
}

// Without a floor the scale stops where unscale_ can still divide by it: below
// 2^-128 its f32 reciprocal is inf, and the parameters became inf/NaN on the
// next clean step while found_inf stayed false. Backing off to there is the
// floor error instead. Mutation caught: the has_finite_reciprocal check in
// update() removed -> the scale reaches 2^-128 and the clean step makes the
// parameter inf.
TEST(GradScaler, MinScaleZeroStopsWhereTheReciprocalWouldOverflow) {
  OneParameter trained;
  GradScaler scaler({.init_scale = std::ldexp(1.0, -125), .min_scale = 0});
  for (int step = 0; step < 2; ++step) {
    trained.backward(scaler, from_vector<float>({kNan, 1}));
    scaler.step(trained.optimizer);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, -127));  // a subnormal f32 whose reciprocal, 2^127, is finite
  trained.backward(scaler, from_vector<float>({kNan, 1}));
  scaler.step(trained.optimizer);
  EXPECT_EMBER_ERROR(scaler.update(),
                     "inf/NaN gradients with the scale at its floor: 5.877471754111438e-39 would back off to "
                     "2.938735877055719e-39, whose float32 reciprocal is inf, 3 steps in a row skipped");
  trained.backward(scaler, from_vector<float>({1, 1}));  // a clean step at the last usable scale
  EXPECT_TRUE(scaler.step(trained.optimizer));
  EXPECT_EQ(trained.parameter.to_vector<float>(), (std::vector<float>{0.75f, 1.75f}));
}

TEST(GradScaler, ADisabledScalerOnlySteps) {
  OneParameter trained;
  GradScaler scaler({.enabled = false});
  EXPECT_FALSE(scaler.is_enabled());
  Tensor loss = sum(trained.parameter * from_vector<float>({1, kInf}));
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.unscale_(trained.optimizer);
  EXPECT_FALSE(scaler.is_unscaled(trained.optimizer));
  EXPECT_TRUE(scaler.step(trained.optimizer));  // no inf check: it steps
  EXPECT_EQ(trained.optimizer.steps_taken(), 1);
  scaler.update();
  EXPECT_EQ(scaler.state_dict(), nlohmann::json::object());
  scaler.load_state_dict({{"scale", "anything"}});  // ignored, as PyTorch's
}

TEST(GradScaler, StateDictHasPyTorchsKeysAndRoundTrips) {
  OneParameter trained;
  GradScaler scaler({.init_scale = 16, .growth_factor = 4, .backoff_factor = 0.25, .growth_interval = 5});
  for (int i = 0; i < 2; ++i) {
    trained.backward(scaler, from_vector<float>({1, 1}));
    scaler.step(trained.optimizer);
    scaler.update();
  }
  nlohmann::json state = scaler.state_dict();
  EXPECT_EQ(state, (nlohmann::json{{"scale", 16.0},
                                   {"growth_factor", 4.0},
                                   {"backoff_factor", 0.25},
                                   {"growth_interval", 5},
                                   {"_growth_tracker", 2}}));
  GradScaler restored;
  restored.load_state_dict(nlohmann::json::parse(state.dump()));
  EXPECT_EQ(restored.state_dict(), state);
  // Both continue alike: three more clean steps grow the scale by 4 on the fifth.
  OneParameter other;
  for (int i = 0; i < 3; ++i) {
    trained.backward(scaler, from_vector<float>({1, 1}));
    other.backward(restored, from_vector<float>({1, 1}));
    scaler.step(trained.optimizer), restored.step(other.optimizer);
    scaler.update(), restored.update();
    EXPECT_EQ(restored.get_scale(), scaler.get_scale());
    EXPECT_EQ(restored.growth_tracker(), scaler.growth_tracker());
  }
  EXPECT_EQ(restored.get_scale(), 64.0);
}

TEST(GradScaler, UnscalingTwiceBeforeUpdateIsAnError) {
  OneParameter trained;
  GradScaler scaler;
  trained.backward(scaler, from_vector<float>({1, 1}));
  scaler.unscale_(trained.optimizer);
  EXPECT_EMBER_ERROR(scaler.unscale_(trained.optimizer),
                     "unscale_() has already been called on this optimizer (SGD) since the last update()");
  scaler.step(trained.optimizer);
  EXPECT_EMBER_ERROR(scaler.unscale_(trained.optimizer), "has already been called");
  scaler.update();
  trained.backward(scaler, from_vector<float>({1, 1}));
  scaler.unscale_(trained.optimizer);  // a new step: allowed again
}

// step() twice before update() stepped twice on gradients unscaled once (PyTorch:
// "step() has already been called since the last update()"). Mutation caught: the
// stepped_ check removed (the second step then moves the parameter again).
TEST(GradScaler, SteppingTwiceBeforeUpdateIsAnError) {
  OneParameter trained;
  GradScaler scaler;
  trained.backward(scaler, from_vector<float>({1, 1}));
  EXPECT_TRUE(scaler.step(trained.optimizer));
  const Tensor after_one = trained.parameter.clone();
  EXPECT_EMBER_ERROR(scaler.step(trained.optimizer),
                     "GradScaler::step: step() was already called on this optimizer (SGD) since the last update()");
  EXPECT_TRUE(testing::all_close(trained.parameter, after_one, 0, 0));
  scaler.update();
  trained.backward(scaler, from_vector<float>({1, 1}));
  EXPECT_TRUE(scaler.step(trained.optimizer));  // a new iteration: allowed again
}

TEST(GradScaler, FoundInfAndUpdateNeedAnUnscaleFirst) {
  OneParameter trained;
  GradScaler scaler;
  EXPECT_EMBER_ERROR(scaler.found_inf(trained.optimizer), "unscale_() has not been called on this optimizer (SGD)");
  EXPECT_EMBER_ERROR(scaler.update(), "no inf checks were recorded since the last update()");
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

TEST(GradScaler, BadOptionsAreErrors) {
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = 0}), "the scale must be positive and finite, got 0");
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = -2}), "got -2");
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = kInf}), "got inf");
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = kNan}), "got nan");
  EXPECT_EMBER_ERROR(GradScaler({.growth_factor = 1}), "growth_factor must be greater than 1, got 1");
  EXPECT_EMBER_ERROR(GradScaler({.growth_factor = -2}), "growth_factor must be greater than 1, got -2");
  EXPECT_EMBER_ERROR(GradScaler({.backoff_factor = 0}), "backoff_factor must be in (0, 1), got 0");
  EXPECT_EMBER_ERROR(GradScaler({.backoff_factor = 1}), "backoff_factor must be in (0, 1), got 1");
  EXPECT_EMBER_ERROR(GradScaler({.backoff_factor = -0.5}), "got -0.5");
  EXPECT_EMBER_ERROR(GradScaler({.growth_interval = 0}), "growth_interval must be at least 1, got 0");
  EXPECT_EMBER_ERROR(GradScaler({.min_scale = -1}), "min_scale must be zero or positive and finite, got -1");
  EXPECT_EMBER_ERROR(GradScaler({.min_scale = kInf}), "min_scale must be zero or positive and finite, got inf");
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = 0.5}), "the scale 0.5 is below min_scale 1");
  // The scale is an f32 value: above f32's range it was inf (every step
  // skipped, silently); below 2^-128 its f32 reciprocal was inf (the
  // parameters became inf/NaN unnoticed). Mutation caught: check_scale
  // reduced to its first check -> these scalers are built.
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = 1e39}),
                     "the scale 1e+39 is above float32's largest value 3.4028235e+38");
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = 1e-40, .min_scale = 0}),
                     "the scale 1e-40 is too small: its float32 reciprocal, which unscale_ multiplies the gradients "
                     "by, is inf");
  EXPECT_EMBER_ERROR(GradScaler({.init_scale = std::ldexp(1.0, -128), .min_scale = 0}), "is too small");
  GradScaler({.init_scale = std::ldexp(1.0, -127), .min_scale = 0});  // the smallest power of two that works
  GradScaler({.init_scale = std::ldexp(1.0, 127)});                   // the largest
}

TEST(GradScaler, ScalingANonFloatingLossIsAnError) {
  GradScaler scaler;
  EXPECT_EMBER_ERROR(scaler.scale(full({}, 1, {.dtype = DType::i64})), "expected a floating point loss, got int64");
  EXPECT_EMBER_ERROR(scaler.scale(Tensor()), "got an undefined tensor");
}

TEST(GradScaler, LoadStateDictChecksEverythingBeforeChangingAnything) {
  GradScaler scaler({.init_scale = 32, .growth_interval = 7});
  const nlohmann::json original = scaler.state_dict();
  auto with = [&](const std::string& key, const nlohmann::json& value) {
    nlohmann::json state = original;
    state[key] = value;
    return state;
  };
  auto without = [&](const std::string& key) {
    nlohmann::json state = original;
    state.erase(key);
    return state;
  };
  EXPECT_EMBER_ERROR(scaler.load_state_dict(nlohmann::json::object()), "the state is empty");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(nlohmann::json::array()), "the state is empty or not an object");
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"})
    EXPECT_EMBER_ERROR(scaler.load_state_dict(without(key)), std::string("missing key \"") + key + "\"");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("scale", "big")), "\"scale\" must be a number, got \"big\"");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("growth_interval", 2.5)),
                     "\"growth_interval\" must be an integer, got 2.5");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("_growth_tracker", nullptr)), "\"_growth_tracker\" must be an integer");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("backoff_factor", 2.0)), "backoff_factor must be in (0, 1), got 2");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("scale", -1.0)), "the scale must be positive and finite, got -1");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("scale", 0.25)), "the scale 0.25 is below min_scale 1");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("scale", 3.5e38)),
                     "GradScaler::load_state_dict: the scale 3.5e+38 is above float32's largest value");
  GradScaler floorless({.min_scale = 0});
  EXPECT_EMBER_ERROR(floorless.load_state_dict(with("scale", 1e-300)),
                     "GradScaler::load_state_dict: the scale 1e-300 is too small");
  EXPECT_EMBER_ERROR(scaler.load_state_dict(with("_growth_tracker", 7)),
                     "_growth_tracker must be in [0, growth_interval = 7), got 7");
  // A valid scale with a bad tracker changed nothing either.
  nlohmann::json half_valid = with("scale", 4.0);
  half_valid["_growth_tracker"] = -1;
  EXPECT_EMBER_ERROR(scaler.load_state_dict(half_valid), "got -1");
  EXPECT_EQ(scaler.state_dict(), original);
}

// Two ranks, only rank 1's gradient overflows: the all-reduced flag makes both
// skip the step and halve the scale (the checks run in the workers).
TEST(GradScaler, AllRanksSkipWhenOneOverflows) {
  ProcessResult result = launch({"--nproc-per-node", "2"}, "grad_scaler_skips_together", {"auto"},
                                std::chrono::seconds(60));
  EXPECT_FALSE(result.timed_out) << result.output;
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("rank 0: found the other rank's inf: ok"), std::string::npos) << result.output;
  EXPECT_TRUE(leftover_workers().empty());
  EXPECT_TRUE(leftover_segments().empty());
}

}  // namespace
}  // namespace ember::test
