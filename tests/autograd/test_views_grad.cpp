// Gradients of the views of some of a tensor's elements (slice, narrow,
// select, diagonal: StridedViewBackward, which replays the view over a
// contiguous gradient of the input's shape; as_strided: AsStridedBackward,
// over the input's memory). Forward: core/ops/views.cpp; gradients:
// autograd/functions/shape.cpp. The f64 gradcheck cases are in
// test_gradcheck.cpp ("strided_view").
#include "autograd/leaf.h"

namespace ember::testing {
namespace {

std::vector<double> values(const Tensor& t) { return t.contiguous().to(DType::f64).to_vector<double>(); }

// Catches a view gradient laid out over the input's memory instead of its
// elements (the formula before: with an expanded input every row shares the
// memory of the one that was picked, so the gradient came back once per
// row, 3 and 4 here instead of 1). Run once with that formula: fails.
TEST(ViewGrad, PickingFromAnExpandedTensorGivesEachElementItsOwnGradient) {
  struct Case {
    const char* name;
    Tensor (*pick)(const Tensor&);
    std::vector<double> expected;  // x's gradient, x of shape [1, 4] expanded to [3, 4] ([4, 4] for the diagonal)
  };
  const Case cases[] = {
      {"narrow", [](const Tensor& e) { return e.narrow(0, 1, 1); }, {1, 1, 1, 1}},
      {"select", [](const Tensor& e) { return e.select(0, 2); }, {1, 1, 1, 1}},
      {"stepped slice", [](const Tensor& e) { return e.slice(0, 0, 3, 2); }, {2, 2, 2, 2}},
      {"slice of columns", [](const Tensor& e) { return e.slice(1, 1, 3); }, {0, 3, 3, 0}},
      {"diagonal", [](const Tensor& e) { return e.diagonal(); }, {1, 1, 1, 1}},
      {"diagonal above", [](const Tensor& e) { return e.diagonal(1); }, {0, 1, 1, 1}},
  };
  for (const Case& c : cases) {
    Tensor x = leaf({1, 2, 3, 4}, {1, 4});
    const int64_t rows = std::string_view(c.name).starts_with("diagonal") ? 4 : 3;
    sum(c.pick(x.expand({rows, 4}))).backward();
    EXPECT_EQ(values(x.grad()), c.expected) << c.name;
  }
}

// Random chains of slice, select and diagonal over expanded, transposed and
// stepped inputs, against the same chain over a contiguous copy of the input
// (whose gradient goes through the copy, not through a view of shared
// memory), with random weights so every element's gradient differs.
TEST(ViewGrad, ChainsOverExpandedAndStridedInputsMatchAContiguousCopy) {
  std::uniform_int_distribution<int> pick(0, 3);
  for (int trial = 0; trial < 40; ++trial) {
    Tensor x = random_tensor({1, 5, 6}, DType::f64, -1, 1);
    x.requires_grad_(true);
    auto input = [&](const Tensor& leaf_tensor) {
      Tensor e = leaf_tensor.expand({4, 5, 6});
      return trial % 2 ? e.transpose(0, 2) : e.slice(2, 0, 6, 2);
    };
    const int a = pick(rng()), b = pick(rng());
    auto chain = [&](Tensor t) {
      for (int step : {a, b}) {
        if (t.dim() < 2 || t.numel() == 0) break;
        if (step == 0) t = t.narrow(0, t.shape()[0] / 2, t.shape()[0] - t.shape()[0] / 2);
        if (step == 1) t = t.select(1, t.shape()[1] - 1);
        if (step == 2) t = t.diagonal(0, 0, t.dim() - 1);
        if (step == 3) t = t.slice(-1, 1, t.shape()[t.dim() - 1], 2);
      }
      return t;
    };
    Tensor viewed = chain(input(x));
    Tensor weights = random_tensor(viewed.shape(), DType::f64, -1, 1);
    sum(viewed * weights).backward();
    Tensor y = x.detach().clone();
    y.requires_grad_(true);
    sum(chain(input(y).contiguous()) * weights).backward();
    std::vector<double> got = values(x.grad()), expected = values(y.grad());
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[i], 1e-12) << fmt::format("trial {} steps {} {} element {}", trial, a, b, i);
  }
}

// as_strided picks memory locations: over a dense input its gradient counts
// each location once per output element (here out = [[x0, x1], [x1, x2]]).
// Catches the gradient copied into the overlapping locations instead of
// added there (the formula before: x1 got 1, not 2). Run once: fails.
TEST(ViewGrad, AsStridedOverDenseMemoryCountsEachLocation) {
  Tensor x = leaf({1, 2, 3});
  sum(as_strided(x, {2, 2}, {1, 1}, 0)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 2, 1}));
}

// as_strided's offset is the storage's: of a view it may reach memory
// outside the view, whose gradient no element of the view receives, as
// PyTorch (mutation: the buffer sized to the input's extent only -> "offset
// -1 reach element 1 of a storage of 2 elements" in backward).
TEST(ViewGrad, AsStridedOfAViewReachingOutsideItGivesTheViewItsShare) {
  Tensor x = leaf({0, 1, 2, 3, 4, 5});
  sum(as_strided(x.narrow(0, 2, 2), {3}, {1}, 1)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 0, 1, 1, 0, 0}));
  Tensor y = leaf({0, 1, 2, 3, 4, 5});
  sum(as_strided(y.narrow(0, 0, 2), {2}, {2}, 1)).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{0, 1, 0, 0, 0, 0}));
}

// Over an input whose elements share memory the memory's gradient cannot be
// split between them: refused when recording, with what to do; allowed
// without a gradient, and after contiguous().
TEST(ViewGrad, AsStridedOfAnInputWhoseElementsShareMemoryIsRefusedWithAGradient) {
  Tensor x = leaf({1, 2, 3, 4}, {1, 4});
  Tensor e = x.expand({3, 4});
  for (const char* fragment : {"as_strided:", "share memory", "[3, 4]", "contiguous()"})
    EXPECT_EMBER_ERROR(as_strided(e, {2}, {1}, 0), fragment);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(values(as_strided(e, {2}, {1}, 1)), (std::vector<double>{2, 3}));
  }
  Tensor copy = e.contiguous();
  sum(as_strided(copy, {2}, {4}, 1)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{0, 2, 0, 0}));
}

}  // namespace
}  // namespace ember::testing
