// Comparisons, logic, maximum/minimum, where, isnan/isinf against the
// reference kernels: every dtype, broadcast shapes (size-1, 0-size, 0-d),
// non-contiguous layouts, scalar forms; plus promotion rules, nan handling and errors.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
};

const BinaryCase kBinaryCases[] = {
    {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
    {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
    {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
    {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
    {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
    {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
    {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }},
    {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }},
};

struct ScalarCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Scalar&);
};

const ScalarCase kScalarCases[] = {
    {"eq", [](const Tensor& a, const Scalar& b) { return eq(a, b); }},
    {"ne", [](const Tensor& a, const Scalar& b) { return ne(a, b); }},
    {"lt", [](const Tensor& a, const Scalar& b) { return lt(a, b); }},
    {"le", [](const Tensor& a, const Scalar& b) { return le(a, b); }},
    {"gt", [](const Tensor& a, const Scalar& b) { return gt(a, b); }},
    {"ge", [](const Tensor& a, const Scalar& b) { return ge(a, b); }},
};

std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  std::vector<std::pair<Shape, Shape>> pairs = {
      {{}, {}},         {{5}, {}},       {{}, {3, 4}},     {{3, 1}, {1, 4}},    {{2, 3, 4}, {4}},
      {{0, 3}, {1, 3}}, {{4, 0}, {4, 1}}, {{7, 33}, {7, 33}}, {{1}, {6, 1, 5}}, {{300, 257}, {300, 257}},
  };
  for (int i = 0; i < 4; ++i) {
    Shape a = random_shape(3);
    Shape b = a;
    for (int d = 0; d < b.ndim(); ++d)
      if (rng()() % 3 == 0) b[d] = 1;
    pairs.emplace_back(a, b);
  }
  return pairs;
}

// Small integer values in any dtype, so that equal elements actually occur.
Tensor small_values(const Shape& shape, DType dtype) { return random_tensor(shape, DType::i32, -2, 2).to(dtype); }

TEST(Compare, MatchesReferenceForEveryDtypeShapeAndLayout) {
  for (const BinaryCase& op : kBinaryCases) {
    for (DType dtype : kAllDTypes) {
      for (auto& [shape_a, shape_b] : broadcast_pairs()) {
        Tensor a = small_values(shape_a, dtype), b = small_values(shape_b, dtype);
        Tensor expected = reference([&] { return op.fn(a, b); });
        for (const Layout& la : layouts_of(a))
          for (const Layout& lb : layouts_of(b))
            EXPECT_TRUE(all_close(op.fn(la.tensor, lb.tensor), expected))
                << op.name << " " << dtype_name(dtype) << " " << shape_a.str() << " (" << la.name << ") with "
                << shape_b.str() << " (" << lb.name << ")";
      }
    }
  }
}

TEST(Compare, ScalarFormsMatchReference) {
  const Scalar scalars[] = {1, 0.5, true, -2};
  for (const ScalarCase& op : kScalarCases) {
    for (DType dtype : kAllDTypes) {
      for (const Shape& shape : {Shape{}, Shape{0}, Shape{7, 33}}) {
        Tensor a = small_values(shape, dtype);
        for (const Scalar& b : scalars) {
          Tensor expected = reference([&] { return op.fn(a, b); });
          for (const Layout& la : layouts_of(a))
            EXPECT_TRUE(all_close(op.fn(la.tensor, b), expected))
                << op.name << " " << dtype_name(dtype) << " " << shape.str() << " (" << la.name << ")";
        }
      }
    }
  }
}

TEST(Compare, PredicatesMatchReference) {
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7, 33}, Shape{300, 257}}) {
      Tensor a = small_values(shape, dtype);
      if (is_floating(dtype) && a.numel() > 2) {  // plant nan and both infinities
        Tensor flat = a.flatten();
        flat.select(0, 0).fill_(kNan);
        flat.select(0, 1).fill_(kInf);
        flat.select(0, 2).fill_(-kInf);
      }
      for (auto fn : {&logical_not, &isnan, &isinf}) {
        Tensor expected = reference([&] { return fn(a); });
        for (const Layout& la : layouts_of(a))
          EXPECT_TRUE(all_close(fn(la.tensor), expected)) << dtype_name(dtype) << " " << shape.str() << " (" << la.name << ")";
      }
    }
  }
}

TEST(Compare, WhereMatchesReferenceWithBroadcasting) {
  const Shape triples[][3] = {
      {{}, {}, {}},         {{5}, {5}, {5}},       {{3, 1}, {1, 4}, {}}, {{2, 3, 4}, {4}, {3, 1}},
      {{0, 3}, {1, 3}, {3}}, {{7, 33}, {7, 33}, {}}, {{300, 257}, {300, 257}, {300, 257}}, {{1}, {6, 1, 5}, {5}},
  };
  for (DType dtype : kAllDTypes) {
    for (const auto& [shape_c, shape_a, shape_b] : triples) {
      Tensor condition = random_tensor(shape_c, DType::boolean), a = random_tensor(shape_a, dtype);
      Tensor b = random_tensor(shape_b, dtype);
      Tensor expected = reference([&] { return where(condition, a, b); });
      for (const Layout& lc : layouts_of(condition))
        for (const Layout& la : layouts_of(a))
          EXPECT_TRUE(all_close(where(lc.tensor, la.tensor, b), expected))
              << dtype_name(dtype) << " " << shape_c.str() << " (" << lc.name << ") " << shape_a.str() << " ("
              << la.name << ") " << shape_b.str();
      Tensor expected_scalar = reference([&] { return where(condition, a, 1); });
      for (const Layout& la : layouts_of(a))
        EXPECT_TRUE(all_close(where(condition, la.tensor, 1), expected_scalar)) << dtype_name(dtype) << " scalar";
    }
  }
}

TEST(Compare, HandValues) {
  using Bools = std::vector<bool>;
  auto bools = [](const Tensor& t) {
    EXPECT_EQ(t.dtype(), DType::boolean);
    return t.to_vector<bool>();
  };
  Tensor x = from_vector<float>({1, kNan, kInf, -kInf, 0});
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    EXPECT_EQ(bools(isnan(x.to(dtype))), (Bools{false, true, false, false, false})) << dtype_name(dtype);
    EXPECT_EQ(bools(isinf(x.to(dtype))), (Bools{false, false, true, true, false})) << dtype_name(dtype);
    // nan compares unequal to everything, itself included.
    EXPECT_EQ(bools(eq(x.to(dtype), x.to(dtype))), (Bools{true, false, true, true, true})) << dtype_name(dtype);
    // nonzero is true, nan included.
    EXPECT_EQ(bools(logical_not(x.to(dtype))), (Bools{false, false, false, false, true})) << dtype_name(dtype);
  }
  EXPECT_EQ(bools(isnan(from_vector<int32_t>({0, 1}))), (Bools{false, false}));
  EXPECT_EQ(bools(isinf(from_vector<int64_t>({0, 1}))), (Bools{false, false}));
  EXPECT_EQ(bools(logical_and(from_vector<float>({0, kNan, 2, 3}), from_vector<int32_t>({1, 1, 0, -4}))),
            (Bools{false, true, false, true}));
  EXPECT_EQ(bools(logical_or(from_vector<float>({0, -0.0f, 2}), from_vector<float>({0, 0, 0}))), (Bools{false, false, true}));
  EXPECT_EQ(bools(lt(from_vector<float>({1, 2, 3}), 2)), (Bools{true, false, false}));
  EXPECT_EQ(bools(ge(from_vector<int32_t>({1, 2, 3}), from_vector<int32_t>({2}))), (Bools{false, true, true}));

  // maximum and minimum propagate nan from either side.
  Tensor a = from_vector<float>({1, kNan, 3, -kInf}), b = from_vector<float>({kNan, 2, 1, 0});
  std::vector<float> high = maximum(a, b).to_vector<float>(), low = minimum(a, b).to_vector<float>();
  EXPECT_TRUE(std::isnan(high[0]) && std::isnan(high[1]) && std::isnan(low[0]) && std::isnan(low[1]));
  EXPECT_EQ(high[2], 3);
  EXPECT_EQ(high[3], 0);
  EXPECT_EQ(low[2], 1);
  EXPECT_EQ(low[3], -kInf);
  EXPECT_EQ(maximum(from_vector<int32_t>({-1, 5}), from_vector<int32_t>({2})).to_vector<int32_t>(),
            (std::vector<int32_t>{2, 5}));

  Tensor condition = from_vector<bool>({true, false, true});
  EXPECT_EQ(where(condition, from_vector<float>({1, 2, 3}), from_vector<float>({10, 20, 30})).to_vector<float>(),
            (std::vector<float>{1, 20, 3}));
  EXPECT_EQ(where(condition, from_vector<int32_t>({1, 2, 3}), -1).to_vector<int32_t>(), (std::vector<int32_t>{1, -1, 3}));
  EXPECT_EQ(where(condition.unsqueeze(1), from_vector<float>({1, 2}), 0).to_vector<float>(),
            (std::vector<float>{1, 2, 0, 0, 1, 2}));
}

TEST(Compare, PromotesToACommonDtypeFirst) {
  // 1.5 is compared as f32, not truncated to the int tensor's dtype.
  EXPECT_EQ(lt(from_vector<int32_t>({1, 2}), 1.5).to_vector<bool>(), (std::vector<bool>{true, false}));
  // int32 meets int64 in int64: 2^32 + 1 must not wrap to 1.
  EXPECT_FALSE(eq(from_vector<int32_t>({1}), from_vector<int64_t>({(int64_t(1) << 32) + 1})).item<bool>());
  // f16 meets f32 in f32, where half(0.1) != 0.1.
  EXPECT_FALSE(eq(full({1}, 0.1, {.dtype = DType::f16}), full({1}, 0.1)).item<bool>());
  EXPECT_TRUE(eq(full({1}, 0.1, {.dtype = DType::f16}), full({1}, 0.1, {.dtype = DType::f16})).item<bool>());
  EXPECT_EQ(eq(ones({2}, {.dtype = DType::bf16}), 1).dtype(), DType::boolean);

  Tensor i32 = ones({2}, {.dtype = DType::i32}), f16 = ones({2}, {.dtype = DType::f16});
  Tensor mask = ones({2}, {.dtype = DType::boolean});
  EXPECT_EQ(maximum(i32, f16).dtype(), DType::f16);
  EXPECT_EQ(minimum(i32, ones({2}, {.dtype = DType::i64})).dtype(), DType::i64);
  EXPECT_EQ(maximum(mask, mask).dtype(), DType::boolean);
  EXPECT_EQ(where(mask, i32, ones({2})).dtype(), DType::f32);
  EXPECT_EQ(where(mask, i32, 2).dtype(), DType::i32);
  EXPECT_EQ(where(mask, i32, 2.5).dtype(), DType::f32);
  EXPECT_EQ(where(mask, f16, 2.5).dtype(), DType::f16);
  EXPECT_EQ(where(mask, i32, 2.5).to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(Compare, BadInputsNameTheOpAndValues) {
  EXPECT_EMBER_ERROR(eq(zeros({2, 3}), zeros({4, 3})), "eq: shapes [2, 3] and [4, 3] cannot be broadcast");
  EXPECT_EMBER_ERROR(maximum(zeros({2}), zeros({3})), "maximum: shapes [2] and [3] cannot be broadcast");
  EXPECT_EMBER_ERROR(where(ones({2}), zeros({2}), zeros({2})), "where: expected condition to be a bool tensor, got float32");
  EXPECT_EMBER_ERROR(where(ones({2}, {.dtype = DType::boolean}), zeros({3}), zeros({3})),
                     "where: shapes [2] and [3] cannot be broadcast");
  EXPECT_EMBER_ERROR(where(Tensor(), zeros({2}), 0), "where: undefined");
  EXPECT_EMBER_ERROR(lt(Tensor(), 1), "lt: undefined");
  EXPECT_EMBER_ERROR(logical_and(zeros({1}), Tensor()), "logical_and: undefined");
  EXPECT_EMBER_ERROR(isnan(Tensor()), "isnan: undefined");
}

}  // namespace
}  // namespace ember::testing
