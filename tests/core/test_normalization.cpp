// layer_norm, rms_norm and batch_norm (core/ops/normalization.h): fast kernels
// against the reference ones for every floating dtype, random shapes (empty
// too) and layouts, forward and fused backward; large inputs on two threads;
// exact hand values; running-statistic updates; error messages. Golden values
// from PyTorch are checked in tests/nn/test_loss.cpp.
#include <cmath>
#include <limits>

#include "core/ops/normalization.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Random [leading..., normalized...] shapes, sometimes with an empty leading dim.
std::vector<std::pair<Shape, Shape>> row_norm_shapes() {
  std::vector<std::pair<Shape, Shape>> shapes = {{{2, 5}, {5}}, {{3, 4, 6}, {4, 6}}, {{0, 7}, {7}},
                                                 {{7}, {7}},    {{1, 1}, {1}},       {{5, 300}, {300}}};
  for (int i = 0; i < 4; ++i) {
    Shape leading = random_shape(2, 5), normalized = random_shape(1 + i % 2, 6);
    for (int64_t& d : normalized) d = std::max<int64_t>(d, 1);
    Shape both = leading;
    for (int64_t d : normalized) both.push_back(d);
    shapes.push_back({both, normalized});
  }
  return shapes;
}

void expect_grads_close(const NormalizationGrads& actual, const NormalizationGrads& expected, const std::string& what) {
  EXPECT_TRUE(all_close(actual.input, expected.input)) << what << " grad input";
  // Weight and bias gradients sum over rows: an absolute tolerance that allows for the sum's rounding.
  for (auto [name, a, e] :
       {std::tuple{"weight", actual.weight, expected.weight}, std::tuple{"bias", actual.bias, expected.bias}}) {
    ASSERT_EQ(a.defined(), e.defined()) << what << " grad " << name;
    if (e.defined()) {
      EXPECT_TRUE(all_close(a, e, -1, 4 * tolerance(a.dtype()))) << what << " grad " << name;
    }
  }
}

TEST(Normalization, LayerNormAndRmsNormMatchReference) {
  for (DType dtype : kFloatingDTypes) {
    for (const auto& shapes : row_norm_shapes()) {
      const Shape shape = shapes.first, normalized = shapes.second;  // copies: clang-14 lambdas cannot capture bindings
      Tensor x = random_tensor(shape, dtype, -3, 3), g = random_tensor(shape, dtype);
      Tensor w = random_tensor(normalized, dtype), b = random_tensor(normalized, dtype);
      const std::string what = std::string(dtype_name(dtype)) + " " + shape.str();
      for (const Layout& layout : layouts_of(x)) {
        const Tensor& input = layout.tensor;
        EXPECT_TRUE(
            all_close(layer_norm(input, normalized, w, b), reference([&] { return layer_norm(x, normalized, w, b); })))
            << what << " " << layout.name;
        EXPECT_TRUE(all_close(layer_norm(input, normalized), reference([&] { return layer_norm(x, normalized); })))
            << what;
        EXPECT_TRUE(all_close(rms_norm(input, normalized, w), reference([&] { return rms_norm(x, normalized, w); })))
            << what << " " << layout.name;
      }
      NormalizationResult forward = layer_norm_forward(x, normalized, w, b, 1e-5);
      NormalizationResult expected = reference([&] { return layer_norm_forward(x, normalized, w, b, 1e-5); });
      EXPECT_TRUE(all_close(forward.mean, expected.mean)) << what;
      EXPECT_TRUE(all_close(forward.rstd, expected.rstd, 1e-4, 1e-4)) << what;
      for (bool with_weight : {true, false}) {
        Tensor weight = with_weight ? w : Tensor();
        expect_grads_close(
            layer_norm_backward(g, x, normalized, weight, expected.mean, expected.rstd, with_weight), reference([&] {
              return layer_norm_backward(g, x, normalized, weight, expected.mean, expected.rstd, with_weight);
            }),
            "layer_norm " + what);
        NormalizationResult rms = reference([&] { return rms_norm_forward(x, normalized, weight, 1e-6); });
        expect_grads_close(rms_norm_backward(g, x, normalized, weight, rms.rstd),
                           reference([&] { return rms_norm_backward(g, x, normalized, weight, rms.rstd); }),
                           "rms_norm " + what);
      }
    }
  }
}

TEST(Normalization, BatchNormMatchesReferenceInTrainingAndEval) {
  std::vector<Shape> shapes = {{4, 3}, {2, 3, 5}, {3, 2, 4, 5}, {0, 3, 2}, {2, 0, 3}, {1, 4, 1, 300}};
  for (int i = 0; i < 3; ++i) {
    Shape shape = random_shape(3, 5);
    shape[0] = std::max<int64_t>(shape[0], 2);
    shapes.push_back(shape);
  }
  for (DType dtype : kFloatingDTypes) {
    for (const Shape& shape : shapes) {
      const int64_t channels = shape[1];
      Tensor x = random_tensor(shape, dtype, -3, 3), g = random_tensor(shape, dtype);
      Tensor w = random_tensor({channels}, dtype), b = random_tensor({channels}, dtype);
      Tensor running_mean = random_tensor({channels}, DType::f32),
             running_var = random_tensor({channels}, DType::f32, 0.5, 2);
      const std::string what = std::string(dtype_name(dtype)) + " " + shape.str();
      for (bool training : {true, false}) {
        for (const Layout& layout : layouts_of(x)) {
          auto run = [&](const Tensor& input) {
            return batch_norm(input, running_mean.clone(), running_var.clone(), w, b, training);
          };
          EXPECT_TRUE(all_close(run(layout.tensor), reference([&] { return run(x); })))
              << what << " " << layout.name << (training ? " training" : " eval");
        }
        NormalizationResult forward =
            reference([&] { return batch_norm_forward(x, running_mean, running_var, w, b, training, 1e-5); });
        for (bool affine : {true, false}) {
          Tensor weight = affine ? w : Tensor();
          auto backward = [&] {
            return batch_norm_backward(g, x, weight, forward.mean, forward.rstd, training, affine);
          };
          expect_grads_close(backward(), reference(backward), "batch_norm " + what);
        }
      }
    }
  }
}

TEST(Normalization, LargeInputsOnTwoThreadsMatchReferenceAndDoNotDependOnThreads) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = random_tensor({300, 257}, dtype, -3, 3), g = random_tensor({300, 257}, dtype);
    Tensor w = random_tensor({257}, dtype), b = random_tensor({257}, dtype);
    NormalizationResult forward = reference([&] { return layer_norm_forward(x, {257}, w, b, 1e-5); });
    auto backward = [&] { return layer_norm_backward(g, x, {257}, w, forward.mean, forward.rstd, true); };
    NormalizationGrads one_thread = backward();
    set_num_threads(2);
    NormalizationGrads two_threads = backward();
    EXPECT_TRUE(all_close(layer_norm(x, {257}, w, b), forward.output));
    expect_grads_close(two_threads, reference(backward), "two threads");
    EXPECT_EQ(two_threads.weight.to_vector<double>(), one_thread.weight.to_vector<double>());
    EXPECT_EQ(two_threads.bias.to_vector<double>(), one_thread.bias.to_vector<double>());
    Tensor images = random_tensor({8, 3, 40, 40}, dtype, -3, 3);
    Tensor channel = ones({3}, {.dtype = dtype});
    auto run = [&] { return batch_norm(images, {}, {}, channel, channel, true); };
    EXPECT_TRUE(all_close(run(), reference(run)));
    // A mean far from zero: the one-pass moments are shifted, so the variance survives
    // (x - mean in float is good to ulp(1000) / std, about 1e-4).
    Tensor offset = random_tensor({4, 3, 30, 30}, dtype, 999, 1001);
    auto run_offset = [&] { return batch_norm(offset, {}, {}, channel, channel, true); };
    const double offset_tolerance = std::max(1e-4, tolerance(dtype));
    EXPECT_TRUE(all_close(run_offset(), reference(run_offset), offset_tolerance, offset_tolerance));
    set_num_threads(1);
  }
}

TEST(Normalization, ExactHandValues) {
  // [1, 2, 3]: mean 2, biased variance 2/3.
  Tensor x = from_vector<double>({1, 2, 3});
  const double rstd = 1 / std::sqrt(2.0 / 3.0 + 1e-5);
  EXPECT_TRUE(all_close(layer_norm(x, {3}), from_vector<double>({-rstd, 0, rstd})));
  Tensor w = from_vector<double>({2, 2, 2}), b = from_vector<double>({1, 1, 1});
  EXPECT_TRUE(all_close(layer_norm(x, {3}, w, b, 0.0),
                        from_vector<double>({1 - 2 * std::sqrt(1.5), 1, 1 + 2 * std::sqrt(1.5)})));
  // rms_norm of [3, 4]: mean square 12.5; the default eps is the machine
  // epsilon of the dtype it computes in, f32 for 16-bit inputs too.
  const double f32_eps = 1.1920928955078125e-07;
  Tensor rms = rms_norm(from_vector<float>({3, 4}), {2});
  EXPECT_FLOAT_EQ(rms.to_vector<float>()[0], float(3 / std::sqrt(12.5 + f32_eps)));
  Tensor rms64 = rms_norm(from_vector<double>({3, 4}), {2});
  EXPECT_DOUBLE_EQ(rms64.to_vector<double>()[1], 4 / std::sqrt(12.5 + 2.220446049250313e-16));
  // PyTorch 2.15 gives 1 here (f32's eps). With bf16's own 2^-7 the result
  // was 0.49, and 1 under autocast, which computes in f32. Mutation caught:
  // default_rms_norm_eps returning the input dtype's epsilon -> 0.49.
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor small = from_vector<float>({0.05f, 0.05f}).to(dtype);
    EXPECT_NEAR(rms_norm(small, {2}).to_vector<float>()[0], 1.0, 1e-2) << dtype_name(dtype);
    AutocastGuard autocast(DeviceType::cpu, DType::bf16);
    EXPECT_NEAR(rms_norm(small, {2}).to_vector<float>()[0], 1.0, 1e-2) << dtype_name(dtype);
  }
}

// batch_norm: biased batch variance to normalise, unbiased in the running update; eval uses the running stats.
TEST(Normalization, BatchNormRunningStatisticsFollowPyTorch) {
  Tensor x = from_vector<float>({1, 10, 3, 20}, {2, 2});  // channel 0: {1, 3}, channel 1: {10, 20}
  Tensor running_mean = zeros({2}), running_var = ones({2});
  Tensor y = batch_norm(x, running_mean, running_var, {}, {}, /*training=*/true, 0.1, 0.0);
  EXPECT_TRUE(all_close(y, from_vector<float>({-1, -1, 1, 1}, {2, 2})));
  // mean {2, 15}; unbiased variance {2, 50}.
  EXPECT_TRUE(all_close(running_mean, from_vector<float>({0.2f, 1.5f})));
  EXPECT_TRUE(all_close(running_var, from_vector<float>({0.9f + 0.2f, 0.9f + 5.0f})));
  Tensor eval = batch_norm(x, running_mean, running_var, from_vector<float>({2, 1}), from_vector<float>({0, 1}), false);
  const float s0 = 2 / std::sqrt(1.1f + 1e-5f), s1 = 1 / std::sqrt(5.9f + 1e-5f);
  EXPECT_TRUE(all_close(
      eval,
      from_vector<float>({(1 - 0.2f) * s0, (10 - 1.5f) * s1 + 1, (3 - 0.2f) * s0, (20 - 1.5f) * s1 + 1}, {2, 2})));
  EXPECT_TRUE(all_close(running_mean, from_vector<float>({0.2f, 1.5f})));  // eval leaves them alone
}

// An infinite input makes its channel's batch variance nan (inf - inf), and
// the channel's outputs and running variance nan, as in PyTorch and the
// reference; the other channels are untouched. (Found by the op fuzzer,
// tests/fuzz/README_ops.md: max(0, nan) made the variance 0 and the outputs inf.)
TEST(Normalization, BatchNormWithAnInfiniteInputGivesNanInItsChannel) {
  for (DType dtype : kFloatingDTypes) {
    Tensor x = random_tensor({2, 3, 4}, dtype);
    x.select(0, 1).select(0, 1).select(0, 2).fill_(-std::numeric_limits<double>::infinity());
    Tensor running_mean = zeros({3}), running_var = ones({3});
    Tensor y = batch_norm(x, running_mean, running_var, {}, {}, true);
    EXPECT_EQ(sum(isnan(y.select(1, 1))).item<int64_t>(), 8) << dtype_name(dtype);
    EXPECT_EQ(sum(isnan(y)).item<int64_t>(), 8) << dtype_name(dtype);
    EXPECT_TRUE(std::isnan(running_var.to_vector<double>()[1])) << dtype_name(dtype);
    Tensor expected = reference([&] { return batch_norm(x, {}, {}, {}, {}, true); });
    EXPECT_TRUE(all_close(batch_norm(x, {}, {}, {}, {}, true), expected)) << dtype_name(dtype);
  }
}

// An infinite first element of a channel (the one-pass moments' shift) still
// gives that channel a mean of inf and a running mean of inf, as PyTorch and
// the reference do; shifting by it gave nan (found by the op fuzzer).
TEST(Normalization, BatchNormWithAnInfiniteFirstElementKeepsAnInfiniteMean) {
  for (DType dtype : kFloatingDTypes) {
    Tensor x = random_tensor({5, 2}, dtype);
    x.select(0, 0).select(0, 1).fill_(std::numeric_limits<double>::infinity());
    Tensor running_mean = zeros({2}), running_var = ones({2});
    batch_norm(x, running_mean, running_var, {}, {}, true, 0.1);
    EXPECT_EQ(running_mean.to_vector<double>()[1], std::numeric_limits<double>::infinity()) << dtype_name(dtype);
    EXPECT_TRUE(std::isfinite(running_mean.to_vector<double>()[0])) << dtype_name(dtype);
    EXPECT_TRUE(std::isnan(running_var.to_vector<double>()[1])) << dtype_name(dtype);
  }
}

// In evaluation the input's gradient is weight * rstd * g whatever the input
// holds: a nan or inf input gave a nan gradient through xhat * 0 (found by
// the op fuzzer). Mutation caught: the training formula with zero means.
TEST(Normalization, BatchNormEvalGradientIgnoresNonFiniteInputs) {
  for (DType dtype : kFloatingDTypes) {
    Tensor x = random_tensor({2, 3, 4}, dtype);
    x.select(0, 1).select(0, 1).select(0, 2).fill_(std::numeric_limits<double>::quiet_NaN());
    x.select(0, 0).select(0, 2).select(0, 0).fill_(-std::numeric_limits<double>::infinity());
    Tensor weight = random_tensor({3}, dtype), grad = random_tensor({2, 3, 4}, dtype);
    const DType statistics = dtype == DType::f64 ? DType::f64 : DType::f32;
    Tensor mean = random_tensor({3}, statistics), rstd = full({3}, 0.5, {.dtype = statistics});
    NormalizationGrads grads = batch_norm_backward(grad, x, weight, mean, rstd, /*training=*/false, true);
    Tensor expected = grad * weight.view({1, 3, 1}) * 0.5;
    EXPECT_TRUE(all_close(grads.input, expected)) << dtype_name(dtype);
    EXPECT_EQ(sum(isnan(grads.input)).item<int64_t>(), 0) << dtype_name(dtype);
  }
}

TEST(Normalization, ErrorsNameTheOffendingValues) {
  Tensor x = zeros({2, 3});
  EXPECT_EMBER_ERROR(layer_norm(x, {4}), "does not end with normalized_shape [4]");
  EXPECT_EMBER_ERROR(layer_norm(x, {3}, zeros({2})), "expected weight of shape [3], got [2]");
  EXPECT_EMBER_ERROR(layer_norm(x, {3}, zeros({3}, {.dtype = DType::f64})), "expected weight of dtype float32");
  EXPECT_EMBER_ERROR(layer_norm(zeros({2, 3}, {.dtype = DType::i64}), {3}),
                     "expected a floating point input, got int64");
  EXPECT_EMBER_ERROR(rms_norm(x, {}), "normalized_shape must have at least one dim");
  EXPECT_EMBER_ERROR(batch_norm(zeros({3}), {}, {}, {}, {}, true), "expected input [N, C, *]");
  EXPECT_EMBER_ERROR(batch_norm(zeros({1, 3}), {}, {}, {}, {}, true), "more than 1 value per channel");
  EXPECT_EMBER_ERROR(batch_norm(x, {}, {}, {}, {}, false), "must be defined in evaluation mode");
  EXPECT_EMBER_ERROR(batch_norm(x, zeros({2}), ones({3}), {}, {}, true), "expected running_mean of shape [3]");
  EXPECT_EMBER_ERROR(batch_norm(x, {}, {}, zeros({4}), {}, true), "expected weight of shape [3], got [4]");
}

}  // namespace
}  // namespace ember::testing
