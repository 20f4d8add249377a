// The losses of nn::functional and core's normalisations against PyTorch:
// values and gradients of every case in tests/data/golden_losses.json (written
// by tests/data/make_golden_losses.py), in float64; then shape errors.
#include <cmath>
#include <limits>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/ops/normalization.h"
#include "nn/functional/loss.h"
#include "support/golden_json.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

namespace F = ember::nn::functional;
using Json = nlohmann::json;

const Json& golden() {
  static const Json data = [] {
    std::ifstream file(std::string(EMBER_TEST_DATA_DIR) + "/golden_losses.json");
    EXPECT_TRUE(file.good()) << "missing tests/data/golden_losses.json";
    return file.good() ? Json::parse(file) : Json::object({{"cases", Json::array()}});
  }();
  return data;
}

constexpr double kTolerance = 1e-9;

void expect_matches(const Tensor& actual, const Json& expected, const std::string& what) {
  if (expected.is_null()) {
    EXPECT_FALSE(actual.defined()) << what << ": PyTorch has no value here";
    return;
  }
  ASSERT_TRUE(actual.defined()) << what;
  EXPECT_TRUE(all_close(actual, tensor_from(expected), kTolerance, kTolerance)) << what;
}

// Runs one golden case: returns the output and sets *grads to the leaves whose gradients are checked.
Tensor run_case(const Json& c, std::vector<std::pair<std::string, Tensor>>& leaves) {
  const std::string op = c["op"];
  Tensor x = leaf_from(c["input"]);
  leaves.push_back({"grad_input", x});
  if (op == "cross_entropy") {
    const bool indices = c["target_kind"] == "indices";
    return F::cross_entropy(x, tensor_from(c["target"], indices ? DType::i64 : DType::f64),
                            {.weight = tensor_from(c["weight"]),
                             .ignore_index = c["ignore_index"],
                             .reduction = reduction_from(c["reduction"]),
                             .label_smoothing = c["label_smoothing"]});
  }
  if (op == "nll_loss")
    return F::nll_loss(x, tensor_from(c["target"], DType::i64),
                       {.weight = tensor_from(c["weight"]),
                        .ignore_index = c["ignore_index"],
                        .reduction = reduction_from(c["reduction"])});
  Tensor target = c.contains("target") ? tensor_from(c["target"]) : Tensor();
  if (op == "mse_loss") return F::mse_loss(x, target, reduction_from(c["reduction"]));
  if (op == "l1_loss") return F::l1_loss(x, target, reduction_from(c["reduction"]));
  if (op == "smooth_l1_loss") return F::smooth_l1_loss(x, target, reduction_from(c["reduction"]), c["beta"]);
  if (op == "binary_cross_entropy_with_logits")
    return F::binary_cross_entropy_with_logits(x, target,
                                               {.weight = tensor_from(c["weight"]),
                                                .pos_weight = tensor_from(c["pos_weight"]),
                                                .reduction = reduction_from(c["reduction"])});
  Tensor weight = leaf_from(c["weight"]);
  leaves.push_back({"grad_weight", weight});
  Shape normalized;
  if (c.contains("normalized_shape"))
    for (int64_t d : c["normalized_shape"]) normalized.push_back(d);
  if (op == "rms_norm")
    return rms_norm(x, normalized, weight,
                    c["eps"].is_null() ? std::nullopt : std::optional<double>(c["eps"].get<double>()));
  Tensor bias = leaf_from(c["bias"]);
  leaves.push_back({"grad_bias", bias});
  if (op == "layer_norm") return layer_norm(x, normalized, weight, bias, c["eps"]);
  EXPECT_EQ(op, "batch_norm");
  Tensor running_mean = tensor_from(c["running_mean"]), running_var = tensor_from(c["running_var"]);
  Tensor out = batch_norm(x, running_mean, running_var, weight, bias, c["training"], c["momentum"], c["eps"]);
  expect_matches(running_mean, c["running_mean_after"], "batch_norm running_mean");
  expect_matches(running_var, c["running_var_after"], "batch_norm running_var");
  return out;
}

TEST(LossGolden, ValuesAndGradientsMatchPyTorch) {
  const Json& cases = golden()["cases"];
  EXPECT_GT(cases.size(), 100u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    const std::string what = "case " + std::to_string(i) + " (" + c["op"].get<std::string>() + ", " +
                             c.value("reduction", std::string("-")) + ")";
    SCOPED_TRACE(what);
    try {
      std::vector<std::pair<std::string, Tensor>> leaves;
      Tensor out = run_case(c, leaves);
      expect_matches(out, c["output"], what + " output");
      out.backward(tensor_from(c["grad_output"]));
      for (const auto& [name, leaf] : leaves)
        if (leaf.defined()) expect_matches(leaf.grad(), c[name], what + " " + name);
    } catch (const Error& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
}

// cross_entropy's fused gradient is the input's only: a target or class
// weight requiring grad got none, without a word (learnable soft labels
// silently froze), and ignore_index was taken and ignored with probability
// targets. All refused, as PyTorch refuses the weight and the ignore_index.
// Mutation caught: cross_entropy without the requires-grad checks.
TEST(Loss, CrossEntropyRefusesWhatItWouldIgnore) {
  Tensor input = randn({3, 4}).requires_grad_(true);
  Tensor soft = softmax(randn({3, 4}), 1).requires_grad_(true);
  EXPECT_EMBER_ERROR(F::cross_entropy(input, soft), "cross_entropy: the target requires grad");
  EXPECT_EMBER_ERROR(F::cross_entropy(input.detach(), soft), "cross_entropy: the target requires grad");
  Tensor weight = ones({4}).requires_grad_(true);
  EXPECT_EMBER_ERROR(F::cross_entropy(input, from_vector<int64_t>({0, 1, 2}), {.weight = weight}),
                     "not differentiable with respect to weight");
  EXPECT_EMBER_ERROR(F::cross_entropy(input, soft.detach(), {.ignore_index = 0}),
                     "cross_entropy: ignore_index (0) is not supported for probability targets");
  {
    NoGradGuard no_grad;  // nothing is recorded: nothing to refuse
    EXPECT_TRUE(F::cross_entropy(input, soft).defined());
  }
  EXPECT_TRUE(F::cross_entropy(input, soft.detach(), {.ignore_index = -1}).requires_grad());
}

TEST(Loss, ShapeMismatchesNameBothShapes) {
  Tensor a = zeros({3, 4}), b = zeros({4, 3});
  EXPECT_EMBER_ERROR(F::mse_loss(a, b), "mse_loss: input of shape [3, 4] and target of shape [4, 3]");
  EXPECT_EMBER_ERROR(F::l1_loss(a, b), "l1_loss: input of shape [3, 4] and target of shape [4, 3]");
  EXPECT_EMBER_ERROR(F::smooth_l1_loss(a, b), "smooth_l1_loss: input of shape [3, 4]");
  EXPECT_EMBER_ERROR(F::smooth_l1_loss(a, a, Reduction::mean, -1), "beta must be non-negative, got -1");
  EXPECT_EMBER_ERROR(F::binary_cross_entropy_with_logits(a, b), "input of shape [3, 4] and target of shape [4, 3]");
  EXPECT_EMBER_ERROR(F::binary_cross_entropy_with_logits(a, a, {.weight = zeros({2})}), "[2]");
  EXPECT_EMBER_ERROR(F::nll_loss(a, from_vector<int64_t>({0, 1})),
                     "expected targets of shape [3] for input [3, 4], got [2]");
  EXPECT_EMBER_ERROR(F::nll_loss(a, from_vector<int64_t>({0, 4, 1})),
                     "nll_loss: target 4 is out of bounds for 4 classes");
  EXPECT_EMBER_ERROR(F::nll_loss(a, zeros({3})), "expected class-index targets of dtype int64 or int32, got float32");
  EXPECT_EMBER_ERROR(F::cross_entropy(a, from_vector<int64_t>({0, 9, 1})), "target 9 is out of bounds for 4 classes");
}

// Large logits: the stable form stays finite where log(sigmoid(x)) would overflow.
TEST(Loss, BinaryCrossEntropyWithLogitsIsStable) {
  Tensor x = from_vector<float>({100, -100}), t = from_vector<float>({0, 1});
  std::vector<float> loss =
      F::binary_cross_entropy_with_logits(x, t, {.reduction = Reduction::none}).to_vector<float>();
  EXPECT_FLOAT_EQ(loss[0], 100.0f);
  EXPECT_FLOAT_EQ(loss[1], 100.0f);
  // An infinite logit on the wrong side costs inf, as PyTorch's (mutation:
  // max(-x, 0) as (|x| - x) / 2 -> inf - inf = NaN); its gradient is 1.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  Tensor y = from_vector<float>({kInf}).requires_grad_(true);
  Tensor far = F::binary_cross_entropy_with_logits(y, from_vector<float>({0}), {.reduction = Reduction::none});
  EXPECT_EQ(far.to_vector<float>(), (std::vector<float>{kInf}));
  sum(far).backward();
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{1.0f}));
}

// d/dx at x = 0 is sigmoid(0) - t = 1/2 - t (PyTorch 1.13's values below).
// Catches: max(-x, 0) written clamp_min(-x, 0), whose boundary passes the whole
// gradient at a zero logit ([-1, 0, -1, -0.5] here, and -2 with pos_weight 2).
TEST(Loss, BinaryCrossEntropyWithLogitsGradientAtZeroLogits) {
  Tensor x = zeros({4}).requires_grad_(true);
  F::binary_cross_entropy_with_logits(x, from_vector<float>({1, 0, 1, 0.5}), {.reduction = Reduction::sum})
      .backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{-0.5f, 0.5f, -0.5f, 0.0f}));
  Tensor y = from_vector<float>({100, -100, 0}).requires_grad_(true);
  Tensor loss = F::binary_cross_entropy_with_logits(y, from_vector<float>({0, 1, 1}),
                                                    {.pos_weight = from_vector<float>({2}), .reduction = Reduction::sum});
  EXPECT_NEAR(loss.item<float>(), 301.386292f, 1e-3f);
  loss.backward();
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{1.0f, -2.0f, -1.0f}));
}

// A micro-batch whose targets are all ignore_index: the mean is NaN (0 / 0, as
// PyTorch's), its gradient zero. Catches: the division by the zero weight
// sending 0 * inf = NaN into the gradient, which an accumulated gradient keeps.
TEST(Loss, NllLossWithEveryTargetIgnoredHasZeroGradient) {
  Tensor w = from_vector<float>({0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f}).reshape({2, 3}).requires_grad_(true);
  F::nll_loss(log_softmax(w, 1), from_vector<int64_t>({0, 2})).backward();
  const std::vector<float> first = w.grad().to_vector<float>();
  Tensor loss = F::nll_loss(log_softmax(w, 1), from_vector<int64_t>({-100, -100}));
  EXPECT_TRUE(std::isnan(loss.item<float>()));
  loss.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), first);
  EXPECT_EMBER_ERROR(F::nll_loss(zeros({2, 3}), from_vector<int64_t>({0, 1}), {.weight = ones({3}, {.dtype = DType::f64})}),
                     "nll_loss: expected weight [3] of dtype float32 on cpu (one per class, the input's dtype), got [3] "
                     "of float64 on cpu");
}

// An ignored row still read class 0 and multiplied it by a zero weight: a
// masked class (-inf under log_softmax) made the loss NaN, where PyTorch and
// cross_entropy skip the row. Mutation caught: picked without the where.
TEST(Loss, NllLossIgnoresARowWhoseClassZeroIsMinusInfinity) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  Tensor logits = from_vector<float>({kMinusInf, 1.0f, 2.0f, 0.5f, kMinusInf, 0.3f, -1.0f, 2.5f, kMinusInf, 0.7f, 0.1f,
                                      -0.4f}, {3, 4});
  Tensor targets = from_vector<int64_t>({2, 1, -100});
  Tensor none = F::nll_loss(log_softmax(logits, 1), targets, {.reduction = Reduction::none});
  EXPECT_EQ(none.to_vector<float>()[2], 0.0f);
  EXPECT_NEAR(F::nll_loss(log_softmax(logits, 1), targets).item<float>(), 1.3981372f, 1e-6);
  EXPECT_NEAR(F::cross_entropy(logits, targets).item<float>(), 1.3981372f, 1e-6);
}

// Both branches of smooth_l1's where are differentiated: an infinite
// difference sent 0 * inf = NaN back from the quadratic branch; PyTorch
// gives +-1. Mutation caught: squaring the unclamped difference.
TEST(Loss, SmoothL1GradientOfAnInfiniteDifferenceIsItsSign) {
  Tensor x = from_vector<float>({std::numeric_limits<float>::infinity(), 1e30f, -1e30f, 0.25f}).requires_grad_(true);
  F::smooth_l1_loss(x, zeros({4}), Reduction::sum, 1.0).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{1, 1, -1, 0.25f}));
}

}  // namespace
}  // namespace ember::testing
