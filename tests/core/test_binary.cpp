// Binary arithmetic against the reference kernels: every dtype, broadcast
// shapes (size-1, 0-size, 0-d), non-contiguous layouts, scalar and in-place forms.
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "support/test_support.h"

namespace ember::testing {
namespace {

using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

struct BinaryCase {
  const char* name;
  BinaryFn fn;
};

const BinaryCase kBinaryCases[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
};

std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  std::vector<std::pair<Shape, Shape>> pairs = {
      {{}, {}},          {{5}, {}},         {{}, {3, 4}},        {{3, 1}, {1, 4}},     {{2, 3, 4}, {4}},
      {{2, 1, 4}, {3, 1}}, {{0, 3}, {1, 3}}, {{4, 0}, {4, 1}},  {{7, 33}, {7, 33}},   {{1}, {6, 1, 5}},
      {{300, 257}, {300, 257}},
  };
  for (int i = 0; i < 6; ++i) {
    Shape a = random_shape(3);
    Shape b = a;
    for (int d = 0; d < b.ndim(); ++d)
      if (rng()() % 3 == 0) b[d] = 1;
    pairs.emplace_back(a, b);
  }
  return pairs;
}

TEST(Binary, MatchesReferenceForEveryDtypeShapeAndLayout) {
  for (const BinaryCase& op : kBinaryCases) {
    for (DType dtype : kAllDTypes) {
      if (std::string(op.name) == "sub" && dtype == DType::boolean) continue;  // an error, tested below
      for (auto& [shape_a, shape_b] : broadcast_pairs()) {
        Tensor a = random_tensor(shape_a, dtype), b = random_tensor(shape_b, dtype, 0.5, 3.0);
        Tensor expected = reference([&] { return op.fn(a, b); });
        for (const Layout& la : layouts_of(a)) {
          for (const Layout& lb : layouts_of(b)) {
            EXPECT_TRUE(all_close(op.fn(la.tensor, lb.tensor), expected))
                << op.name << " " << dtype_name(dtype) << " " << shape_a.str() << " (" << la.name << ") with "
                << shape_b.str() << " (" << lb.name << ")";
          }
        }
      }
    }
  }
}

TEST(Binary, LargeInputsUseEveryThreadAndMatchReference) {
  set_num_threads(2);
  Tensor a = random_tensor({1 << 17}, DType::f32), b = random_tensor({1 << 17}, DType::f32);
  EXPECT_TRUE(all_close(add(a, b), reference([&] { return add(a, b); })));
  Tensor wide = random_tensor({512, 300}, DType::bf16);
  Tensor row = random_tensor({300}, DType::bf16);
  EXPECT_TRUE(all_close(mul(wide.t().contiguous().t(), row), reference([&] { return mul(wide, row); })));
  set_num_threads(1);
}

// f16 add/sub/mul/div compute in f32 and round once, whichever loop runs
// (dense f16 rows go through f32 buffers, binary_loop.h): every result is
// Half(float(a) op float(b)) bit for bit, except that a nan may have either
// sign (x86 gives the first operand's nan of two, and the compiler may swap the
// operands of a commutative op). Operands: all 65536 bit
// patterns against a permutation of them (a run that ends inside a block of
// 256 too), and against a broadcast scalar on either side (nan, inf,
// subnormal, the largest half, ordinary values), then in place.
// Mutations run once: the widened loop reading b's first block for every block
// failed here, as did narrowing one element short of the block.
bool is_half_nan(uint16_t bits) { return (bits & 0x7fff) > 0x7c00; }

TEST(Binary, HalfArithmeticIsTheRoundedF32ResultBitForBit) {
  std::vector<Half> all, permuted;
  for (uint32_t i = 0; i < 65536; ++i) {
    all.push_back(Half::from_bits(uint16_t(i)));
    permuted.push_back(Half::from_bits(uint16_t(i * 40503u)));  // odd multiplier: a permutation
  }
  float (*const in_f32[])(float, float) = {  // kBinaryCases' ops, in its order
      [](float x, float y) { return x + y; }, [](float x, float y) { return x - y; },
      [](float x, float y) { return x * y; }, [](float x, float y) { return x / y; }};
  // got against x op y element by element, x and y of got's shape.
  auto expect_rounded = [](const Tensor& got, const Tensor& x, const Tensor& y, float (*op)(float, float),
                           const std::string& what) {
    const std::vector<Half> xs = x.contiguous().to_vector<Half>(), ys = y.contiguous().to_vector<Half>();
    const std::vector<Half> zs = got.to_vector<Half>();
    ASSERT_EQ(zs.size(), xs.size()) << what;
    for (size_t i = 0; i < zs.size(); ++i) {
      const uint16_t expected = Half::from_float(op(Half::to_float(xs[i].bits), Half::to_float(ys[i].bits)));
      if (is_half_nan(expected)) {
        ASSERT_TRUE(is_half_nan(zs[i].bits)) << what << ": element " << i << " is " << zs[i].bits << ", not a nan";
      } else {
        ASSERT_EQ(zs[i].bits, expected) << what << ": element " << i << ", bits " << xs[i].bits << " and " << ys[i].bits;
      }
    }
  };
  const Tensor a = from_vector(all), b = from_vector(permuted);
  for (size_t k = 0; k < std::size(in_f32); ++k) {
    const BinaryCase& op = kBinaryCases[k];
    const std::string name = op.name;
    for (int64_t start : {0, 3}) {
      const Tensor x = a.narrow(0, start, 65536 - start), y = b.narrow(0, start, 65536 - start);
      expect_rounded(op.fn(x, y), x, y, in_f32[k], name + " dense from " + std::to_string(start));
    }
    for (uint16_t bits : {0x7e00, 0xfc00, 0x0001, 0x7bff, 0x3c00, 0xc500}) {
      const Tensor scalar = from_vector(std::vector<Half>{Half::from_bits(bits)}).reshape({});
      const Tensor spread = scalar.expand(a.shape());
      const std::string with = name + " with scalar bits " + std::to_string(bits);
      expect_rounded(op.fn(a, scalar), a, spread, in_f32[k], with + " on the right");
      expect_rounded(op.fn(scalar, a), spread, a, in_f32[k], with + " on the left");
    }
    Tensor in_place = a.clone();
    if (name == "add") in_place += b;
    if (name == "sub") in_place -= b;
    if (name == "mul") in_place *= b;
    if (name == "div") in_place /= b;
    expect_rounded(in_place, a, b, in_f32[k], name + " in place");
  }
}

// An integer number dividing an integer tensor was made an operand of the
// tensor's dtype first, so 5000000000 wrapped to 705032704 before the float
// division (x / 5e9 gave 1.4e-08 for 10). Mutation caught: div and rdiv
// building their number with as_tensor.
TEST(Binary, DivisionByAnIntegerPastTheDtypeIsExact) {
  const Tensor x = from_vector<int32_t>({10, 705032704, -3});
  const std::vector<float> by = (x / Scalar(int64_t(5000000000))).to_vector<float>();
  EXPECT_FLOAT_EQ(by[0], 2e-09f);
  EXPECT_FLOAT_EQ(by[1], 0.14100654f);
  const std::vector<float> of = (Scalar(int64_t(5000000000)) / x).to_vector<float>();
  EXPECT_FLOAT_EQ(of[0], 5e8f);
  EXPECT_FLOAT_EQ(div(x, Scalar(int64_t(-2147483649))).to_vector<float>()[0], -4.656613e-09f);
  EXPECT_EQ((x / 2).dtype(), DType::f32);
  EXPECT_EQ((from_vector<float>({1}, {1}).to(DType::f16) / 3).dtype(), DType::f16);
}

// Note [Half-precision arithmetic with a scalar]: the number's full value
// takes part, as in PyTorch 2.15 (whose results these are). Rounding it to the
// tensor's dtype first gave f16 x / 1e5 = 0 (1e5 is inf in f16), x * 70000 =
// inf, x * 1e-7 19% too large, and bf16 x * (1/3.) one ulp off.
// Mutation caught: compute_dtype returning `dtype` (or operand_dtype the
// tensor's dtype) -> h / 1e5 is [0, 0, 0].
TEST(Binary, HalfPrecisionArithmeticUsesTheNumbersFullValue) {
  const Tensor h = from_vector<double>({0.5, 1000.0, 60000.0}).to(DType::f16);
  auto values = [](const Tensor& t) { return t.to(DType::f64).to_vector<double>(); };
  EXPECT_EQ(values(h / 100000.0), (std::vector<double>{5.0067901611328125e-06, 0.01000213623046875, 0.60009765625}));
  EXPECT_EQ(values(h * 70000.0), (std::vector<double>{35008.0, INFINITY, INFINITY}));
  EXPECT_EQ(values(h * int64_t(70000)), (std::vector<double>{35008.0, INFINITY, INFINITY}));
  EXPECT_EQ(values(h * 1e-7)[1], 0.00010001659393310547);
  // Correctly rounded (PyTorch's 100000 / x is x.reciprocal() * 100000: 100.0625 and 1.6689453125).
  EXPECT_EQ(values(100000.0 / h), (std::vector<double>{INFINITY, 100.0, double(float(Half(float(1e5 / 6e4))))}));
  EXPECT_EQ(values(h * scalar_tensor(1e-7, {.dtype = DType::f64}))[2], 0.006000518798828125);
  EXPECT_EQ((h / 100000.0).dtype(), DType::f16);
  Tensor in_place = h.clone();
  in_place /= 100000.0;
  EXPECT_EQ(values(in_place), values(h / 100000.0));
  const Tensor b = from_vector<double>({7.0, 100.0}).to(DType::bf16);
  EXPECT_EQ(values(b * (1 / 3.0)), (std::vector<double>{2.328125, 33.25}));
  EXPECT_EQ((b * (1 / 3.0)).dtype(), DType::bf16);
  EXPECT_EQ(values(h * 0.5), (std::vector<double>{0.25, 500.0, 30000.0}));  // exact: the one-pass path
  // The gradient through the f32 path: d(h * 1e-7)/dh = 1e-7 rounded once.
  Tensor leaf = h.clone().requires_grad_();
  sum(leaf * 1e-7).backward();
  EXPECT_EQ(values(leaf.grad())[0], double(float(Half(1e-7f))));
}

TEST(Binary, PromotesLikePyTorch) {
  Tensor i32 = ones({2}, {.dtype = DType::i32}), f16 = ones({2}, {.dtype = DType::f16});
  Tensor bf16 = ones({2}, {.dtype = DType::bf16}), b = ones({2}, {.dtype = DType::boolean});
  EXPECT_EQ(add(i32, f16).dtype(), DType::f16);
  EXPECT_EQ(add(f16, ones({2})).dtype(), DType::f32);
  EXPECT_EQ(add(bf16, f16).dtype(), DType::f32);
  EXPECT_EQ(add(f16, 2.5).dtype(), DType::f16);
  EXPECT_EQ(add(i32, 7).dtype(), DType::i32);
  EXPECT_EQ(add(i32, 2.5).dtype(), DType::f32);
  EXPECT_EQ(add(b, 1).dtype(), DType::i64);
  EXPECT_EQ(div(i32, i32).dtype(), DType::f32);
  EXPECT_EQ((i32 / 2).to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
}

// torch.result_type: a 0-d tensor decides the dtype only when its category
// is above the dimensioned operands'. Before, ember promoted f32[n] with an
// f64 0-d tensor to f64 (a different dtype from PyTorch's, and a compare
// made in f64: 0.1f == 0.1 was false). Mutation caught: promote_types in
// place of result_type.
TEST(Binary, ZeroDimTensorsPromoteLikePyTorch) {
  auto zero_d = [](double v, DType dtype) { return scalar_tensor(v, {.dtype = dtype}); };
  Tensor f32 = full({2}, 0.1), f16 = ones({2}, {.dtype = DType::f16}), i32 = ones({2}, {.dtype = DType::i32});
  Tensor b = ones({2}, {.dtype = DType::boolean});
  EXPECT_EQ(mul(f32, zero_d(2, DType::f64)).dtype(), DType::f32);
  EXPECT_EQ(add(f16, zero_d(2, DType::f32)).dtype(), DType::f16);
  EXPECT_EQ(add(i32, zero_d(2, DType::i64)).dtype(), DType::i32);
  EXPECT_EQ(add(i32, zero_d(2.5, DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(add(b, zero_d(3, DType::i64)).dtype(), DType::i64);
  EXPECT_EQ(add(zero_d(1, DType::f32), zero_d(2, DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(pow(f32, zero_d(2, DType::f64)).dtype(), DType::f32);
  EXPECT_EQ(maximum(f16, zero_d(2, DType::f64)).dtype(), DType::f16);
  EXPECT_EQ(where(b, f32, zero_d(2, DType::f64)).dtype(), DType::f32);
  EXPECT_EQ(addcmul(f32, zero_d(2, DType::f64), zero_d(3, DType::f64)).dtype(), DType::f32);
  EXPECT_EQ(result_type({&f16, &i32}), DType::f16);
  // Compared in f32: 0.1 rounds to the same float.
  EXPECT_EQ(eq(f32, zero_d(0.1, DType::f64)).to_vector<bool>(), (std::vector<bool>{true, true}));
  // The 0-d operand's gradient comes back in its own dtype.
  Tensor scale = zero_d(3, DType::f64).requires_grad_();
  Tensor y = mul(f32, scale);
  EXPECT_EQ(y.dtype(), DType::f32);
  sum(y).backward();
  EXPECT_EQ(scale.grad().dtype(), DType::f64);
  EXPECT_NEAR(scale.grad().item<double>(), 0.2, 1e-7);
}

TEST(Binary, ScalarForms) {
  Tensor a = from_vector<float>({1, 2, 3});
  EXPECT_EQ((a + 1).to_vector<float>(), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ((10 - a).to_vector<float>(), (std::vector<float>{9, 8, 7}));
  EXPECT_EQ((a * 2).to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ((6 / a).to_vector<float>(), (std::vector<float>{6, 3, 2}));
}

TEST(Binary, InPlaceWritesThroughViewsAndBumpsVersion) {
  Tensor base = zeros({3, 4});
  Tensor column = base.select(1, 2);
  uint64_t before = base.version();
  column += from_vector<float>({1, 2, 3});
  EXPECT_GT(base.version(), before);
  EXPECT_EQ(base.to_vector<float>(), (std::vector<float>{0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0}));
  Tensor ints = ones({2}, {.dtype = DType::i32});
  EXPECT_EMBER_ERROR(ints += 0.5, "cannot be cast");
  Tensor small = zeros({3});
  EXPECT_EMBER_ERROR(small += zeros({2, 3}), "does not match the broadcast shape");
}

// PyTorch casts an in-place result within its kind: int64 into an int32
// target (wrapping, as its cast does), never a float into an integer or an
// integer into bool. Catches: the int64 result refused for the int32 target.
TEST(Binary, InPlaceIntegerResultOfAWiderIntegerTypeIsCast) {
  Tensor ints = from_vector<int32_t>({1, 200});
  ints += from_vector<int64_t>({1, 1});
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{2, 201}));
  ints *= from_vector<int64_t>({int64_t(1) << 40, 1});  // PyTorch 1.13: [0, 201]
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{0, 201}));
  EXPECT_EQ(ints.dtype(), DType::i32);
  Tensor flags = from_vector<bool>({true, false});
  EXPECT_EMBER_ERROR(flags += from_vector<int64_t>({1, 1}), "add_: result type int64 cannot be cast to the in-place "
                                                          "output's dtype bool");
  EXPECT_EMBER_ERROR(ints += from_vector<float>({0.5f, 0.5f}), "result type float32 cannot be cast");
}

TEST(Binary, IntegerOverflowWraps) {
  Tensor big = full({1}, std::numeric_limits<int32_t>::max(), {.dtype = DType::i32});
  EXPECT_EQ((big + 1).item<int32_t>(), std::numeric_limits<int32_t>::min());
}

TEST(Binary, BadInputsNameTheOpAndValues) {
  EXPECT_EMBER_ERROR(add(zeros({2, 3}), zeros({4, 3})), "add: shapes [2, 3] and [4, 3] cannot be broadcast");
  EXPECT_EMBER_ERROR(sub(ones({2}, {.dtype = DType::boolean}), ones({2}, {.dtype = DType::boolean})), "sub:");
  // Any bool operand, in place too, as PyTorch (mutation: testing the result
  // dtype only -> f32 - bool subtracted, and bool.sub_(bool) failed at
  // dispatch with "no CPU kernel" after bumping the version).
  Tensor mask = ones({2}, {.dtype = DType::boolean}), f32 = ones({2});
  const uint64_t version = mask.version();
  EXPECT_EMBER_ERROR(sub(f32, mask), "sub: subtraction with a bool tensor (float32 - bool)");
  EXPECT_EMBER_ERROR(sub_(mask, mask), "logical_not");
  EXPECT_EMBER_ERROR(sub_(f32, mask), "(float32 - bool)");
  EXPECT_EQ(mask.version(), version);
  EXPECT_EMBER_ERROR(add(Tensor(), zeros({1})), "add: undefined");
}

// The division family against the reference in every dtype that takes it,
// broadcast and strided, both signs of the divisor; then torch 2.15's values
// at the edges (the sign rules, -0, infinities, a 0 divisor, INT64_MIN / -1),
// the refusals, the scalar forms and the gradients. Mutations caught:
// remainder without the step into the divisor's sign (-5.5 % 2 gave -1.5),
// floor_divide of integers truncating (-7 // 2 gave -3), the integer-zero
// check removed (the kernel traps: SIGFPE), fmod's db from floor instead of trunc.
TEST(Binary, DivisionFamilyMatchesReferenceAndPyTorch) {
  using Fn = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Fn> ops[] = {
      {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }},
      {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }},
      {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }},
  };
  for (const auto& op : ops) {
    const char* name = op.first;
    const Fn fn = op.second;  // not a structured binding: clang 14 cannot capture one
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64}) {
      for (auto& [shape_a, shape_b] : broadcast_pairs()) {
        Tensor a = random_tensor(shape_a, dtype, -10.0, 10.0), magnitude = random_tensor(shape_b, dtype, 1.0, 4.0);
        for (const Tensor& b : {magnitude, neg(magnitude)}) {
          Tensor expected = reference([&] { return fn(a, b); });
          for (const Layout& la : layouts_of(a))
            for (const Layout& lb : layouts_of(b))
              EXPECT_TRUE(all_close(fn(la.tensor, lb.tensor), expected))
                  << name << " " << dtype_name(dtype) << " " << shape_a.str() << " (" << la.name << ") with "
                  << shape_b.str() << " (" << lb.name << ")";
        }
      }
    }
  }

  auto floats = [](std::vector<double> v) { return from_vector<double>(v); };
  auto same = [](const Tensor& got, std::vector<double> want) {
    std::vector<double> v = got.to(DType::f64).to_vector<double>();
    if (v.size() != want.size()) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(want[i]) ? !std::isnan(v[i]) : (v[i] != want[i] || std::signbit(v[i]) != std::signbit(want[i])))
        return false;
    }
    return true;
  };
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  Tensor a = floats({5.5, -5.5, 3, -2}), b = floats({2, 2, -2, 0});
  EXPECT_TRUE(same(remainder(a, b), {1.5, 0.5, -1, nan}));
  EXPECT_TRUE(same(fmod(a, b), {1.5, -1.5, 1, nan}));
  EXPECT_TRUE(same(floor_divide(floats({-7, 7, -0.5, 5, 0.5}), floats({2, -2, 2, 0, -2})), {-4, -4, -1, inf, -1}));
  EXPECT_TRUE(same(floor_divide(floats({0.5, -0.5}), floats({4, 4})), {0, -1}));
  EXPECT_TRUE(same(fmod(floats({-0.0, 5, inf, 5}), floats({2, inf, 2, -0.0})), {-0.0, 5, nan, nan}));
  EXPECT_TRUE(same(remainder(floats({-0.0, 5, -5, inf, 5}), floats({2, inf, inf, 2, -0.0})), {-0.0, 5, inf, nan, nan}));
  Tensor ints = from_vector<int64_t>({7, -7, 7, -7}), divisors = from_vector<int64_t>({2, 2, -2, -2});
  EXPECT_EQ(remainder(ints, divisors).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, -1, -1}));
  EXPECT_EQ(fmod(ints, divisors).to_vector<int64_t>(), (std::vector<int64_t>{1, -1, 1, -1}));
  EXPECT_EQ(floor_divide(ints, divisors).to_vector<int64_t>(), (std::vector<int64_t>{3, -4, -4, 3}));
  constexpr int64_t lowest = std::numeric_limits<int64_t>::min();
  Tensor extreme = from_vector<int64_t>({lowest}), minus_one = from_vector<int64_t>({-1});
  EXPECT_EQ(floor_divide(extreme, minus_one).to_vector<int64_t>(), (std::vector<int64_t>{lowest}));
  EXPECT_EQ(remainder(extreme, minus_one).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ(fmod(extreme, minus_one).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  // Scalar forms promote as arithmetic does.
  EXPECT_EQ(remainder(from_vector<int32_t>({5, -3}), 0.5).dtype(), DType::f32);
  EXPECT_EQ(remainder(from_vector<int32_t>({5, -3}), 3).to_vector<int32_t>(), (std::vector<int32_t>{2, 0}));
  EXPECT_EQ(floor_divide(from_vector<float>({5, -3}), 2).to_vector<float>(), (std::vector<float>{2, -2}));
  EXPECT_EQ(fmod(from_vector<float>({5, -3}).to(DType::bf16), 3).dtype(), DType::bf16);

  EXPECT_EMBER_ERROR(remainder(ints, from_vector<int64_t>({0, 1, 1, 1})),
                     "remainder: integer division by zero (the int64 divisor of shape [4] holds a 0)");
  EXPECT_EMBER_ERROR(floor_divide(ints, 0), "floor_divide: integer division by zero");
  EXPECT_EMBER_ERROR(fmod(from_vector<int32_t>({1}), from_vector<int32_t>({0})), "fmod: integer division by zero");
  Tensor mask = from_vector<float>({1, 0}).to(DType::boolean);
  EXPECT_EMBER_ERROR(remainder(mask, mask), "remainder: not supported for bool tensors (bool and bool)");

  // Gradients, torch 2.15's: da = 1; remainder's db = -floor_divide(a, b),
  // fmod's db = -trunc(a / b) (inf at b = 0); floor_divide's are 0.
  for (auto [name, fn, db] : {std::tuple{"remainder", ops[1].second, std::vector<double>{-2, 3, 2, inf}},
                              std::tuple{"fmod", ops[0].second, std::vector<double>{-2, 2, 1, inf}},
                              std::tuple{"floor_divide", ops[2].second, std::vector<double>{0, 0, 0, 0}}}) {
    Tensor x = a.clone(), y = b.clone();
    x.requires_grad_(true);
    y.requires_grad_(true);
    sum(fn(x, y)).backward();
    const double da = std::string(name) == "floor_divide" ? 0 : 1;
    EXPECT_TRUE(same(x.grad(), {da, da, da, da})) << name;
    EXPECT_TRUE(same(y.grad(), db)) << name;
  }
}

}  // namespace
}  // namespace ember::testing
