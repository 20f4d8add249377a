// Philox 4x32-10 against Random123's known answers; rand/randn/randint: the
// reference and CPU kernels agree bit for bit at any thread count, streams
// replay from a saved state, and the distributions have the right moments.
#include <cmath>
#include <numeric>

#include "support/test_support.h"

namespace ember::testing {
namespace {

using Words = std::array<uint32_t, 4>;

TEST(Random, PhiloxMatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}), (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Random, GeneratorReservesConsecutiveBlocks) {
  Generator generator(7);
  EXPECT_EQ(generator.seed(), 7u);
  EXPECT_EQ(generator.reserve(3), 0u);
  EXPECT_EQ(generator.reserve(2), 3u);
  EXPECT_EQ(generator.state().offset, 5u);
  generator.manual_seed(9);
  EXPECT_EQ(generator.state().seed, 9u);
  EXPECT_EQ(generator.state().offset, 0u);
}

bool same_values(const Tensor& a, const Tensor& b) { return all_close(a, b, 0, 0); }

TEST(Random, SameSeedGivesSameTensorAndCallsDrawFreshNumbers) {
  Generator first(42), second(42);
  Tensor a = rand({3, 5}, {}, &first), b = rand({3, 5}, {}, &second);
  EXPECT_TRUE(same_values(a, b));
  EXPECT_FALSE(same_values(rand({3, 5}, {}, &first), a));
  manual_seed(5);
  Tensor c = randn({10});
  manual_seed(5);
  EXPECT_TRUE(same_values(randn({10}), c));
}

TEST(Random, SavedStateReplaysTheStream) {
  Generator generator(123);
  rand({7}, {}, &generator);
  GeneratorState saved = generator.state();
  Tensor a = randn({4, 6}, {.dtype = DType::f64}, &generator);
  Tensor b = randint(-3, 9, {11}, {.dtype = DType::i64}, &generator);
  generator.set_state(saved);
  EXPECT_TRUE(same_values(randn({4, 6}, {.dtype = DType::f64}, &generator), a));
  EXPECT_TRUE(same_values(randint(-3, 9, {11}, {.dtype = DType::i64}, &generator), b));
}

TEST(Random, ElementsFollowTheirBlockSoCallsContinueOneStream) {
  // Two calls of 5 floats reserve two blocks each: the second starts at element 8.
  Generator split_calls(99), one_call(99);
  Tensor first = rand({5}, {}, &split_calls), second = rand({5}, {}, &split_calls);
  Tensor whole = rand({16}, {}, &one_call);
  EXPECT_TRUE(same_values(first, whole.narrow(0, 0, 5)));
  EXPECT_TRUE(same_values(second, whole.narrow(0, 8, 5)));
  // A prefix of a stream does not depend on the tensor's length.
  Generator short_stream(3), long_stream(3);
  EXPECT_TRUE(same_values(randn({6}, {}, &short_stream), randn({101}, {}, &long_stream).narrow(0, 0, 6)));
}

TEST(Random, UniformWordsMapExactly) {
  Generator generator(11);
  Tensor values = rand({4}, {}, &generator);
  Words words = philox4x32(philox_counter(0, 0), philox_key(11));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(values.to_vector<float>()[size_t(i)], uniform_float(words[size_t(i)]));
}

// Runs `make` from the same generator state through the reference and CPU kernels.
template <class Make>
void expect_reference_equal(Make make, const std::string& what) {
  Generator cpu_generator(2024), reference_generator(2024);
  Tensor fast = make(&cpu_generator);
  Tensor expected = reference([&] { return make(&reference_generator); });
  EXPECT_TRUE(same_values(fast, expected)) << what;
  EXPECT_EQ(cpu_generator.state().offset, reference_generator.state().offset) << what;
}

TEST(Random, CpuKernelsEqualReferenceBitForBit) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{1}, Shape{3}, Shape{5, 7}, Shape{1001}, Shape{70000}}) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      std::string what = fmt::format("{} {}", dtype, shape);
      expect_reference_equal([&](Generator* g) { return rand(shape, {.dtype = dtype}, g); }, "rand " + what);
      expect_reference_equal([&](Generator* g) { return randn(shape, {.dtype = dtype}, g); }, "randn " + what);
    }
    for (DType dtype : kAllDTypes) {
      std::string what = fmt::format("{} {}", dtype, shape);
      int64_t high = dtype == DType::boolean ? 2 : 100;
      expect_reference_equal([&](Generator* g) { return randint(0, high, shape, {.dtype = dtype}, g); },
                             "randint " + what);
    }
    expect_reference_equal([&](Generator* g) { return randint(-(int64_t(1) << 40), int64_t(1) << 40, shape, {}, g); },
                           "randint wide range");
  }
}

TEST(Random, ThreadCountDoesNotChangeTheValues) {
  const Shape shape{1 << 20};
  auto draw = [&](int threads) {
    set_num_threads(threads);
    Generator generator(77);
    std::vector<Tensor> out = {rand(shape, {}, &generator), randn(shape, {.dtype = DType::f64}, &generator),
                               randint(-5, 1000, shape, {}, &generator)};
    set_num_threads(1);
    return out;
  };
  std::vector<Tensor> one = draw(1), two = draw(2);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_values(one[i], two[i])) << "tensor " << i;
}

struct Moments {
  double mean = 0, variance = 0, min = 0, max = 0;
};
Moments moments(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Moments m;
  m.mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= double(v.size());
  m.min = *std::min_element(v.begin(), v.end());
  m.max = *std::max_element(v.begin(), v.end());
  return m;
}

TEST(Random, DistributionsHaveTheExpectedMoments) {
  Generator generator(31337);
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Moments uniform = moments(rand({200000}, {.dtype = dtype}, &generator));
    EXPECT_NEAR(uniform.mean, 0.5, 0.01) << dtype_name(dtype);
    EXPECT_NEAR(uniform.variance, 1.0 / 12.0, 0.005) << dtype_name(dtype);
    EXPECT_GE(uniform.min, 0.0) << dtype_name(dtype);
    EXPECT_LT(uniform.max, 1.0) << dtype_name(dtype);
    Moments normal = moments(randn({200000}, {.dtype = dtype}, &generator));
    EXPECT_NEAR(normal.mean, 0.0, 0.02) << dtype_name(dtype);
    EXPECT_NEAR(normal.variance, 1.0, 0.03) << dtype_name(dtype);
    EXPECT_LT(normal.max, 7.0) << dtype_name(dtype);
  }
}

// A 16-bit rand is f32's draw rounded, and a draw that rounds up to 1 gives 0,
// as PyTorch 2's. Mutations caught: the 16-bit draw on the dtype's own grid
// (it differs from the rounded f32 draws), and the wrap removed (ones appear).
TEST(Random, SixteenBitRandIsTheF32DrawRoundedBelowOne) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    Generator f32_generator(12), narrow_generator(12);
    std::vector<double> drawn = rand({100000}, {}, &f32_generator).to(dtype).to_vector<double>();
    std::vector<double> got = rand({100000}, {.dtype = dtype}, &narrow_generator).to_vector<double>();
    size_t wrapped = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      wrapped += drawn[i] == 1.0;
      ASSERT_EQ(got[i], drawn[i] == 1.0 ? 0.0 : drawn[i]) << dtype_name(dtype) << " element " << i;
    }
    EXPECT_GT(wrapped, 0u) << dtype_name(dtype);
    EXPECT_EQ(f32_generator.state().offset, narrow_generator.state().offset) << dtype_name(dtype);
  }
}

TEST(Random, RandintStaysInRangeAndHitsEveryValue) {
  Generator generator(8);
  std::vector<int64_t> values = randint(-3, 4, {5000}, {}, &generator).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t v : values) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
    ++counts[size_t(v + 3)];
  }
  for (int c : counts) EXPECT_GT(c, 500);
  Tensor wide = randint(int64_t(1) << 40, (int64_t(1) << 40) + (int64_t(1) << 35), {1000}, {}, &generator);
  Moments m = moments(wide);
  EXPECT_GE(m.min, std::ldexp(1.0, 40));
  EXPECT_LT(m.max, std::ldexp(1.0, 40) + std::ldexp(1.0, 35));
  EXPECT_GT(m.max - m.min, std::ldexp(1.0, 34));  // draws use more than 32 bits
  Tensor ints = randint(0, 10, {2, 3}, {.dtype = DType::i32}, &generator);
  EXPECT_EQ(ints.dtype(), DType::i32);
  EXPECT_EQ(ints.shape(), (Shape{2, 3}));
}

TEST(Random, LikeFormsAndEdgeShapes) {
  Tensor base = zeros({2, 3}, {.dtype = DType::f64});
  EXPECT_EQ(rand_like(base).dtype(), DType::f64);
  EXPECT_EQ(randn_like(base).shape(), (Shape{2, 3}));
  EXPECT_EQ(rand({}).dim(), 0);
  EXPECT_EQ(randn({0, 4}).numel(), 0);
  EXPECT_TRUE(rand({2}, {.requires_grad = true}).requires_grad());
}

TEST(Random, BadArgumentsNameTheOp) {
  EXPECT_EMBER_ERROR(rand({2}, {.dtype = DType::i64}), "rand: expected a floating dtype, got int64");
  EXPECT_EMBER_ERROR(randn_like(zeros({2}, {.dtype = DType::i32})), "randn: expected a floating dtype");
  EXPECT_EMBER_ERROR(randint(5, 5, {2}), "randint: expected low < high, got low=5 high=5");
  EXPECT_EMBER_ERROR(randint(0, int64_t(1) << 33, {2}, {.dtype = DType::i32}), "does not fit dtype int32");
  EXPECT_EMBER_ERROR(randint(0, 3, {2}, {.dtype = DType::boolean}), "does not fit dtype bool");
  // A floating dtype took any range: f16 [0, 2^40) filled the tensor with inf.
  // Mutation caught: the range check for i32 and bool only.
  EXPECT_EMBER_ERROR(randint(0, int64_t(1) << 40, {4}, {.dtype = DType::f16}),
                     "randint: range [0, 1099511627776) does not fit dtype float16");
  // Past 2^11 f16 skips integers: [0, 2052) drew 2052 (high - 1 rounded up),
  // bf16 [0, 1000) drew 1000. Mutation caught: randint without the exactness check.
  EXPECT_EMBER_ERROR(randint(0, 2052, {4}, {.dtype = DType::f16}),
                     "randint: range [0, 2052) has integers float16 cannot hold exactly");
  EXPECT_EMBER_ERROR(randint(0, 1000, {4}, {.dtype = DType::bf16}), "(it holds every integer in [-2^8, 2^8])");
  EXPECT_EQ(randint(-2048, 2049, {4}, {.dtype = DType::f16}).numel(), 4);
  // `{}` written to reach the generator gave float32; int64, as torch.randint.
  Generator generator(3);
  EXPECT_EQ(randint(0, 5, {4}, {}, &generator).dtype(), DType::i64);
}

// One 32-bit word modulo a range of 3e9 drew values below 2^32 mod 3e9 twice
// as often as the rest: the mean was 0.41 of the range. Catches: one word
// per value for ranges up to 2^32 (PyTorch 2 fixed the same bias).
TEST(Random, RandintOverALargeRangeIsUnbiased) {
  manual_seed(5);
  const int64_t high = 3'000'000'000;
  Tensor draws = randint(0, high, {200'000}, {.dtype = DType::i64}).to(DType::f64);
  EXPECT_NEAR(mean(draws).item<double>() / double(high), 0.5, 0.005);
  EXPECT_NEAR(mean(lt(draws, double(high) / 2).to(DType::f64)).item<double>(), 0.5, 0.005);
}

}  // namespace
}  // namespace ember::testing
