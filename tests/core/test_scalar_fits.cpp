// A number an op stores must fit the tensor's dtype (core/scalar_fits.h): fill_,
// full, masked_fill, pad, where, clamp and pow refuse one that does not (clamp only
// a bound past the range on the far side: a min above every int32), as
// PyTorch does ("value cannot be converted to type int without overflow"), where
// they used to saturate or wrap and store a different number. Arithmetic and
// comparisons with such a number keep wrapping, as PyTorch's do.
// Mutation caught: check_scalar_fits returning without a check (every refusal
// below then stores 2147483647, inf or a wrapped value instead).
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

TEST(ScalarFits, StoringOpsRefuseANumberPastTheDtypesRange) {
  Tensor i32 = zeros({2}, {.dtype = DType::i32});
  Tensor f16 = zeros({2}, {.dtype = DType::f16});
  Tensor mask = ones({2}, {.dtype = DType::boolean});
  EXPECT_EMBER_ERROR(i32.fill_(int64_t(5000000000)), "fill_: value 5000000000 cannot be converted to int32");
  EXPECT_EMBER_ERROR(full({1}, 1e6, {.dtype = DType::f16}), "full: value 1000000 cannot be converted to float16");
  EXPECT_EMBER_ERROR(full({1}, 1e39, {.dtype = DType::f32}), "cannot be converted to float32 without overflow");
  EXPECT_EMBER_ERROR(full({1}, 1e39, {.dtype = DType::bf16}), "cannot be converted to bfloat16");
  EXPECT_EMBER_ERROR(full({1}, int64_t(70000), {.dtype = DType::f16}), "value 70000 cannot be converted to float16");
  EXPECT_EMBER_ERROR(masked_fill(f16, mask, 1e6), "masked_fill: value 1000000 cannot be converted to float16");
  EXPECT_EMBER_ERROR(masked_fill(i32, mask, int64_t(-2147483649)), "masked_fill: value -2147483649");
  EXPECT_EMBER_ERROR(pad(i32, {1, 1}, int64_t(5000000000)), "pad: value 5000000000");
  EXPECT_EMBER_ERROR(where(mask, i32, int64_t(5000000000)), "where: value 5000000000 cannot be converted to int32");
  // where selects: a float past f16's range is inf there, as torch.where gives.
  // Mutation caught: the check made for every dtype again -> refused.
  EXPECT_EQ(where(from_vector<bool>({true, false}), f16, 70000.0).to(DType::f32).to_vector<float>(),
            (std::vector<float>{0.0f, float(kInf)}));
  EXPECT_EMBER_ERROR(clamp(i32, int64_t(5000000000), int64_t(6000000000)), "clamp: value 5000000000");
  EXPECT_EMBER_ERROR(clamp_max(i32, int64_t(-5000000000)), "clamp_max: value -5000000000");
  EXPECT_EMBER_ERROR(clamp_min(f16, 1e6), "clamp_min: value 1000000 cannot be converted to float16");
  EXPECT_EMBER_ERROR(pow(i32, int64_t(4294967298)), "pow: value 4294967298 cannot be converted to int32");
  EXPECT_EMBER_ERROR(pow(f16, 1e6), "pow: value 1000000 cannot be converted to float16");
  // Non-finite numbers have no integer, and PyTorch compares a fraction unrounded.
  EXPECT_EMBER_ERROR(i32.fill_(kInf), "fill_: value inf cannot be converted to int32");
  EXPECT_EMBER_ERROR(i32.fill_(kNan), "fill_: value nan cannot be converted to int32");
  EXPECT_EMBER_ERROR(i32.fill_(-2147483648.5), "fill_: value -2147483648.5");
  EXPECT_EMBER_ERROR(zeros({1}, {.dtype = DType::i64}).fill_(9.3e18), "cannot be converted to int64");
  EXPECT_EMBER_ERROR(zeros({1}, {.dtype = DType::i64}).fill_(9223372036854775808.0), "cannot be converted to int64");
  EXPECT_EMBER_ERROR(full({1}, 65505.0, {.dtype = DType::f16}), "value 65505 cannot be converted to float16");
  // A refused fill leaves the tensor as it was.
  EXPECT_EQ(i32.to_vector<int32_t>(), (std::vector<int32_t>{0, 0}));
}

// item<float>() of an f64 1e300 gave inf, where the integer item<>s refuse
// and libtorch's item<float>() throws "cannot be converted ... without
// overflow". Mutation caught: item checking integral targets only.
TEST(ScalarFits, ItemRefusesANumberPastTheTargetsRange) {
  EXPECT_EMBER_ERROR(full({1}, 1e300, {.dtype = DType::f64}).item<float>(),
                     "item: value 1e+300 cannot be converted to float32 without overflow");
  EXPECT_EMBER_ERROR(full({1}, 1e6).item<Half>(), "item: value 1000000 cannot be converted to float16");
  EXPECT_EMBER_ERROR(full({1}, int64_t(70000)).item<Half>(), "item: value 70000 cannot be converted to float16");
  EXPECT_TRUE(std::isinf(full({1}, kInf, {.dtype = DType::f64}).item<float>()));
  EXPECT_EQ(full({1}, 3e38, {.dtype = DType::f64}).item<BFloat16>(), BFloat16(3e38f));
}

TEST(ScalarFits, EveryNumberInsideTheRangeIsStored) {
  EXPECT_EQ(full({1}, int64_t(2147483647), {.dtype = DType::i32}).item<int32_t>(), 2147483647);
  EXPECT_EQ(full({1}, int64_t(-2147483648), {.dtype = DType::i32}).item<int32_t>(), -2147483647 - 1);
  EXPECT_EQ(full({1}, 2147483647.0, {.dtype = DType::i32}).item<int32_t>(), 2147483647);
  EXPECT_EQ(full({1}, 2.5, {.dtype = DType::i32}).item<int32_t>(), 2);  // truncates, as PyTorch
  EXPECT_EQ(full({1}, -9223372036854775807.0 - 1, {.dtype = DType::i64}).item<int64_t>(),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(full({1}, std::numeric_limits<int64_t>::max(), {.dtype = DType::i64}).item<int64_t>(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(full({1}, 65504.0, {.dtype = DType::f16}).item<float>(), 65504.0f);
  EXPECT_EQ(full({1}, -65504.0, {.dtype = DType::f16}).item<float>(), -65504.0f);
  EXPECT_EQ(full({1}, 1e300, {.dtype = DType::f64}).item<double>(), 1e300);
  EXPECT_TRUE(std::isinf(full({1}, kInf, {.dtype = DType::f16}).item<float>()));
  EXPECT_TRUE(std::isnan(full({1}, kNan, {.dtype = DType::bf16}).item<float>()));
  EXPECT_TRUE(full({1}, int64_t(5), {.dtype = DType::boolean}).item<bool>());  // any number is a bool
  EXPECT_EQ(clamp(full({1}, 7, {.dtype = DType::i32}), int64_t(-2147483648), int64_t(5)).item<int32_t>(), 5);
  // A clamp bound past the range on its own side changes nothing: it saturates, exactly.
  Tensor small = from_vector<int32_t>({-3, 5});
  EXPECT_EQ(clamp(small, int64_t(-1) << 40, int64_t(1) << 40).to_vector<int32_t>(), (std::vector<int32_t>{-3, 5}));
  EXPECT_EQ(clamp_max(full({1}, 2, {.dtype = DType::f16}), 1e6).item<float>(), 2.0f);
}

TEST(ScalarFits, ArithmeticAndComparisonsWrapAsPyTorchDoes) {
  // torch.full((1,), 2, dtype=torch.int32) + 5000000000 -> 705032706; == 5000000000 -> False
  Tensor i32 = full({1}, 2, {.dtype = DType::i32});
  EXPECT_EQ((i32 + int64_t(5000000000)).item<int32_t>(), 705032706);
  EXPECT_FALSE(eq(i32, int64_t(5000000000)).item<bool>());
  EXPECT_TRUE(std::isinf((full({1}, 2, {.dtype = DType::f16}) + 1e6).item<float>()));
}

// An integer scalar is an int64: a uint64 past INT64_MAX is refused, as
// libtorch's Scalar refuses it (mutation: no check: 2^63 became -2^63, and
// `x + 2^63` subtracted).
TEST(ScalarFits, AnUnsignedNumberPastInt64IsRefused) {
  const uint64_t big = uint64_t(1) << 63;
  EXPECT_EMBER_ERROR(Scalar{big}, "Scalar: 9223372036854775808 is above the largest int64 (9223372036854775807)");
  EXPECT_EMBER_ERROR(full({2}, big, {.dtype = DType::i64}), "above the largest int64");
  const uint64_t fits = uint64_t(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(Scalar{fits}.to_int(), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace ember::testing
