// Exact hand cases for the reduction gradients (autograd/functions/reduction.cpp):
// zeros in prod, ties in max-like reductions, -inf in softmax, zero norms and
// stds, non-contiguous inputs, and f32 gradients against f64 ones.
#include <cmath>
#include <limits>

#include "support/test_support.h"
#include "autograd/leaf.h"

namespace ember::testing {
namespace {

// d sum(out * weights) / dx.
Tensor gradient(const Tensor& out, const Tensor& x, const Tensor& weights) {
  return autograd::grad({sum(out * weights)}, {x})[0];
}
Tensor gradient(const Tensor& out, const Tensor& x) { return autograd::grad({sum(out)}, {x})[0]; }

std::vector<double> values(const Tensor& t) { return t.contiguous().to(DType::f64).to_vector<double>(); }

TEST(ReductionGrads, ProdWithOneZeroGivesTheProductOfTheOthersAtTheZero) {
  Tensor x = leaf({2, 0, 3, 4}, {4});
  EXPECT_EQ(values(gradient(prod(x), x)), (std::vector<double>{0, 24, 0, 0}));
  Tensor rows = leaf({2, 0, 3, 1, 2, 3}, {2, 3});
  EXPECT_EQ(values(gradient(prod(rows, {1}), rows)), (std::vector<double>{0, 6, 0, 6, 3, 2}));
}

TEST(ReductionGrads, ProdWithTwoZerosHasZeroGradient) {
  Tensor x = leaf({2, 0, 3, 0}, {4});
  EXPECT_EQ(values(gradient(prod(x), x)), (std::vector<double>{0, 0, 0, 0}));
  Tensor rows = leaf({0, 0, 5, 1, 2, 3}, {2, 3});
  EXPECT_EQ(values(gradient(prod(rows, {1}, true), rows)), (std::vector<double>{0, 0, 0, 6, 3, 2}));
}

TEST(ReductionGrads, AmaxAndFullMaxSplitTiesEvenly) {
  Tensor x = leaf({1, 3, 3, 2}, {4});
  EXPECT_EQ(values(gradient(amax(x), x)), (std::vector<double>{0, 0.5, 0.5, 0}));
  EXPECT_EQ(values(gradient(max(x), x)), (std::vector<double>{0, 0.5, 0.5, 0}));
  EXPECT_EQ(values(gradient(amin(x), x)), (std::vector<double>{1, 0, 0, 0}));
  Tensor m = leaf({1, 1, 1, 4, 0, 4}, {2, 3});
  EXPECT_EQ(values(gradient(amin(m, {1}, true), m)), (std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3, 0, 1, 0}));
  EXPECT_EQ(values(gradient(max(m), m)), (std::vector<double>{0, 0, 0, 0.5, 0, 0.5}));
  EXPECT_EQ(values(gradient(min(m), m)), (std::vector<double>{0, 0, 0, 0, 1, 0}));
}

// PyTorch 1.13: max/min over all give a NaN result's gradient to the NaN
// elements (split among them); amax's ties compare unequal to NaN and give
// NaN everywhere. Catches: max sharing amax's formula (NaN everywhere).
TEST(ReductionGrads, FullMaxOfANaNGoesToTheNaNs) {
  const double nan = std::nan("");
  Tensor x = leaf({1, nan, 3, nan}, {4});
  EXPECT_EQ(values(gradient(max(x), x)), (std::vector<double>{0, 0.5, 0, 0.5}));
  EXPECT_EQ(values(gradient(min(x), x)), (std::vector<double>{0, 0.5, 0, 0.5}));
  for (double value : values(gradient(amax(x), x))) EXPECT_TRUE(std::isnan(value));
}

TEST(ReductionGrads, MaxAlongADimGivesEverythingToTheReturnedIndex) {
  Tensor x = leaf({1, 3, 3, 2, 5, 5, 0, 5}, {2, 4});
  ValuesIndices result = max(x, 1);
  EXPECT_TRUE(result.values.requires_grad());
  EXPECT_FALSE(result.indices.requires_grad());
  EXPECT_EQ(result.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(values(gradient(result.values, x)), (std::vector<double>{0, 1, 0, 0, 1, 0, 0, 0}));
  ValuesIndices low = min(x, 0, true);
  EXPECT_FALSE(low.indices.requires_grad());
  EXPECT_EQ(values(gradient(low.values, x, from_vector<double>({1, 2, 3, 4}, {1, 4}))),
            (std::vector<double>{1, 2, 0, 4, 0, 0, 3, 0}));  // column minima at rows 0, 0, 1, 0
}

TEST(ReductionGrads, SoftmaxGivesFiniteZeroGradientsAtMinusInfinity) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = leaf({0, -inf, 1, 2, 3, -inf}, {2, 3});
  Tensor weights = from_vector<double>({1, -2, 3, 0.5, 4, -1}, {2, 3});
  std::vector<double> got = values(gradient(softmax(x, 1), x, weights));
  for (double v : got) EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_EQ(got[1], 0);
  EXPECT_EQ(got[5], 0);
  // The finite entries match softmax over the finite logits alone.
  Tensor finite = leaf({0, 1}, {2});
  std::vector<double> expected = values(gradient(softmax(finite, 0), finite, from_vector<double>({1, 3}, {2})));
  EXPECT_NEAR(got[0], expected[0], 1e-12);
  EXPECT_NEAR(got[2], expected[1], 1e-12);
}

TEST(ReductionGrads, VarStdAndNormHandValues) {
  Tensor x = leaf({1, 2, 3, 4}, {4});
  std::vector<double> var_grad = values(gradient(var(x), x));  // 2 (x - 2.5) / 3
  std::vector<double> expected = {-1, -1.0 / 3, 1.0 / 3, 1};
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(var_grad[i], expected[i], 1e-12);
  std::vector<double> biased = values(gradient(var(x, {}, false), x));  // 2 (x - 2.5) / 4
  EXPECT_NEAR(biased[0], -0.75, 1e-12);
  // A constant input has std 0: gradient 0, not nan (as PyTorch).
  Tensor constant = leaf({2, 2, 2}, {3});
  EXPECT_EQ(values(gradient(std(constant), constant)), (std::vector<double>{0, 0, 0}));
  // The 2-norm of zeros has gradient 0; the inf-norm splits ties of |x| with their signs.
  Tensor zero = leaf({0, 0}, {2});
  EXPECT_EQ(values(gradient(norm(zero), zero)), (std::vector<double>{0, 0}));
  Tensor ties = leaf({-3, 1, 3}, {3});
  EXPECT_EQ(values(gradient(norm(ties, INFINITY), ties)), (std::vector<double>{-0.5, 0, 0.5}));
  EXPECT_EQ(values(gradient(norm(ties, 0), ties)), (std::vector<double>{0, 0, 0}));
  // p < 1: a zero element's gradient is 0, as PyTorch's (PyTorch 1.13: [0, 2.4142, 1.7071]).
  // Catches: sign * |x|^(p-1) taken as 0 * inf (NaN) at the zero.
  Tensor with_zero = leaf({0, 1, 2}, {3});
  const std::vector<double> half = values(gradient(norm(with_zero, 0.5), with_zero));
  EXPECT_EQ(half[0], 0);
  EXPECT_NEAR(half[1], 2.414213562373095, 1e-12);
  EXPECT_NEAR(half[2], 1.7071067811865475, 1e-12);
}

TEST(ReductionGrads, LogsumexpGradientIsTheSoftmax) {
  Tensor x = leaf({0.5, -1, 2, 3, 0, 1}, {2, 3});
  EXPECT_TRUE(all_close(gradient(logsumexp(x, {1}), x), softmax(x.detach(), 1)));
}

// A 0-d input reduced over dim 0 gets a 0-d gradient; an empty softmax an empty one.
TEST(ReductionGrads, ZeroDimAndEmptyInputs) {
  Tensor x = scalar_tensor(1.5, {.dtype = DType::f64}).requires_grad_(true);
  EXPECT_EQ(values(gradient(amax(x, {0}), x)), (std::vector<double>{1}));
  EXPECT_EQ(values(gradient(max(x, 0).values, x)), (std::vector<double>{1}));
  EXPECT_EQ(values(gradient(prod(x, {0}, true), x)), (std::vector<double>{1}));
  EXPECT_EQ(values(gradient(softmax(x, 0), x)), (std::vector<double>{0}));
  for (const Tensor& out : {sum(x, {0}), logsumexp(x, {-1}, true), var(x, {0}, false), std(x, {0}, false),
                            norm(x, 2, {0}), log_softmax(x, 0)})
    EXPECT_EQ(gradient(out, x).shape(), Shape{});
  Tensor empty_input = zeros({0, 3}, {.dtype = DType::f64}).requires_grad_(true);
  EXPECT_EQ(gradient(log_softmax(empty_input, 1), empty_input).shape(), (Shape{0, 3}));
}

// Every op on a transposed and on a step-2 sliced leaf matches the same op on a contiguous copy.
TEST(ReductionGrads, NonContiguousInputsMatchContiguousOnes) {
  using Op = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"prod", [](const Tensor& x) { return prod(x, {0, 2}); }},
      {"amax", [](const Tensor& x) { return amax(x, {1}, true); }},
      {"amin", [](const Tensor& x) { return amin(x, {0, 2}); }},
      {"max", [](const Tensor& x) { return max(x); }},
      {"min", [](const Tensor& x) { return min(x); }},
      {"max_dim", [](const Tensor& x) { return max(x, 1).values; }},
      {"min_dim", [](const Tensor& x) { return min(x, 0, true).values; }},
      {"var", [](const Tensor& x) { return var(x, {0, 2}); }},
      {"std", [](const Tensor& x) { return std(x, {1}, false, true); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {2}); }},
      {"norm", [](const Tensor& x) { return norm(x, 3, {0, 1}); }},
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, 2); }},
  };
  Tensor base = random_tensor({4, 5, 6}, DType::f64);
  std::vector<Tensor> layouts = {base.transpose(0, 2), base.slice(1, 0, 5, 2)};
  for (const auto& [name, op] : ops) {
    for (const Tensor& layout : layouts) {
      SCOPED_TRACE(name);
      Tensor strided = layout.detach();
      strided.requires_grad_(true);
      Tensor dense = layout.contiguous().detach();
      dense.requires_grad_(true);
      Tensor out = op(strided);
      Tensor weights = random_tensor(out.shape(), DType::f64);
      EXPECT_TRUE(all_close(gradient(out, strided, weights), gradient(op(dense), dense, weights), 1e-12, 1e-12));
    }
  }
}

TEST(ReductionGrads, F32GradientsMatchF64Ones) {
  using Op = std::function<Tensor(const Tensor&)>;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"softmax", [](const Tensor& x) { return softmax(x, 1); }},
      {"log_softmax", [](const Tensor& x) { return log_softmax(x, -1); }},
      {"var", [](const Tensor& x) { return var(x, {0, 2}); }},
  };
  Tensor values64 = random_tensor({3, 17, 9}, DType::f64, -4, 4);
  for (const auto& [name, op] : ops) {
    SCOPED_TRACE(name);
    Tensor x64 = values64.clone().requires_grad_(true);
    Tensor x32 = values64.to(DType::f32).requires_grad_(true);
    Tensor out64 = op(x64);
    Tensor weights = random_tensor(out64.shape(), DType::f64);
    Tensor grad64 = gradient(out64, x64, weights);
    Tensor grad32 = gradient(op(x32), x32, weights.to(DType::f32));
    EXPECT_EQ(grad32.dtype(), DType::f32);
    EXPECT_TRUE(all_close(grad32.to(DType::f64), grad64, 1e-4, 1e-5));
  }
}

}  // namespace
}  // namespace ember::testing
