// cross_entropy (core/ops/loss.h): fast kernels against the reference ones for
// every floating dtype, input rank, layout and option combination (class
// indices of both dtypes with weight, ignore_index and label smoothing;
// probabilities), forward and fused backward; the same result on two threads;
// exact hand values; errors naming the offending values. PyTorch golden
// values: tests/nn/test_loss.cpp.
#include <cmath>
#include <limits>
#include <optional>

#include "core/ops/loss.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Class indices in [0, classes) of `shape`, every third one replaced by ignore_index.
Tensor class_targets(const Shape& shape, int64_t classes, DType dtype, int64_t ignore_index) {
  std::vector<int64_t> values = random_tensor(shape, DType::i64, 0, double(classes - 1)).to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); i += 3) values[i] = ignore_index;
  return from_vector<int64_t>(values).reshape(shape).to(dtype);
}

// Rows of probabilities (softmax of random logits along the class dim).
Tensor probability_targets(const Shape& shape, DType dtype) {
  return softmax(random_tensor(shape, DType::f64, -2, 2), shape.ndim() == 1 ? 0 : 1).to(dtype);
}

struct InputCase {
  Shape input;
  Shape target;  // of class indices
};
const InputCase kInputCases[] = {{{6, 5}, {6}}, {{5}, {}},     {{3, 4, 5}, {3, 5}}, {{2, 3, 2, 3}, {2, 2, 3}},
                                 {{0, 4}, {0}}, {{9, 1}, {9}}, {{4, 70}, {4}}};

TEST(CrossEntropy, MatchesReferenceForEveryDtypeShapeLayoutAndOption) {
  for (DType dtype : kFloatingDTypes) {
    for (const InputCase& shapes : kInputCases) {
      const int64_t classes = shapes.input[shapes.input.ndim() == 1 ? 0 : 1];
      Tensor x = random_tensor(shapes.input, dtype, -4, 4);
      Tensor weight = random_tensor({classes}, dtype, 0.2, 2);
      std::vector<Tensor> targets = {class_targets(shapes.target, classes, DType::i64, -100),
                                     class_targets(shapes.target, classes, DType::i32, 1 % classes),
                                     probability_targets(shapes.input, dtype)};
      for (const Tensor& target : targets) {
        for (bool weighted : {false, true}) {
          for (double smoothing : {0.0, 0.2}) {
            for (Reduction reduction : {Reduction::none, Reduction::mean, Reduction::sum}) {
              CrossEntropyOptions options{.weight = weighted ? weight : Tensor(),
                                          .ignore_index = target.dtype() == DType::i32 ? 1 % classes : -100,
                                          .reduction = reduction,
                                          .label_smoothing = smoothing};
              const std::string what = std::string(dtype_name(dtype)) + " " + shapes.input.str() + " target " +
                                       std::string(dtype_name(target.dtype())) + (weighted ? " weighted" : "") +
                                       " smoothing " + std::to_string(smoothing) + " reduction " +
                                       std::to_string(int(reduction));
              CrossEntropyResult expected = reference([&] { return cross_entropy_forward(x, target, options); });
              for (const Layout& layout : layouts_of(x))
                EXPECT_TRUE(all_close(cross_entropy(layout.tensor, target, options), expected.loss))
                    << what << " " << layout.name;
              Tensor grad = random_tensor(expected.loss.shape(), dtype);
              auto backward = [&] {
                return cross_entropy_backward(grad, x, target, options, expected.row_max, expected.log_sum, expected.total_weight);
              };
              EXPECT_TRUE(all_close(backward(), reference(backward))) << what << " backward";
            }
          }
        }
      }
    }
  }
}

TEST(CrossEntropy, LargeInputsOnTwoThreadsGiveTheSameLoss) {
  Tensor x = random_tensor({3000, 101}, DType::f32, -5, 5);
  Tensor target = class_targets({3000}, 101, DType::i64, -100);
  CrossEntropyOptions options{.label_smoothing = 0.1};
  Tensor one_thread = cross_entropy(x, target, options);
  set_num_threads(2);
  Tensor two_threads = cross_entropy(x, target, options);
  CrossEntropyResult forward = cross_entropy_forward(x, target, options);
  Tensor grad = cross_entropy_backward(ones({}), x, target, options, forward.row_max, forward.log_sum, forward.total_weight);
  set_num_threads(1);
  EXPECT_EQ(one_thread.item<float>(), two_threads.item<float>());
  EXPECT_TRUE(all_close(two_threads, reference([&] { return cross_entropy(x, target, options); })));
  EXPECT_TRUE(all_close(grad, reference([&] {
                          return cross_entropy_backward(ones({}), x, target, options, forward.row_max,
                                                        forward.log_sum, forward.total_weight);
                        })));
}

// Logits so large that their log-sum-exp m + log 2 rounds to m: the loss is
// still log 2 and the gradient [p - 1, p] with p = 1/2, on both kernels, for
// class indices and probabilities, every floating dtype. Mutation caught:
// the backward's p_c = exp(x_c - (m + log_sum)), as saved before, which gave
// every probability 1 (a gradient of [0, 1]); the reference's forward also
// lost the log-sum at 2^53 in f64 (found by the op fuzzer).
TEST(CrossEntropy, LargeLogitsKeepTheirLogSumInLossAndGradient) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const double large = dtype == DType::f64 ? std::ldexp(1.0, 60) : dtype == DType::f16 ? 60000.0 : 1e8;
    Tensor x = full({1, 2}, large, {.dtype = dtype});
    for (bool probabilities : {false, true}) {
      Tensor target = probabilities ? from_vector<double>({1, 0}, {1, 2}).to(dtype) : from_vector<int64_t>({0});
      for (bool reference_mode : {false, true}) {
        std::optional<ReferenceModeGuard> guard;
        if (reference_mode) guard.emplace();
        const std::string what = fmt::format("{} probabilities {} reference {}", dtype_name(dtype), probabilities,
                                             reference_mode);
        CrossEntropyResult forward = cross_entropy_forward(x, target);
        EXPECT_NEAR(forward.loss.to(DType::f64).item<double>(), std::log(2.0), 4 * tolerance(dtype)) << what;
        Tensor grad = cross_entropy_backward(ones({}, {.dtype = dtype}), x, target, {}, forward.row_max,
                                             forward.log_sum, forward.total_weight);
        EXPECT_TRUE(all_close(grad, from_vector<double>({-0.5, 0.5}, {1, 2}).to(dtype))) << what;
      }
    }
  }
}

TEST(CrossEntropy, ExactHandValues) {
  // softmax([0, ln 3]) = [1/4, 3/4].
  Tensor x = from_vector<double>({0, std::log(3.0)}, {1, 2});
  EXPECT_NEAR(cross_entropy(x, from_vector<int64_t>({1})).item<double>(), -std::log(0.75), 1e-12);
  EXPECT_NEAR(cross_entropy(x, from_vector<int64_t>({0})).item<double>(), -std::log(0.25), 1e-12);
  // Smoothing 0.5 with two classes: targets [0.25, 0.75].
  EXPECT_NEAR(cross_entropy(x, from_vector<int64_t>({1}), {.label_smoothing = 0.5}).item<double>(),
              -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-12);
  EXPECT_NEAR(cross_entropy(x, from_vector<double>({0.25, 0.75}, {1, 2})).item<double>(),
              -(0.25 * std::log(0.25) + 0.75 * std::log(0.75)), 1e-12);
  // Uniform logits: log C. Huge logits stay finite.
  EXPECT_NEAR(cross_entropy(zeros({3, 7}), from_vector<int64_t>({0, 3, 6})).item<float>(), std::log(7.0f), 1e-6);
  Tensor huge = from_vector<float>({1000, 0}, {1, 2});
  EXPECT_NEAR(cross_entropy(huge, from_vector<int64_t>({0})).item<float>(), 0.0f, 1e-6);
  EXPECT_NEAR(cross_entropy(huge, from_vector<int64_t>({1})).item<float>(), 1000.0f, 1e-3);
  // The weighted mean divides by the weights of the targets that count: (2 l0 + 0) / 2 with row 1 ignored.
  Tensor rows = from_vector<double>({0, std::log(3.0), 5, 1}, {2, 2});
  CrossEntropyOptions weighted{.weight = from_vector<double>({2, 3}), .ignore_index = 7};
  EXPECT_NEAR(cross_entropy(rows, from_vector<int64_t>({0, 7}), weighted).item<double>(), -std::log(0.25), 1e-12);
  // Every target ignored: the mean is 0 / 0, as in PyTorch.
  EXPECT_TRUE(std::isnan(cross_entropy(rows, from_vector<int64_t>({-100, -100})).item<double>()));
  EXPECT_EQ(cross_entropy(rows, from_vector<int64_t>({-100, -100}), {.reduction = Reduction::sum}).item<double>(), 0);
}

// A row with a +inf logit, or with every logit -inf, has a nan log-softmax
// (inf - inf), so its loss is nan, as PyTorch's log_softmax + nll_loss give,
// with any target. A -inf logit in another row is a masked class: with a
// class-index target and no smoothing it takes no part in the loss, which
// stays finite (PyTorch's nll_loss reads the target's log-probability only).
// Found by the op fuzzer (tests/fuzz/README_ops.md): the fast kernels gave
// inf for the +inf row, the reference nan (0 * inf) for the masked one.
TEST(CrossEntropy, InfiniteMaximumGivesNanLikeTheReference) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (DType dtype : kFloatingDTypes) {
    Tensor x = from_vector<double>({0.5, 1, kInf, -kInf, -kInf, -kInf, -kInf, 2, 1}, {3, 3}).to(dtype);
    Tensor classes = from_vector<int64_t>({0, 1, 2});
    Tensor probabilities = from_vector<double>({0.5, 0.25, 0.25, 0.5, 0.25, 0.25, 0, 0.5, 0.5}, {3, 3}).to(dtype);
    for (const Tensor& target : {classes, probabilities}) {
      for (double smoothing : {0.0, 0.1}) {
        CrossEntropyOptions options{.reduction = Reduction::none, .label_smoothing = smoothing};
        Tensor loss = cross_entropy(x, target, options);
        std::vector<double> values = loss.to_vector<double>();
        const bool masked_row_counts = target.is_same(classes) && smoothing == 0;
        EXPECT_TRUE(std::isnan(values[0]) && std::isnan(values[1]) && (!masked_row_counts || std::isfinite(values[2])))
            << dtype_name(dtype) << " smoothing " << smoothing << ": " << loss.str();
        EXPECT_TRUE(all_close(loss, reference([&] { return cross_entropy(x, target, options); })))
            << dtype_name(dtype) << " smoothing " << smoothing;
      }
    }
  }
}

// The loss sum_c a_c (lse - x_c) is computed as sum_c a_c (max - x_c) + A
// log(sum): for logits of large magnitude, lse = max + log(sum) rounds to max
// and lse - x_t loses the loss (equal logits of 1e8 gave 0 instead of log 3 in
// f32; found by the op fuzzer, tests/fuzz/README_ops.md).
TEST(CrossEntropy, LargeLogitsKeepTheirPrecision) {
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor x = full({2, 3}, 1e8, {.dtype = dtype});
    Tensor classes = from_vector<int64_t>({0, 2});
    Tensor probabilities = full({2, 3}, 1.0 / 3, {.dtype = dtype});
    for (const Tensor& target : {classes, probabilities})
      for (double smoothing : {0.0, 0.1})
        EXPECT_NEAR(cross_entropy(x, target, {.label_smoothing = smoothing}).item<double>(), std::log(3.0), 1e-6)
            << dtype_name(dtype) << " smoothing " << smoothing;
  }
}

TEST(CrossEntropy, GradientIsSoftmaxMinusOneHotOverN) {
  Tensor x = from_vector<double>({0, std::log(3.0), 0, 0}, {2, 2});
  x.requires_grad_(true);
  cross_entropy(x, from_vector<int64_t>({1, 0})).backward();
  EXPECT_TRUE(all_close(x.grad(), from_vector<double>({0.125, -0.125, -0.25, 0.25}, {2, 2})));
}

TEST(CrossEntropy, ErrorsNameTheOffendingValues) {
  Tensor x = zeros({3, 5});
  EXPECT_EMBER_ERROR(cross_entropy(x, from_vector<int64_t>({0, 7, 1})), "target 7 is out of bounds for 5 classes");
  EXPECT_EMBER_ERROR(cross_entropy(x, from_vector<int32_t>({0, 1, -3})), "target -3 is out of bounds for 5 classes");
  EXPECT_EMBER_ERROR(cross_entropy(x, from_vector<int64_t>({0, 1})), "expected class-index targets of shape [3]");
  EXPECT_EMBER_ERROR(cross_entropy(x, zeros({3, 4})), "expected shape [3, 5] and dtype float32, got [3, 4]");
  EXPECT_EMBER_ERROR(cross_entropy(x, zeros({3, 5}, {.dtype = DType::f64})), "got [3, 5] of float64");
  EXPECT_EMBER_ERROR(cross_entropy(x, zeros({3}, {.dtype = DType::boolean})), "got bool");
  EXPECT_EMBER_ERROR(cross_entropy(x, from_vector<int64_t>({0, 1, 2}), {.weight = ones({4})}),
                     "expected weight [5] of dtype float32");
  EXPECT_EMBER_ERROR(cross_entropy(x, from_vector<int64_t>({0, 1, 2}), {.label_smoothing = 1.5}),
                     "label_smoothing must be in [0, 1], got 1.5");
  EXPECT_EMBER_ERROR(cross_entropy(zeros({}), zeros({}, {.dtype = DType::i64})), "got a 0-d tensor");
  EXPECT_EMBER_ERROR(cross_entropy(zeros({3, 5}, {.dtype = DType::i64}), from_vector<int64_t>({0, 1, 2})),
                     "expected a floating point input, got int64");
}

}  // namespace
}  // namespace ember::testing
