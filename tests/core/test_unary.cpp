// Unary math (neg ... gelu, pow, clamp) against the reference kernels: every
// dtype, 0-d / empty / large shapes, non-contiguous layouts; plus exact hand
// values at the special points (inf, nan, -0), PyTorch's dtype rules and errors.
#include <cmath>
#include <limits>
#include <numbers>

#include "support/test_support.h"

namespace ember::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;      // the random input domain (log and sqrt stay positive)
  bool accepts_bool;  // the floating functions compute bool (and integers) in f32
};

const UnaryCase kUnaryCases[] = {
    {"neg", [](const Tensor& a) { return neg(a); }, -3, 3, false},
    {"operator-", [](const Tensor& a) { return -a; }, -3, 3, false},
    {"abs", [](const Tensor& a) { return abs(a); }, -3, 3, false},
    {"relu", [](const Tensor& a) { return relu(a); }, -3, 3, false},
    {"sign", [](const Tensor& a) { return sign(a); }, -3, 3, false},
    {"floor", [](const Tensor& a) { return floor(a); }, -5, 5, false},
    {"ceil", [](const Tensor& a) { return ceil(a); }, -5, 5, false},
    {"round", [](const Tensor& a) { return round(a); }, -5, 5, false},
    {"trunc", [](const Tensor& a) { return trunc(a); }, -5, 5, false},
    {"exp", [](const Tensor& a) { return exp(a); }, -5, 5, true},
    {"log", [](const Tensor& a) { return log(a); }, 0.05, 20, true},
    {"log1p", [](const Tensor& a) { return log1p(a); }, -0.9, 20, true},
    {"sqrt", [](const Tensor& a) { return sqrt(a); }, 0.0, 20, true},
    {"rsqrt", [](const Tensor& a) { return rsqrt(a); }, 0.05, 20, true},
    {"sin", [](const Tensor& a) { return sin(a); }, -10, 10, true},
    {"cos", [](const Tensor& a) { return cos(a); }, -10, 10, true},
    {"tanh", [](const Tensor& a) { return tanh(a); }, -5, 5, true},
    {"erf", [](const Tensor& a) { return erf(a); }, -4, 4, true},
    {"sigmoid", [](const Tensor& a) { return sigmoid(a); }, -8, 8, true},
    {"gelu", [](const Tensor& a) { return gelu(a); }, -5, 5, true},
    {"gelu_tanh", [](const Tensor& a) { return gelu(a, GeluApproximation::tanh); }, -5, 5, true},
    {"silu", [](const Tensor& a) { return silu(a); }, -8, 8, true},
};

// 0-d, empty, odd sizes (vector tails), a large one (threads, whole blocks), random ones.
std::vector<Shape> unary_shapes() {
  std::vector<Shape> shapes = {{}, {0}, {1}, {7}, {3, 0}, {7, 33}, {2, 3, 5}, {300, 257}};
  for (int i = 0; i < 4; ++i) shapes.push_back(random_shape(3));
  return shapes;
}

// Checks op(t) in every layout of t against the reference on the contiguous input.
template <class Fn>
void expect_matches_reference(Fn fn, const Tensor& t, const std::string& what) {
  Tensor expected = reference([&] { return fn(t); });
  for (const Layout& layout : layouts_of(t))
    EXPECT_TRUE(all_close(fn(layout.tensor), expected)) << what << " " << t.shape().str() << " (" << layout.name << ")";
}

TEST(Unary, MatchesReferenceForEveryDtypeShapeAndLayout) {
  for (const UnaryCase& op : kUnaryCases) {
    for (DType dtype : kAllDTypes) {
      if (dtype == DType::boolean && !op.accepts_bool) continue;  // an error, tested below
      for (const Shape& shape : unary_shapes())
        expect_matches_reference(op.fn, random_tensor(shape, dtype, op.lo, op.hi),
                                 std::string(op.name) + " " + std::string(dtype_name(dtype)));
    }
  }
}

TEST(Unary, LargeInputsUseEveryThreadAndMatchReference) {
  set_num_threads(2);
  Tensor a = random_tensor({1 << 17}, DType::f32, -4, 4);
  EXPECT_TRUE(all_close(gelu(a), reference([&] { return gelu(a); })));
  EXPECT_TRUE(all_close(exp(a), reference([&] { return exp(a); })));
  Tensor halves = random_tensor({512, 300}, DType::bf16, -4, 4).t();
  EXPECT_TRUE(all_close(silu(halves), reference([&] { return silu(halves); })));
  set_num_threads(1);
}

TEST(Unary, PowByScalarMatchesReference) {
  const double float_exponents[] = {2, 3, 0.5, -0.5, -1, -2, 2.5, 0, 1, 1.0 / 3};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    for (const Shape& shape : unary_shapes()) {
      Tensor positive = random_tensor(shape, dtype, 0.25, 4), signed_values = random_tensor(shape, dtype, -3, 3);
      for (double e : float_exponents) {
        std::string what = fmt::format("pow {} ** {}", dtype_name(dtype), e);
        expect_matches_reference([e](const Tensor& t) { return pow(t, e); }, positive, what);
      }
      for (int64_t e : {2, 3, -1, 4})
        expect_matches_reference([e](const Tensor& t) { return pow(t, e); }, signed_values,
                                 fmt::format("pow {} ** {}", dtype_name(dtype), e));
    }
  }
  for (DType dtype : {DType::i32, DType::i64, DType::boolean}) {
    for (const Shape& shape : unary_shapes()) {
      Tensor t = random_tensor(shape, dtype, -3, 3);
      for (int64_t e : {0, 1, 2, 3, 7})
        expect_matches_reference([e](const Tensor& x) { return pow(x, e); }, t,
                                 fmt::format("pow {} ** {}", dtype_name(dtype), e));
    }
  }
}

TEST(Unary, PowByTensorMatchesReferenceWithBroadcasting) {
  const std::pair<Shape, Shape> pairs[] = {{{}, {}}, {{5}, {}}, {{3, 1}, {1, 4}}, {{0, 3}, {1, 3}}, {{7, 33}, {33}}};
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    bool integral = is_integral(dtype);
    for (auto& [shape_a, shape_b] : pairs) {
      Tensor base = random_tensor(shape_a, dtype, integral ? -3 : 0.25, 3);
      Tensor exponent = random_tensor(shape_b, dtype, -2, 4);
      Tensor expected = reference([&] { return pow(base, exponent); });
      for (const Layout& lb : layouts_of(base))
        for (const Layout& le : layouts_of(exponent))
          EXPECT_TRUE(all_close(pow(lb.tensor, le.tensor), expected))
              << dtype_name(dtype) << " " << shape_a.str() << " (" << lb.name << ") ** " << shape_b.str() << " ("
              << le.name << ")";
    }
  }
}

TEST(Unary, ClampMatchesReference) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    for (const Shape& shape : unary_shapes()) {
      Tensor t = random_tensor(shape, dtype, -3, 3);
      std::string name(dtype_name(dtype));
      expect_matches_reference([](const Tensor& x) { return clamp(x, -1, 1); }, t, "clamp " + name);
      expect_matches_reference([](const Tensor& x) { return clamp(x, 1, -1); }, t, "clamp low > high " + name);
      expect_matches_reference([](const Tensor& x) { return clamp_min(x, 0.5); }, t, "clamp_min " + name);
      expect_matches_reference([](const Tensor& x) { return clamp_max(x, -1); }, t, "clamp_max " + name);
    }
  }
}

// PyTorch: a NaN bound makes every element NaN, and the gradient 0. Catches:
// the bound dropped by min/max (clamp(x, nan, 2) gave [0, 1, 2]).
TEST(Unary, ANanClampBoundMakesEveryElementNan) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor x = from_vector<float>({0, 1, 5}).to(dtype);
    for (const Tensor& out : {clamp(x, kNan, 2.0), clamp_min(x, kNan), clamp_max(x, kNan)})
      for (float v : out.to_vector<float>()) EXPECT_TRUE(std::isnan(v)) << dtype_name(dtype);
  }
  Tensor x = from_vector<float>({0, 1, 5}).requires_grad_(true);
  sum(clamp(x, kNan, 2.0)).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(clamp(from_vector<int32_t>({-2, 7}), -1, 1).to_vector<int32_t>(), (std::vector<int32_t>{-1, 1}));
}

// Exact values at ordinary and special points, in f32 and f64 (dense and strided rows).
TEST(Unary, HandValues) {
  auto values = [](Tensor t) { return t.to_vector<float>(); };
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor special = from_vector<float>({-kInf, kInf, 0.0f}).to(dtype);
    EXPECT_EQ(values(exp(special)), (std::vector<float>{0, kInf, 1}));
    EXPECT_EQ(values(sigmoid(special)), (std::vector<float>{0, 1, 0.5f}));
    EXPECT_EQ(values(tanh(special)), (std::vector<float>{-1, 1, 0}));
    EXPECT_EQ(values(log(from_vector<float>({0, 1, kInf}).to(dtype))), (std::vector<float>{-kInf, 0, kInf}));
    EXPECT_EQ(values(sqrt(from_vector<float>({4, 0, kInf, 2.25f}).to(dtype))), (std::vector<float>{2, 0, kInf, 1.5f}));
    EXPECT_EQ(values(rsqrt(from_vector<float>({4, 0, kInf}).to(dtype))), (std::vector<float>{0.5f, kInf, 0}));
    EXPECT_EQ(log1p(scalar_tensor(-1, {.dtype = dtype})).item<float>(), -kInf);
    EXPECT_TRUE(std::isnan(log(scalar_tensor(-1, {.dtype = dtype})).item<float>()));
    EXPECT_TRUE(std::isnan(sqrt(scalar_tensor(-1, {.dtype = dtype})).item<float>()));
  }
  Tensor one = from_vector<float>({1, -1, 0});
  EXPECT_TRUE(all_close(gelu(one), from_vector<float>({0.8413447f, -0.1586553f, 0}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(gelu(one, GeluApproximation::tanh), from_vector<float>({0.8411920f, -0.1588080f, 0}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(silu(one), from_vector<float>({0.7310586f, -0.2689414f, 0}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(erf(one), from_vector<float>({0.8427008f, -0.8427008f, 0}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(sin(from_vector<float>({0, float(std::numbers::pi / 2)})), from_vector<float>({0, 1}), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(cos(from_vector<float>({0, float(std::numbers::pi)})), from_vector<float>({1, -1}), 1e-6, 1e-7));

  // relu(-0) is +0, relu(nan) is nan; abs(-0) is +0.
  std::vector<float> relued = values(relu(from_vector<float>({-0.0f, kNan, -2, 3})));
  EXPECT_FALSE(std::signbit(relued[0]));
  EXPECT_TRUE(std::isnan(relued[1]));
  EXPECT_EQ(relued[2], 0);
  EXPECT_EQ(relued[3], 3);
  EXPECT_FALSE(std::signbit(abs(scalar_tensor(-0.0, {})).item<float>()));
  EXPECT_EQ(values(-from_vector<float>({1, -2})), (std::vector<float>{-1, 2}));

  // Integers wrap at the minimum, as PyTorch's do.
  constexpr int32_t lowest = std::numeric_limits<int32_t>::min();
  Tensor ints = from_vector<int32_t>({lowest, -5, 0, 7});
  EXPECT_EQ(neg(ints).to_vector<int32_t>(), (std::vector<int32_t>{lowest, 5, 0, -7}));
  EXPECT_EQ(abs(ints).to_vector<int32_t>(), (std::vector<int32_t>{lowest, 5, 0, 7}));
  EXPECT_EQ(relu(ints).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 7}));
}

// Rounding and sign at their special points, against torch 2.15's values: nan,
// -0, infinities, halves (round: to even), the float just below 0.5; integer
// and bool inputs; a zero gradient (PyTorch's), not a refusal or none.
// Mutations caught: round as std::round (halves away from zero: 2.5 gave 3),
// sign(nan) passing nan through, the zero-gradient formula not registered.
TEST(Unary, RoundingAndSignHandValues) {
  const std::vector<float> x = {kNan, -0.0f, 0.0f, kInf, -kInf, 2.5f, -2.5f, 0.49999997f};
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    const std::string what(dtype_name(dtype));
    Tensor t = from_vector<float>(x).to(dtype);
    auto check = [&](const Tensor& got, const std::vector<float>& want, const char* op) {
      ASSERT_EQ(got.dtype(), dtype) << op << " " << what;
      std::vector<float> v = got.to(DType::f32).to_vector<float>();
      for (size_t i = 0; i < want.size(); ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(v[i])) << op << " " << what << " element " << i;
        } else {
          EXPECT_EQ(v[i], want[i]) << op << " " << what << " element " << i;
          EXPECT_EQ(std::signbit(v[i]), std::signbit(want[i])) << op << " " << what << " element " << i;
        }
      }
    };
    check(sign(t), {0, 0, 0, 1, -1, 1, -1, 1}, "sign");
    check(floor(t), {kNan, -0.0f, 0, kInf, -kInf, 2, -3, 0}, "floor");
    check(ceil(t), {kNan, -0.0f, 0, kInf, -kInf, 3, -2, 1}, "ceil");
    check(trunc(t), {kNan, -0.0f, 0, kInf, -kInf, 2, -2, 0}, "trunc");
    check(round(t), {kNan, -0.0f, 0, kInf, -kInf, 2, -2, 0}, "round");  // 16-bit 0.49999997 is 0.5: to even, 0
    check(round(from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 3.5f}).to(dtype)), {0, 2, 2, -0.0f, -2, 4},
          "round halves");
  }
  Tensor ints = from_vector<int64_t>({7, -7, 0});
  for (auto op : {&floor, &ceil, &round, &trunc}) {
    Tensor same = op(ints);
    EXPECT_EQ(same.dtype(), DType::i64);
    EXPECT_EQ(same.to_vector<int64_t>(), (std::vector<int64_t>{7, -7, 0}));
    EXPECT_FALSE(same.is_same(ints));  // a copy, as PyTorch's
  }
  EXPECT_EQ(sign(from_vector<int32_t>({7, -7, 0})).to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 0}));
  Tensor mask = from_vector<float>({1, 0}).to(DType::boolean);
  EXPECT_EQ(sign(mask).dtype(), DType::boolean);
  EXPECT_EQ(sign(mask).to(DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  EXPECT_EMBER_ERROR(floor(mask), "floor: not supported for bool tensors");
  EXPECT_EMBER_ERROR(round(mask), "round: not supported for bool tensors");

  for (auto op : {&floor, &ceil, &round, &trunc, &sign}) {
    Tensor leaf = from_vector<double>({1.5, -0.3, 2.0});
    leaf.requires_grad_(true);
    sum(op(leaf) * 3.0).backward();
    ASSERT_TRUE(leaf.grad().defined());
    EXPECT_EQ(leaf.grad().to_vector<double>(), (std::vector<double>{0, 0, 0}));
  }
}

// log of a positive subnormal: Eigen's log raised it to the smallest normal
// (-87.3 for every f32 below 1.2e-38; found by the op fuzzer in bf16).
// Mutation caught: the Eigen row alone.
TEST(Unary, LogOfSubnormalsIsExact) {
  const double f32_tiny = std::ldexp(1.0, -140), f64_tiny = std::ldexp(1.0, -1060);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    const double tiny = dtype == DType::f64 ? f64_tiny : f32_tiny;
    std::vector<double> inputs = {tiny, 3 * tiny, 1.0, 0.5};
    if (dtype == DType::f16) inputs = {std::ldexp(1.0, -20), 1.0, 0.5, 2.0};  // f16's own subnormals are normal in f32
    Tensor x = from_vector<double>(inputs).to(dtype);
    std::vector<double> expected;
    for (double v : x.to(DType::f64).to_vector<double>()) expected.push_back(std::log(v));
    EXPECT_TRUE(all_close(log(x), from_vector<double>(expected).to(dtype))) << dtype_name(dtype);
  }
}

TEST(Unary, PowAndClampHandValues) {
  Tensor ints = from_vector<int64_t>({-2, -1, 0, 1, 3});
  EXPECT_EQ(pow(ints, 3).to_vector<int64_t>(), (std::vector<int64_t>{-8, -1, 0, 1, 27}));
  EXPECT_EQ(pow(ints, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 1, 1, 1}));
  // Tensor exponents follow PyTorch's integer rule: negative powers give 0 except for bases +-1.
  EXPECT_EQ(pow(ints, full({5}, -1, {.dtype = DType::i64})).to_vector<int64_t>(),
            (std::vector<int64_t>{0, -1, 0, 1, 0}));
  EXPECT_EQ(pow(from_vector<float>({4, 9, -2}), 0.5).to_vector<float>()[1], 3.0f);
  EXPECT_EQ(pow(from_vector<float>({2, -2}), 2).to_vector<float>(), (std::vector<float>{4, 4}));
  EXPECT_EQ(pow(from_vector<float>({2, 4}), -1).to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(pow(from_vector<float>({2, 3}), from_vector<float>({3, 2})).to_vector<float>(), (std::vector<float>{8, 9}));

  Tensor x = from_vector<float>({-2, -0.5f, 0.5f, 2, kNan});
  std::vector<float> clamped = clamp(x, -1, 1).to_vector<float>();
  EXPECT_EQ(std::vector<float>(clamped.begin(), clamped.end() - 1), (std::vector<float>{-1, -0.5f, 0.5f, 1}));
  EXPECT_TRUE(std::isnan(clamped.back()));  // nan propagates
  EXPECT_EQ(clamp(x, 1, -1).to_vector<float>()[0], -1.0f);  // low > high: every element is high
  EXPECT_EQ(clamp_min(x, 0).to_vector<float>()[0], 0.0f);
  EXPECT_EQ(clamp_max(x, 0).to_vector<float>()[3], 0.0f);
  // An integer bound beyond int32 saturates instead of wrapping.
  Tensor small = from_vector<int32_t>({-3, 5});
  EXPECT_EQ(clamp(small, int64_t(-1) << 40, int64_t(1) << 40).to_vector<int32_t>(), (std::vector<int32_t>{-3, 5}));
  EXPECT_EQ(clamp(small, 0, 4).to_vector<int32_t>(), (std::vector<int32_t>{0, 4}));
}

TEST(Unary, PromotesLikePyTorch) {
  Tensor i32 = ones({2}, {.dtype = DType::i32}), i64 = ones({2}, {.dtype = DType::i64});
  Tensor b = ones({2}, {.dtype = DType::boolean}), f16 = ones({2}, {.dtype = DType::f16});
  Tensor bf16 = ones({2}, {.dtype = DType::bf16}), f64 = ones({2}, {.dtype = DType::f64});
  EXPECT_EQ(exp(i32).dtype(), DType::f32);
  EXPECT_EQ(sqrt(b).dtype(), DType::f32);
  EXPECT_EQ(gelu(i64).dtype(), DType::f32);
  EXPECT_EQ(sigmoid(f16).dtype(), DType::f16);
  EXPECT_EQ(tanh(bf16).dtype(), DType::bf16);
  EXPECT_EQ(log(f64).dtype(), DType::f64);
  EXPECT_EQ(abs(i64).dtype(), DType::i64);
  EXPECT_EQ(relu(i32).dtype(), DType::i32);
  EXPECT_EQ(neg(i32).dtype(), DType::i32);
  EXPECT_EQ(pow(i32, 2).dtype(), DType::i32);
  EXPECT_EQ(pow(i32, 0.5).dtype(), DType::f32);
  EXPECT_EQ(pow(b, 2).dtype(), DType::i64);
  EXPECT_EQ(pow(f16, 2).dtype(), DType::f16);
  EXPECT_EQ(pow(i32, f16).dtype(), DType::f16);
  EXPECT_EQ(clamp(i32, 0, 2).dtype(), DType::i32);
  EXPECT_EQ(clamp(i32, 0.5, 2).dtype(), DType::f32);
  EXPECT_EQ(clamp_min(bf16, 0).dtype(), DType::bf16);
  EXPECT_TRUE(all_close(exp(from_vector<int32_t>({0, 1})), from_vector<float>({1, std::numbers::e_v<float>})));
}

// The activation gradients: the fast kernels against the reference in every
// floating dtype and layout (dense, transposed, strided), against the
// textbook derivatives in f64, and relu's at its special points.
TEST(Unary, ActivationBackwardMatchesReferenceAndDerivatives) {
  using Backward = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Backward> kinds[] = {
      {"threshold_backward", [](const Tensor& g, const Tensor& x) { return threshold_backward(g, x); }},
      {"gelu_backward", [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x); }},
      {"gelu_tanh_backward",
       [](const Tensor& g, const Tensor& x) { return gelu_backward(g, x, GeluApproximation::tanh); }},
      {"silu_backward", [](const Tensor& g, const Tensor& x) { return silu_backward(g, x); }},
  };
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Tensor g = random_tensor({37, 300}, dtype), x = random_tensor({37, 300}, dtype, -5, 5);
    for (const auto& [name, fn] : kinds)
      for (const Layout& layout : layouts_of(x)) {
        Tensor actual = fn(g, layout.tensor), expected = reference([&, fn = fn] { return fn(g, layout.tensor); });
        EXPECT_TRUE(all_close(actual, expected)) << name << " " << dtype_name(dtype) << " " << layout.name;
      }
  }
  Tensor g = random_tensor({1000}, DType::f64), x = random_tensor({1000}, DType::f64, -6, 6);
  Tensor sig = sigmoid(x), inner = tanh((x + x * x * x * 0.044715) * std::sqrt(2 / std::numbers::pi));
  Tensor gelu_derivative = (erf(x / std::numbers::sqrt2) + 1) * 0.5 + x * exp(x * x * -0.5) / std::sqrt(2 * std::numbers::pi);
  Tensor gelu_tanh_derivative = (inner + 1) * 0.5 + x * 0.5 * rsub(inner * inner, 1) * std::sqrt(2 / std::numbers::pi) *
                                                      (x * x * (3 * 0.044715) + 1);
  EXPECT_TRUE(all_close(gelu_backward(g, x), g * gelu_derivative));
  EXPECT_TRUE(all_close(gelu_backward(g, x, GeluApproximation::tanh), g * gelu_tanh_derivative));
  EXPECT_TRUE(all_close(silu_backward(g, x), g * sig * (x * rsub(sig, 1) + 1)));
  Tensor special = from_vector(std::vector<float>{-1, -0.0f, 0, 1e-30f, 2, kInf, -kInf, kNan});
  EXPECT_EQ(threshold_backward(full({8}, 3.0), special).to_vector<float>(),
            (std::vector<float>{0, 0, 0, 3, 3, 3, 0, 3}));
  EXPECT_EMBER_ERROR(threshold_backward(zeros({2}), zeros({3})), "threshold_backward: grad of shape [2] and input of shape [3] differ");
  EXPECT_EMBER_ERROR(gelu_backward(zeros({2}, {.dtype = DType::i32}), zeros({2}, {.dtype = DType::i32})),
                     "gelu_backward: expected floating tensors, got int32 and int32");
}

// Dense bf16 GELU runs widen and round in registers (kernels/cpu/vector_gelu.cpp),
// as the f32 kernel followed by a cast to bf16 does through its buffers: the
// two must agree bit for bit, on odd lengths (the vector tail), infinities,
// signed zeros and NaN.
// Mutations caught: store8 truncating instead of rounding to nearest even,
// and its lanes left interleaved (no permute after the pack).
TEST(Unary, DenseBf16GeluEqualsTheFloatKernelRounded) {
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(203), int64_t(4099)}) {
    Tensor x = random_tensor({n}, DType::bf16, -6, 6), g = random_tensor({n}, DType::bf16, -3, 3);
    if (n >= 8) x.narrow(0, 0, 4).copy_(from_vector(std::vector<float>{kInf, -kInf, 0, -0.0f}));
    SCOPED_TRACE(n);
    EXPECT_TRUE(all_close(gelu(x), gelu(x.to(DType::f32)).to(DType::bf16), 0, 0));
    EXPECT_TRUE(all_close(gelu_backward(g, x), gelu_backward(g.to(DType::f32), x.to(DType::f32)).to(DType::bf16), 0, 0));
  }
  Tensor nan = from_vector(std::vector<float>{kNan, 1, 2, 3, 4, 5, 6, 7, kNan}).to(DType::bf16);
  Tensor nan_result = gelu(nan), nan_gradient = gelu_backward(ones({9}, {.dtype = DType::bf16}), nan);
  for (int64_t i : {int64_t(0), int64_t(8)}) {
    EXPECT_TRUE(std::isnan(nan_result.select(0, i).item<double>()));
    EXPECT_TRUE(std::isnan(nan_gradient.select(0, i).item<double>()));
  }
}

TEST(Unary, BadInputsNameTheOpAndValues) {
  Tensor mask = ones({2}, {.dtype = DType::boolean});
  EXPECT_EMBER_ERROR(neg(mask), "neg: not supported for bool tensors; to invert a mask use logical_not");
  EXPECT_EMBER_ERROR(-mask, "neg: not supported for bool");
  EXPECT_EMBER_ERROR(abs(mask), "abs: not supported for bool");
  EXPECT_EMBER_ERROR(relu(mask), "relu: not supported for bool");
  EXPECT_EMBER_ERROR(pow(ones({2}, {.dtype = DType::i32}), -2),
                     "pow: integers to negative integer powers are not allowed (int32 tensor, exponent -2)");
  EXPECT_EMBER_ERROR(pow(mask, true), "pow: not supported for bool");
  EXPECT_EMBER_ERROR(pow(mask, mask), "pow: not supported for two bool tensors");
  EXPECT_EMBER_ERROR(pow(zeros({2, 3}), zeros({4, 3})), "pow: shapes [2, 3] and [4, 3] cannot be broadcast");
  EXPECT_EMBER_ERROR(clamp(mask, false, true), "clamp: not supported for bool");
  EXPECT_EMBER_ERROR(exp(Tensor()), "exp: undefined");
  EXPECT_EMBER_ERROR(clamp_min(Tensor(), 0), "clamp_min: undefined");
}

}  // namespace
}  // namespace ember::testing
