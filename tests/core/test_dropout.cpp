// dropout (core/ops/dropout.h): the mask's statistics and scaling, bit-equal
// fast and reference kernels for every dtype and layout, the same mask for a
// seed whatever the thread count, fresh masks from consecutive calls, the
// identity in eval mode, the gradient through the regenerated mask, errors.
#include <cmath>

#include "core/ops/dropout.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

TEST(Dropout, DropsAboutPAndScalesTheRestByOneOverOneMinusP) {
  for (double p : {0.1, 0.3, 0.5, 0.9}) {
    Generator generator(11);
    const int64_t n = 200000;
    std::vector<float> values = dropout(ones({n}), p, true, &generator).to_vector<float>();
    int64_t dropped = 0;
    for (float v : values) {
      if (v == 0) ++dropped;
      else EXPECT_EQ(v, float(1 / (1 - p))) << "p " << p;
    }
    // Binomial(n, p): 5 standard deviations is far beyond chance.
    EXPECT_NEAR(double(dropped) / double(n), p, 5 * std::sqrt(p * (1 - p) / double(n))) << "p " << p;
  }
  EXPECT_EQ(sum(dropout(ones({1000}), 1.0)).item<double>(), 0.0);  // p = 1 drops everything
}

TEST(Dropout, FastKernelEqualsReferenceBitForBitForEveryDtypeAndLayout) {
  for (DType dtype : kFloatingDTypes) {
    for (const Shape& shape : {Shape{37}, Shape{5, 7}, Shape{0, 3}, Shape{3, 1, 4}, Shape{}}) {
      Tensor x = random_tensor(shape, dtype);
      Tensor expected = reference([&] { Generator g(3); return dropout(x, 0.4, true, &g); });
      for (const Layout& layout : layouts_of(x)) {
        Generator g(3);
        EXPECT_EQ(dropout(layout.tensor, 0.4, true, &g).to_vector<double>(), expected.to_vector<double>())
            << dtype_name(dtype) << " " << shape.str() << " " << layout.name;
      }
    }
  }
}

TEST(Dropout, SameSeedSameMaskWhateverTheThreadCountAndFreshMasksAfter) {
  Tensor x = random_tensor({300001}, DType::f32);
  Generator one(42);
  Tensor first = dropout(x, 0.5, true, &one), second = dropout(x, 0.5, true, &one);
  set_num_threads(2);
  Generator two(42);
  Tensor again = dropout(x, 0.5, true, &two);
  set_num_threads(1);
  EXPECT_EQ(first.to_vector<float>(), again.to_vector<float>());
  EXPECT_NE(first.to_vector<float>(), second.to_vector<float>());  // the stream moved on
  manual_seed(9);
  Tensor from_default = dropout(x, 0.5);
  manual_seed(9);
  EXPECT_EQ(dropout(x, 0.5).to_vector<float>(), from_default.to_vector<float>());
}

TEST(Dropout, IdentityInEvalModeAndForZeroP) {
  Tensor x = random_tensor({4, 5}, DType::f32);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0).is_same(x));
}

// y = x m / (1 - p): with x = 1, dy/dx summed is y itself.
TEST(Dropout, GradientReusesTheForwardMask) {
  Tensor x = ones({1000}, {.dtype = DType::f64});
  x.requires_grad_(true);
  Generator g(8);
  Tensor y = dropout(x, 0.25, true, &g);
  sum(y * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (y.detach() * 3.0).to_vector<double>());
}

TEST(Dropout, ErrorsNameTheOffendingValues) {
  EXPECT_EMBER_ERROR(dropout(ones({3}), 1.5), "p must be a probability in [0, 1], got 1.5");
  EXPECT_EMBER_ERROR(dropout(ones({3}), -0.1), "got -0.1");
  EXPECT_EMBER_ERROR(dropout(ones({3}, {.dtype = DType::i32}), 0.5), "expected a floating point input, got int32");
}

}  // namespace
}  // namespace ember::testing
