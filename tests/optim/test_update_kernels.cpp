// The fused update ops (core/ops/optimizer.h): the fast CPU kernels against
// the reference ones on sizes that cover the SIMD tails, the block boundaries
// and the threaded path, in every floating dtype; and the entry points' checks.
#include "support/test_support.h"

namespace ember::testing {
namespace {

// Fresh copies of `tensors`, so the fast and the reference run start alike.
std::vector<Tensor> copies(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.defined() ? t.clone() : Tensor());
  return out;
}

// Runs `update` on copies of `operands` with the fast and the reference
// kernels and expects every written tensor to agree.
template <class Update>
void expect_fast_matches_reference(const std::vector<Tensor>& operands, Update update, const std::string& what) {
  std::vector<Tensor> fast = copies(operands), slow = copies(operands);
  update(fast);
  reference([&] { update(slow); });
  for (size_t i = 0; i < operands.size(); ++i) {
    if (!operands[i].defined()) continue;
    EXPECT_TRUE(all_close(fast[i], slow[i])) << what << ", operand " << i;
  }
}

const int64_t kSizes[] = {1, 7, 255, 256, 257, 70001};

TEST(UpdateKernels, FastMatchesReference) {
  const int threads = get_num_threads();
  set_num_threads(2);  // 70001 elements take the threaded path
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t n : kSizes) {
      const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n);
      Tensor param = random_tensor({n}, dtype), grad = random_tensor({n}, dtype);
      Tensor state = random_tensor({n}, dtype), positive = random_tensor({n}, dtype, 1, 2);
      Tensor small = random_tensor({n}, dtype, -0.5, 0.5), positive2 = random_tensor({n}, dtype, 0, 2);
      for (bool nesterov : {false, true}) {
        for (bool first_step : {false, true}) {
          expect_fast_matches_reference(
              {param, grad, state},
              [&](std::vector<Tensor>& t) {
                sgd_update_(
                    t[0], t[1], t[2],
                    {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = nesterov, .first_step = first_step});
              },
              what + " sgd");
        }
      }
      expect_fast_matches_reference(
          {param, grad},
          [&](std::vector<Tensor>& t) { sgd_update_(t[0], t[1], Tensor(), {.lr = 0.1, .maximize = true}); },
          what + " plain sgd");
      for (bool amsgrad : {false, true}) {
        for (bool decoupled : {false, true}) {
          expect_fast_matches_reference(
              {param, grad, state, positive, amsgrad ? positive2 : Tensor()},
              [&](std::vector<Tensor>& t) {
                adam_update_(t[0], t[1], t[2], t[3], t[4],
                             {.lr = 0.01,
                              .weight_decay = 0.1,
                              .decoupled_weight_decay = decoupled,
                              .amsgrad = amsgrad,
                              .step = 7});
              },
              what + " adam");
        }
      }
      for (bool centered : {false, true}) {
        for (double momentum : {0.0, 0.9}) {
          expect_fast_matches_reference(
              {param, grad, positive, centered ? small : Tensor(), momentum > 0 ? state : Tensor()},
              [&](std::vector<Tensor>& t) {
                rmsprop_update_(t[0], t[1], t[2], t[3], t[4],
                                {.lr = 0.01, .weight_decay = 0.1, .momentum = momentum, .centered = centered});
              },
              what + " rmsprop");
        }
      }
      expect_fast_matches_reference(
          {param, grad, positive2},
          [&](std::vector<Tensor>& t) {
            adagrad_update_(t[0], t[1], t[2], {.lr = 0.1, .lr_decay = 0.01, .weight_decay = 0.1, .step = 3});
          },
          what + " adagrad");
      expect_fast_matches_reference(
          {param, grad, state},
          [&](std::vector<Tensor>& t) { lion_update_(t[0], t[1], t[2], {.lr = 0.01, .weight_decay = 0.1}); },
          what + " lion");
    }
  }
  set_num_threads(threads);
}

// SGD's fast kernel does the reference's operations in its order, so on
// finite values its results are bit-identical in every dtype, for each of its
// forms (no momentum; heavy ball or Nesterov, first step or not), on sizes
// that cover the vector tails, the blocks and the threaded path. Mutation
// seen caught: the Nesterov update written p + neg_lr * d + neg_lr * momentum
// * buffer (the same value in exact arithmetic, rounded differently).
TEST(UpdateKernels, SgdIsBitIdenticalToTheReference) {
  const int threads = get_num_threads();
  set_num_threads(2);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t n : kSizes) {
      Tensor param = random_tensor({n}, dtype), grad = random_tensor({n}, dtype), buffer = random_tensor({n}, dtype);
      for (double momentum : {0.0, 0.9}) {
        for (bool nesterov : {false, true}) {
          for (bool first_step : {false, true}) {
            if (momentum == 0 && nesterov) continue;  // Nesterov needs momentum
            const SgdUpdate hyper{.lr = 0.1,
                                  .momentum = momentum,
                                  .dampening = 0.25,
                                  .weight_decay = nesterov ? 0.01 : 0.0,
                                  .nesterov = nesterov,
                                  .maximize = first_step,  // in half the cases
                                  .first_step = first_step};
            std::vector<Tensor> fast = copies({param, grad, buffer}), slow = copies({param, grad, buffer});
            sgd_update_(fast[0], fast[1], momentum > 0 ? fast[2] : Tensor(), hyper);
            reference([&] { sgd_update_(slow[0], slow[1], momentum > 0 ? slow[2] : Tensor(), hyper); });
            const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                                     " momentum=" + std::to_string(momentum) + " nesterov=" +
                                     std::to_string(nesterov) + " first_step=" + std::to_string(first_step);
            EXPECT_TRUE(all_close(fast[0], slow[0], 0, 0)) << what << ": parameter";
            EXPECT_TRUE(all_close(fast[2], slow[2], 0, 0)) << what << ": momentum buffer";
          }
        }
      }
    }
  }
  set_num_threads(threads);
}

// A copy of `grad` with inf, -inf and NaN written: the first in the last
// element (the last block of the last thread), the others at random positions.
Tensor with_non_finite(const Tensor& grad, int count) {
  std::vector<double> values = grad.to(DType::f64).to_vector<double>();
  const double specials[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()};
  for (int i = 0; i < count && !values.empty(); ++i)
    values[i == 0 ? values.size() - 1 : rng()() % values.size()] = specials[i % 3];
  return from_vector(values, grad.shape()).to(grad.dtype());
}

// The unscale pass, fast against reference: the scaled gradient and the flag,
// for clean gradients, gradients with inf/NaN somewhere (also far into the
// threaded path), and a flag that is already set (never cleared).
TEST(UpdateKernels, UnscaleAndCheckMatchesReference) {
  const int threads = get_num_threads();
  set_num_threads(2);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(255), int64_t(257), int64_t(70001)}) {
      Tensor clean = random_tensor({n}, dtype, -1000, 1000);
      for (int non_finite : {0, 1, 3}) {
        for (float initial_flag : {0.0f, 1.0f}) {
          const std::string what = std::string(dtype_name(dtype)) + " n=" + std::to_string(n) +
                                   " non-finite=" + std::to_string(non_finite) +
                                   " flag=" + std::to_string(initial_flag);
          Tensor grad = with_non_finite(clean, non_finite);
          Tensor fast_grad = grad.clone(), fast_flag = full({1}, initial_flag);
          Tensor slow_grad = grad.clone(), slow_flag = full({1}, initial_flag);
          unscale_and_check_(fast_grad, fast_flag, 1.0 / 1024);
          reference([&] { unscale_and_check_(slow_grad, slow_flag, 1.0 / 1024); });
          EXPECT_TRUE(all_close(fast_grad, slow_grad, 0, 0)) << what;
          EXPECT_TRUE(all_close(fast_flag, slow_flag, 0, 0)) << what;
          const bool expect_flag = initial_flag == 1 || (non_finite > 0 && n > 0);
          EXPECT_EQ(fast_flag.item<float>(), expect_flag ? 1.0f : 0.0f) << what;
        }
      }
    }
  }
  set_num_threads(threads);
}

// A hand case: the values divided by the scale, the flag set by the inf only
// (the finite elements are still scaled), and one flag shared by two calls.
TEST(UpdateKernels, UnscaleAndCheckScalesAndFlags) {
  Tensor grad = from_vector<float>({2, -4, 1e30f}), found_inf = zeros({1});
  unscale_and_check_(grad, found_inf, 0.5);
  EXPECT_EQ(grad.to_vector<float>(), (std::vector<float>{1, -2, 5e29f}));
  EXPECT_EQ(found_inf.item<float>(), 0.0f);
  Tensor overflowed = from_vector<float>({8, std::numeric_limits<float>::infinity(), 6});
  unscale_and_check_(overflowed, found_inf, 0.5);
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  std::vector<float> values = overflowed.to_vector<float>();
  EXPECT_EQ(values[0], 4.0f);
  EXPECT_TRUE(std::isinf(values[1]));
  EXPECT_EQ(values[2], 3.0f);
  unscale_and_check_(grad, found_inf, 2.0);  // clean: the flag stays set
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  EXPECT_EQ(grad.to_vector<float>(), (std::vector<float>{2, -4, 1e30f}));
}

TEST(UpdateKernels, UnscaleAndCheckWritesAStridedGradientInPlace) {
  Tensor storage = random_tensor({5, 4}, DType::bf16);
  Tensor grad = storage.t();  // [4, 5], not contiguous
  Tensor expected = grad.contiguous().to(DType::f32) * 0.25;
  Tensor found_inf = zeros({1});
  const uint64_t version = grad.version();
  unscale_and_check_(grad, found_inf, 0.25);
  EXPECT_TRUE(all_close(grad, expected.to(DType::bf16), 0, 0));
  EXPECT_TRUE(all_close(storage.t(), grad, 0, 0));  // written through the view
  EXPECT_GT(grad.version(), version);
  EXPECT_EQ(found_inf.item<float>(), 0.0f);
}

TEST(UpdateKernels, UnscaleAndCheckOfAnEmptyGradientLeavesTheFlag) {
  Tensor found_inf = zeros({1});
  unscale_and_check_(zeros({0, 3}), found_inf, 0.5);
  EXPECT_EQ(found_inf.item<float>(), 0.0f);
}

TEST(UpdateKernels, UnscaleAndCheckChecksItsOperands) {
  Tensor grad = zeros({2, 3}), found_inf = zeros({1});
  EXPECT_EMBER_ERROR(unscale_and_check_(Tensor(), found_inf, 0.5), "unscale_and_check_: the gradient is undefined");
  EXPECT_EMBER_ERROR(unscale_and_check_(zeros({2}, {.dtype = DType::i64}), found_inf, 0.5),
                     "must be floating point, got int64");
  EXPECT_EMBER_ERROR(unscale_and_check_(grad, Tensor(), 0.5), "found_inf is undefined");
  EXPECT_EMBER_ERROR(unscale_and_check_(grad, zeros({2}), 0.5), "one-element float32 tensor, got shape [2] of float32");
  EXPECT_EMBER_ERROR(unscale_and_check_(grad, zeros({1}, {.dtype = DType::f64}), 0.5), "got shape [1] of float64");
  EXPECT_EMBER_ERROR(unscale_and_check_(grad, grad.view({6}).narrow(0, 0, 1), 0.5),
                     "found_inf shares memory with the gradient");
  EXPECT_EQ(grad.to_vector<float>(), std::vector<float>(6, 0.0f));
}

// A hand case: one Adam step from zero state moves each element by about lr
// against its gradient's sign (m / sqrt(v) = g / |g| after bias correction).
TEST(UpdateKernels, FirstAdamStepMovesByTheLearningRate) {
  Tensor param = from_vector<float>({1, 2, 3}), grad = from_vector<float>({0.5, -2, 0});
  Tensor exp_avg = zeros({3}), exp_avg_sq = zeros({3});
  adam_update_(param, grad, exp_avg, exp_avg_sq, Tensor(), {.lr = 0.1, .eps = 0});
  std::vector<float> values = param.to_vector<float>();
  EXPECT_NEAR(values[0], 0.9f, 1e-6);
  EXPECT_NEAR(values[1], 2.1f, 1e-6);
  EXPECT_TRUE(std::isnan(values[2]));  // 0 / (0 + eps) with eps = 0
  EXPECT_FLOAT_EQ(exp_avg.to_vector<float>()[1], -0.2f);
}

// f16 Adam and Adagrad: a gradient of 1e-3 squares to 0 in f16, so the
// second moment was 0 under a nonzero first moment and 0.5 stepped to -99.5
// without a word (PyTorch: -inf). Refused, naming the state. Mutation
// caught: the updates without check_second_moment.
TEST(UpdateKernels, Float16SecondMomentsThatUnderflowAreRefused) {
  auto f16 = [](double value) { return full({2}, value, {.dtype = DType::f16}); };
  Tensor param = f16(0.5), exp_avg = f16(0), exp_avg_sq = f16(0);
  EXPECT_EMBER_ERROR(adam_update_(param, f16(1e-3), exp_avg, exp_avg_sq, Tensor(), {.lr = 1e-3}),
                     "adam_update_: 2 of 2 float16 elements underflowed to 0 in exp_avg_sq");
  Tensor sum = f16(0);
  EXPECT_EMBER_ERROR(adagrad_update_(f16(0.5), f16(1e-4), sum, {.lr = 1e-2}),
                     "adagrad_update_: 2 of 2 float16 elements underflowed to 0 in sum");
  Tensor healthy = f16(0.5), m = f16(0), v = f16(0);
  adam_update_(healthy, f16(1e-2), m, v, Tensor(), {.lr = 1e-3});
  EXPECT_NEAR(healthy.to_vector<float>()[0], 0.499, 1e-3);
}

// With weight_decay 0 the decay term was computed all the same: 0 * inf made
// an infinite parameter NaN, and Adam's moments with it; PyTorch leaves the
// term out. Mutation caught: GradientTerms without its `decay` test.
TEST(UpdateKernels, NoWeightDecayLeavesAnInfiniteParameterInfinite) {
  const auto parameter = [] { return from_vector<float>({-INFINITY, 1}); };
  const Tensor grad = ones({2});
  Tensor sgd = parameter();
  sgd_update_(sgd, grad, Tensor(), {.lr = 0.1});
  Tensor adam = parameter(), exp_avg = zeros({2}), exp_avg_sq = zeros({2});
  adam_update_(adam, grad, exp_avg, exp_avg_sq, Tensor(), {.lr = 0.1});
  Tensor rmsprop = parameter(), square_avg = zeros({2});
  rmsprop_update_(rmsprop, grad, square_avg, Tensor(), Tensor(), {.lr = 0.1});
  Tensor adagrad = parameter(), sum = zeros({2});
  adagrad_update_(adagrad, grad, sum, {.lr = 0.1});
  for (const Tensor& updated : {sgd, adam, rmsprop, adagrad}) {
    const std::vector<float> values = updated.to_vector<float>();
    EXPECT_EQ(values[0], -INFINITY) << updated.str();
    EXPECT_TRUE(std::isfinite(values[1])) << updated.str();
  }
  for (const Tensor& state : {exp_avg, exp_avg_sq, square_avg, sum})
    EXPECT_TRUE(all_close(state, state, 0, 0)) << state.str();  // no NaN
}

TEST(UpdateKernels, AStridedGradientIsAccepted) {
  Tensor param = random_tensor({4, 5}, DType::f32), grad = random_tensor({5, 4}, DType::f32).t();
  Tensor expected = param.clone();
  sgd_update_(expected, grad.contiguous(), Tensor(), {.lr = 0.5});
  sgd_update_(param, grad, Tensor(), {.lr = 0.5});
  EXPECT_TRUE(all_close(param, expected, 0, 0));
}

TEST(UpdateKernels, WritesBumpVersions) {
  Tensor param = zeros({3}), grad = ones({3}), exp_avg = zeros({3});
  const uint64_t param_version = param.version(), state_version = exp_avg.version();
  lion_update_(param, grad, exp_avg, {.lr = 0.1});
  EXPECT_GT(param.version(), param_version);
  EXPECT_GT(exp_avg.version(), state_version);
  EXPECT_EQ(param.to_vector<float>(), std::vector<float>(3, -0.1f));
}

TEST(UpdateKernels, EntryPointsCheckTheirOperands) {
  Tensor param = zeros({2, 3}), grad = zeros({2, 3}), state = zeros({2, 3});
  EXPECT_EMBER_ERROR(sgd_update_(param, zeros({3, 2}), Tensor(), {.lr = 0.1}), "gradient shape [3, 2]");
  EXPECT_EMBER_ERROR(sgd_update_(param, grad.to(DType::f64), Tensor(), {.lr = 0.1}), "gradient dtype float64");
  EXPECT_EMBER_ERROR(sgd_update_(param, Tensor(), Tensor(), {.lr = 0.1}), "gradient is undefined");
  EXPECT_EMBER_ERROR(sgd_update_(zeros({3, 2}).t(), grad, Tensor(), {.lr = 0.1}), "must be contiguous");
  EXPECT_EMBER_ERROR(sgd_update_(zeros({2, 3}, {.dtype = DType::i64}), grad, Tensor(), {.lr = 0.1}),
                     "must be floating point");
  EXPECT_EMBER_ERROR(sgd_update_(param, grad, Tensor(), {.lr = 0.1, .momentum = 0.9}), "momentum_buffer is undefined");
  EXPECT_EMBER_ERROR(sgd_update_(param, grad, state, {.lr = 0.1}), "momentum_buffer is given");
  EXPECT_EMBER_ERROR(adam_update_(param, grad, state, zeros({6}), Tensor(), {.lr = 0.1}), "exp_avg_sq shape [6]");
  EXPECT_EMBER_ERROR(adam_update_(param, grad, state, zeros({2, 3}), Tensor(), {.lr = 0.1, .step = 0}),
                     "step must be at least 1");
  EXPECT_EMBER_ERROR(adam_update_(param, grad, param, zeros({2, 3}), Tensor(), {.lr = 0.1}),
                     "exp_avg shares memory with the parameter");
  EXPECT_EMBER_ERROR(rmsprop_update_(param, grad, state, Tensor(), Tensor(), {.lr = 0.1, .centered = true}),
                     "grad_avg is undefined");
  EXPECT_EMBER_ERROR(adagrad_update_(param, grad, zeros({2, 3}, {.dtype = DType::f64}), {.lr = 0.1}),
                     "sum dtype float64");
  EXPECT_EMBER_ERROR(lion_update_(param, grad, Tensor(), {.lr = 0.1}), "exp_avg is undefined");
}

}  // namespace
}  // namespace ember::testing
