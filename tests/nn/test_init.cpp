// nn::init: fans and gains exactly as torch.nn.init computes them, and the
// statistics (bounds, mean, std) of each initialiser on large tensors.
#include <algorithm>
#include <cmath>

#include "support/test_support.h"

namespace ember {
namespace {

namespace init = nn::init;
using testing::all_close;

double mean_of(const Tensor& t) { return mean(t.to(DType::f64)).item<double>(); }
double std_of(const Tensor& t) { return std(t.to(DType::f64)).item<double>(); }
double max_abs(const Tensor& t) { return max(abs(t)).item<double>(); }

TEST(Init, FansAsPyTorch) {
  init::Fans linear = init::calculate_fan_in_and_fan_out(empty({4, 3}));
  EXPECT_EQ(linear.fan_in, 3);
  EXPECT_EQ(linear.fan_out, 4);
  // Conv weight [out, in, kH, kW]: the receptive field multiplies both fans.
  init::Fans conv = init::calculate_fan_in_and_fan_out(empty({8, 4, 3, 5}));
  EXPECT_EQ(conv.fan_in, 60);
  EXPECT_EQ(conv.fan_out, 120);
  EXPECT_EMBER_ERROR(init::calculate_fan_in_and_fan_out(empty({5})), "fewer than 2 dimensions");
}

TEST(Init, GainsAsPyTorch) {
  using init::Nonlinearity;
  EXPECT_EQ(init::calculate_gain(Nonlinearity::linear), 1.0);
  EXPECT_EQ(init::calculate_gain(Nonlinearity::conv2d), 1.0);
  EXPECT_EQ(init::calculate_gain(Nonlinearity::sigmoid), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::relu), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::leaky_relu), std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  // Linear's a = sqrt(5): gain sqrt(2 / 6), so kaiming_uniform_'s bound is 1 / sqrt(fan_in).
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::leaky_relu, std::sqrt(5.0)), std::sqrt(1.0 / 3.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(Nonlinearity::selu), 0.75);
}

TEST(Init, UniformAndNormal) {
  Tensor t = empty({500, 400});
  init::uniform_(t, -2.0, 3.0);
  EXPECT_GE(min(t).item<double>(), -2.0);
  EXPECT_LT(max(t).item<double>(), 3.0);
  EXPECT_NEAR(mean_of(t), 0.5, 0.01);
  EXPECT_NEAR(std_of(t), 5.0 / std::sqrt(12.0), 0.01);
  init::normal_(t, 1.5, 0.5);
  EXPECT_NEAR(mean_of(t), 1.5, 0.005);
  EXPECT_NEAR(std_of(t), 0.5, 0.005);
  // f64 and bf16 tensors are filled too.
  Tensor d = empty({1000}, {.dtype = DType::f64});
  init::normal_(d);
  EXPECT_NEAR(std_of(d), 1.0, 0.08);
  Tensor b = empty({1000}, {.dtype = DType::bf16});
  init::uniform_(b);
  EXPECT_NEAR(mean_of(b), 0.5, 0.03);
  EXPECT_EMBER_ERROR(init::normal_(empty({2}, {.dtype = DType::i64})), "needs a floating tensor");
  // low > high drew from [high, low) without a word; PyTorch refuses it, and infinite bounds.
  // Mutation caught: the bounds check removed.
  EXPECT_EMBER_ERROR(init::uniform_(empty({2}), 1.0, 0.0), "nn::init::uniform_: expects finite low <= high, got low 1 "
                                                           "and high 0");
  EXPECT_EMBER_ERROR(init::uniform_(empty({2}), 0.0, INFINITY), "got low 0 and high inf");
  EXPECT_TRUE(all_close(init::uniform_(empty({2}), 3.0, 3.0), full({2}, 3.0), 0, 0));
}

// A bf16 or f16 tensor took 24-bit draws rounded into its dtype: uniform_(0, 1)
// gave exact ones (385 of 200k in bf16), kaiming_uniform_ values past its bound.
// A value that rounds up to `high` becomes `low` now, as PyTorch 2's. Bounds
// past the dtype's range filled the tensor with inf: refused, as PyTorch.
// Mutation caught: uniform_ without that wrap (the maxima below reach 1).
TEST(Init, SixteenBitUniformStaysBelowItsUpperBound) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor t = empty({200000}, {.dtype = dtype});
    init::uniform_(t, 0.0, 1.0);
    EXPECT_LT(max(t).item<double>(), 1.0) << fmt::format("{}", dtype);
    EXPECT_GE(min(t).item<double>(), 0.0) << fmt::format("{}", dtype);
    EXPECT_NEAR(mean(t.to(DType::f32)).item<double>(), 0.5, 0.01) << fmt::format("{}", dtype);
  }
  EXPECT_EMBER_ERROR(init::uniform_(empty({2}), -3e38, 3e38), "nn::init::uniform_: low -3e+38 and high 3e+38");
  EXPECT_EMBER_ERROR(init::uniform_(empty({2}, {.dtype = DType::f16}), 0, 1e5), "do not fit dtype float16");
  EXPECT_EMBER_ERROR(init::uniform_(empty({2}), 1e39, 1e39), "do not fit dtype float32");
}

// PyTorch 2's 16-bit uniform_ rounds f32 draws into the dtype. On a grid of
// bf16's own (256 values in [low, high)) kaiming_uniform_ had no weight nearer
// 0 than bound/128, and 256 levels where PyTorch gives about 3000. Mutation
// caught: uniform_ drawing on the dtype's grid (the values differ from the
// rounded f32 draws, and the levels fall to 256).
TEST(Init, SixteenBitUniformIsTheF32DrawRoundedAndWrapped) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (auto [low, high] : {std::pair{-1.0, 1.0}, {0.1, 0.7}, {-0.03125, 0.03125}}) {
      const std::string what = fmt::format("{} [{}, {})", dtype, low, high);
      Tensor t = empty({100000}, {.dtype = dtype});
      manual_seed(7);
      init::uniform_(t, low, high);
      manual_seed(7);
      Tensor rounded = (rand({100000}) * (high - low) + low).to(dtype);
      std::vector<double> got = t.to_vector<double>(), drawn = rounded.to_vector<double>();
      const double high_in_dtype = full({}, high, {.dtype = dtype}).item<double>();
      const double low_in_dtype = full({}, low, {.dtype = dtype}).item<double>();
      size_t wrapped = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const bool wraps = drawn[i] == high_in_dtype;
        wrapped += wraps;
        ASSERT_EQ(got[i], wraps ? low_in_dtype : drawn[i]) << what << " element " << i;
      }
      EXPECT_GT(wrapped, 0u) << what;  // the wrap ran, not only a draw that never rounds up
      std::sort(got.begin(), got.end());
      EXPECT_GT(std::unique(got.begin(), got.end()) - got.begin(), 300) << what;  // a 256-value grid has 256
    }
  }
}

TEST(Init, TruncNormalStaysInItsBoundsWithTheTruncatedMoments) {
  manual_seed(85);  // not the stream the tests before left
  Tensor t = empty({400, 500});
  init::trunc_normal_(t);  // N(0, 1) on [-2, 2]
  EXPECT_GE(min(t).item<double>(), -2.0);
  EXPECT_LE(max(t).item<double>(), 2.0);
  EXPECT_NEAR(mean_of(t), 0.0, 0.008);  // 4 standard errors of 2e5 draws of sd 0.88
  // Var of N(0, 1) truncated to [-2, 2]: 1 - 2 * 2 phi(2) / (Phi(2) - Phi(-2)).
  double phi = std::exp(-2.0) / std::sqrt(2.0 * M_PI);
  double mass = std::erf(2.0 / std::sqrt(2.0));
  EXPECT_NEAR(std_of(t), std::sqrt(1.0 - 4.0 * phi / mass), 0.005);
  // nanoGPT-style std 0.02, cut at +-2 std, and a one-sided window.
  init::trunc_normal_(t, 0.0, 0.02, -0.04, 0.04);
  EXPECT_LE(max_abs(t), 0.04);
  EXPECT_NEAR(std_of(t), 0.02 * std::sqrt(1.0 - 4.0 * phi / mass), 0.0002);
  init::trunc_normal_(t, 0.0, 1.0, 0.5, 1.0);
  EXPECT_GE(min(t).item<double>(), 0.5);
  EXPECT_LE(max(t).item<double>(), 1.0);
}

// Far in one tail the inverse-CDF draw collapsed: 2 cdf - 1 is within ulps
// of +-1 at both bounds, so [0, 1]-sd draws on [8, 9] took 13 values and on
// [9, 10] or [-40, -38] all landed on one bound. The moments here are
// PyTorch 2.15's (rejection sampling, exact) over 10^6 draws. Mutation
// caught: the kFarTail branch removed -> every [-40, -38] value is -40.
TEST(Init, TruncNormalFarInATailHasTheTruncatedMoments) {
  struct Case {
    double mean, std, low, high, expected_mean, expected_std;
  };
  for (const Case& c : {Case{0, 1, 8, 9, 8.121316, 0.119182}, Case{0, 1, -10, -9, -9.108401, 0.106863},
                        Case{0, 1, -40, -38, -38.026287, 0.026387}, Case{0, 0.02, 0.16, 0.2, 0.162424, 0.002392},
                        Case{1, 0.1, -1, 0, -0.009799, 0.009774}, Case{0, 1, 6, INFINITY, 6.158483, 0.154879}}) {
    SCOPED_TRACE(fmt::format("N({}, {}) on [{}, {}]", c.mean, c.std, c.low, c.high));
    Tensor t = empty({200000}, {.dtype = DType::f64});
    init::trunc_normal_(t, c.mean, c.std, c.low, c.high);
    EXPECT_GE(min(t).item<double>(), c.low);
    EXPECT_LE(max(t).item<double>(), c.high);
    EXPECT_NEAR(mean_of(t), c.expected_mean, 0.02 * c.expected_std);
    EXPECT_NEAR(std_of(t), c.expected_std, 0.02 * c.expected_std);
  }
}

// A bias=false layer's undefined bias crashed the fan-based initialisers.
TEST(Init, UndefinedAndDegenerateTensorsAreRefusedByName) {
  EXPECT_EMBER_ERROR(init::kaiming_uniform_(Tensor()), "nn::init::kaiming_uniform_: the tensor is undefined");
  EXPECT_EMBER_ERROR(init::xavier_normal_(Tensor()), "nn::init::xavier_normal_: the tensor is undefined");
  EXPECT_EMBER_ERROR(init::calculate_fan_in_and_fan_out(Tensor()), "nn::init: fan in and fan out of an undefined");
  EXPECT_EMBER_ERROR(init::xavier_uniform_(empty({0, 0})), "nn::init::xavier_uniform_: fan_in + fan_out is 0");
  EXPECT_EMBER_ERROR(init::xavier_normal_(empty({0, 0})), "nn::init::xavier_normal_: fan_in + fan_out is 0");
  EXPECT_EMBER_ERROR(init::kaiming_uniform_(zeros({3, 3}, {.dtype = DType::i32})),
                     "nn::init::kaiming_uniform_: needs a floating tensor, got int32");
}

TEST(Init, XavierBoundsAndStd) {
  Tensor t = empty({300, 500});
  double bound = std::sqrt(6.0 / 800.0);
  init::xavier_uniform_(t);
  EXPECT_LE(max_abs(t), bound);
  EXPECT_GT(max_abs(t), 0.99 * bound);
  EXPECT_NEAR(std_of(t), bound / std::sqrt(3.0), 0.01 * bound);
  init::xavier_normal_(t, 2.0);
  EXPECT_NEAR(std_of(t), 2.0 * std::sqrt(2.0 / 800.0), 0.01 * bound);
}

TEST(Init, KaimingBoundsAndStd) {
  Tensor t = empty({256, 64, 3, 3});  // fan_in 576, fan_out 2304
  init::kaiming_uniform_(t);          // leaky_relu with a = 0: gain sqrt(2)
  double bound = std::sqrt(2.0) * std::sqrt(3.0 / 576.0);
  EXPECT_LE(max_abs(t), bound);
  EXPECT_NEAR(std_of(t), bound / std::sqrt(3.0), 0.01 * bound);
  init::kaiming_normal_(t, {.mode = init::FanMode::fan_out, .nonlinearity = init::Nonlinearity::relu});
  EXPECT_NEAR(std_of(t), std::sqrt(2.0 / 2304.0), 0.01 * std::sqrt(2.0 / 2304.0));
  EXPECT_NEAR(mean_of(t), 0.0, 0.0005);
  init::kaiming_uniform_(t, {.a = std::sqrt(5.0)});
  EXPECT_LE(max_abs(t), 1.0 / std::sqrt(576.0));
}

TEST(Init, InPlaceOnParametersAndReproducible) {
  Tensor parameter = empty({3, 4}, {.requires_grad = true});  // a leaf that requires grad
  void* data = parameter.data_ptr();
  init::ones_(parameter);
  EXPECT_TRUE(all_close(parameter, ones({3, 4}), 0, 0));
  init::zeros_(parameter);
  EXPECT_TRUE(all_close(parameter, zeros({3, 4}), 0, 0));
  init::constant_(parameter, 0.25);
  EXPECT_TRUE(all_close(parameter, full({3, 4}, 0.25), 0, 0));
  EXPECT_EQ(parameter.data_ptr(), data);
  EXPECT_TRUE(parameter.requires_grad());
  EXPECT_TRUE(parameter.is_leaf());
  Generator a(11), b(11);
  Tensor first = empty({3, 4}), second = empty({3, 4});
  init::xavier_uniform_(first, 1.0, &a);
  init::xavier_uniform_(second, 1.0, &b);
  EXPECT_TRUE(all_close(first, second, 0, 0));
  manual_seed(5);
  init::trunc_normal_(first);
  manual_seed(5);
  init::trunc_normal_(second);
  EXPECT_TRUE(all_close(first, second, 0, 0));
}

}  // namespace
}  // namespace ember
