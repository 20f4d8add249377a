// The CUDA element-wise family (kernels/cuda/elementwise_*.cu) against the CPU
// reference kernels: every op in every dtype the CPU backend registers, over
// random and broadcast shapes, 0-d and empty tensors, every layout (strided,
// expanded, and dense but off the launcher's 16-byte packs), the special
// values (nan, inf, -0, integer extremes) and the gradients. Without a GPU the
// parity tests skip; the coverage test runs in every CUDA build.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "cuda/cuda_compare.h"

namespace ember::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::f16, DType::bf16};
const std::vector<DType> kSigned = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

std::string describe(DType dtype, const Shape& shape, const std::string& layout) {
  return fmt::format("{} {} ({})", dtype_name(dtype), shape.str(), layout);
}

// layouts_of's layouts plus a dense tensor one element into its storage: its
// data pointer is off the 16-byte packs, so the launcher's strided path runs
// it as one merged dim.
std::vector<Layout> gpu_layouts(const Tensor& t) {
  std::vector<Layout> layouts = layouts_of(t);
  Tensor storage = zeros({t.numel() + 1}, {.dtype = t.dtype()});
  Tensor shifted = storage.slice(0, 1, t.numel() + 1).reshape(t.shape());
  shifted.copy_(t);
  layouts.push_back({"offset", shifted});
  return layouts;
}

// 0-d, empty, sizes around the packs (tails of 1 to 7 elements), a few
// blocks' worth, and random ones.
std::vector<Shape> unary_shapes() {
  std::vector<Shape> shapes = {{}, {0}, {1}, {7}, {9}, {3, 0}, {7, 33}, {2, 3, 5}, {300, 257}};
  for (int i = 0; i < 3; ++i) shapes.push_back(random_shape(3));
  return shapes;
}

// Broadcast pairs: scalars, size-1 dims on either side, empty, dense, random.
std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  std::vector<std::pair<Shape, Shape>> pairs = {
      {{}, {}},        {{5}, {}},         {{}, {3, 4}},      {{3, 1}, {1, 4}},   {{2, 3, 4}, {4}},
      {{2, 1, 4}, {3, 1}}, {{0, 3}, {1, 3}}, {{4, 0}, {4, 1}}, {{7, 33}, {7, 33}}, {{1}, {6, 1, 5}},
      {{129, 65}, {129, 65}},
  };
  for (int i = 0; i < 3; ++i) {
    Shape a = random_shape(3), b = a;
    for (int d = 0; d < b.ndim(); ++d)
      if (rng()() % 3 == 0) b[d] = 1;
    pairs.emplace_back(a, b);
  }
  return pairs;
}

// Every layout of a with b dense, and every layout of b with a in its last
// layout: each layout meets the other operand's dense and strided forms
// without the square of the two lists.
void expect_binary_on_gpu(const TensorFunction& f, const Tensor& a, const Tensor& b, const std::string& what) {
  std::vector<Layout> layouts_a = gpu_layouts(a), layouts_b = gpu_layouts(b);
  for (const Layout& la : layouts_a)
    EXPECT_TRUE(same_on_gpu(f, {la.tensor, b})) << what << ": " << describe(a.dtype(), a.shape(), la.name) << " with "
                                                << b.shape().str();
  for (const Layout& lb : layouts_b)
    EXPECT_TRUE(same_on_gpu(f, {layouts_a.back().tensor, lb.tensor}))
        << what << ": " << a.shape().str() << " (" << layouts_a.back().name << ") with "
        << describe(b.dtype(), b.shape(), lb.name);
}

void expect_unary_on_gpu(const TensorFunction& f, const Tensor& t, const std::string& what) {
  for (const Layout& layout : gpu_layouts(t))
    EXPECT_TRUE(same_on_gpu(f, {layout.tensor})) << what << ": " << describe(t.dtype(), t.shape(), layout.name);
}

// Values where the kernels' rules show: nan on either side, infinities,
// signed zeros, half overflow and underflow, ties.
Tensor special_values(DType dtype) {
  return from_vector<double>({kNan, 1.0, -kInf, kInf, 0.0, -0.0, 1.0, -1.0, 2.5, -3.0, 1e-30, 7e4, kNan, 2.5, -0.0})
      .to(dtype);
}
Tensor special_values_reversed(DType dtype) {
  return from_vector<double>({2.0, kNan, kInf, -kInf, -0.0, 0.0, 1.0, kNan, -2.5, -3.0, 1e-30, -7e4, kNan, 2.5, 0.0})
      .to(dtype);
}
// The dtype's extremes among small values, in two orders.
Tensor integer_extremes(DType dtype, bool reversed) {
  const int64_t low = dtype == DType::i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  const int64_t high = dtype == DType::i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  std::vector<int64_t> values = {low, high, -1, 0, 1, 3, low + 1, high - 1, 2};
  if (reversed) std::reverse(values.begin(), values.end());
  return from_vector<int64_t>(values).to(dtype);
}

Tensor small_integers(const Shape& shape, DType dtype) { return random_tensor(shape, DType::i64, -1, 1).to(dtype); }

// ---- Coverage: no GPU needed ------------------------------------------------

const char* const kFamilyOps[] = {
    "add", "sub", "mul", "div", "maximum", "minimum", "pow",                                  // binary
    "fmod", "remainder", "floor_divide",                                                      // binary
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",                          // compare
    "logical_not", "isnan", "isinf",                                                          // predicates
    "neg", "abs", "relu", "exp", "log", "log1p", "sqrt", "rsqrt", "sin", "cos", "tanh",       // unary
    "erf", "sigmoid", "gelu", "gelu_tanh", "silu", "pow_scalar", "clamp",                     // unary
    "floor", "ceil", "round", "trunc", "sign",                                                // unary
    "threshold_backward", "gelu_backward", "gelu_tanh_backward", "silu_backward",             // gradients
    "where", "addcmul", "masked_fill",                                                        // selection
};

TEST(CudaElementwise, CoversExactlyTheDtypesOfTheCpuBackend) {
  for (const char* name : kFamilyOps) {
    const OpBase* op = nullptr;
    for (const OpBase* candidate : OpBase::all())
      if (candidate->name() == name) op = candidate;
    ASSERT_NE(op, nullptr) << name;
    for (DType dtype : kAllDTypes)
      EXPECT_EQ(op->kind(DeviceType::cuda, dtype) == KernelKind::optimized,
                op->kind(DeviceType::cpu, dtype) == KernelKind::optimized)
          << name << " " << dtype_name(dtype);
  }
}

// ---- Binary arithmetic --------------------------------------------------------

struct BinaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&, const Tensor&);
  double lo_b, hi_b;  // b's random domain: div stays away from 0
  bool accepts_bool;
};
const BinaryCase kBinaryCases[] = {
    {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, -2, 2, true},
    {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, -2, 2, false},
    {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, -2, 2, true},
    {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, 0.5, 3, true},
    {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, -2, 2, true},
    {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, -2, 2, true},
    {"fmod", [](const Tensor& a, const Tensor& b) { return fmod(a, b); }, 1, 4, false},
    {"remainder", [](const Tensor& a, const Tensor& b) { return remainder(a, b); }, 1, 4, false},
    {"floor_divide", [](const Tensor& a, const Tensor& b) { return floor_divide(a, b); }, 1, 4, false},
};

TEST(CudaElementwise, BinaryMatchesReferenceForEveryDtypeShapeAndLayout) {
  EMBER_REQUIRE_GPU();
  for (const BinaryCase& op : kBinaryCases) {
    for (DType dtype : kAllDTypes) {
      if (dtype == DType::boolean && !op.accepts_bool) continue;
      for (auto& [shape_a, shape_b] : broadcast_pairs()) {
        Tensor a = random_tensor(shape_a, dtype), b = random_tensor(shape_b, dtype, op.lo_b, op.hi_b);
        expect_binary_on_gpu([&](const Tensors& x) { return op.fn(x[0], x[1]); }, a, b, op.name);
      }
    }
  }
}

TEST(CudaElementwise, ScalarAndInPlaceForms) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kSigned) {
    Tensor a = random_tensor({5, 7}, dtype, 0.5, 3);
    for (const Layout& la : gpu_layouts(a)) {
      std::string what = describe(dtype, a.shape(), la.name);
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return x[0] * 2.5; }, {la.tensor})) << what;
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return 7 - x[0]; }, {la.tensor})) << what;
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return 6 / x[0]; }, {la.tensor})) << what;
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return x[0] + 3; }, {la.tensor})) << what;
      // In place through a step-2 view of a buffer on the operand's device.
      EXPECT_TRUE(same_on_gpu(
          [](const Tensors& x) {
            Tensor buffer = zeros({5, 14}, {.dtype = x[0].dtype(), .device = x[0].device()});
            Tensor view = buffer.slice(1, 0, 14, 2);
            view.copy_(x[0]);
            view += x[1];
            view *= 3;
            return buffer;
          },
          {la.tensor, random_tensor({7}, dtype)}))
          << what;
    }
  }
}

TEST(CudaElementwise, IntegersWrapOnOverflow) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : {DType::i32, DType::i64}) {
    Tensor a = integer_extremes(dtype, false), b = integer_extremes(dtype, true);
    for (const BinaryCase& op : kBinaryCases) {
      if (std::string(op.name) == "div") continue;  // true division: floating
      EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op.fn(x[0], x[1]); }, {a, b}))
          << op.name << " " << dtype_name(dtype);
    }
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return neg(x[0]); }, {a})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return abs(x[0]); }, {a})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return pow(x[0], 3); }, {a})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return addcmul(x[0], x[1], x[0], 5); }, {a, b}))
        << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return clamp(x[0], -5'000'000'000, 5'000'000'000); }, {a}))
        << dtype_name(dtype);
  }
}

// maximum and minimum propagate nan from either side; comparisons with nan are false.
TEST(CudaElementwise, SpecialValuesMatchReference) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloating) {
    Tensor a = special_values(dtype), b = special_values_reversed(dtype);
    const std::pair<const char*, TensorFunction> binary_ops[] = {
        {"maximum", [](const Tensors& x) { return maximum(x[0], x[1]); }},
        {"minimum", [](const Tensors& x) { return minimum(x[0], x[1]); }},
        {"add", [](const Tensors& x) { return add(x[0], x[1]); }},
        {"div", [](const Tensors& x) { return div(x[0], x[1]); }},
        {"pow", [](const Tensors& x) { return pow(x[0], x[1]); }},
        {"eq", [](const Tensors& x) { return eq(x[0], x[1]); }},
        {"ne", [](const Tensors& x) { return ne(x[0], x[1]); }},
        {"lt", [](const Tensors& x) { return lt(x[0], x[1]); }},
        {"ge", [](const Tensors& x) { return ge(x[0], x[1]); }},
        {"logical_and", [](const Tensors& x) { return logical_and(x[0], x[1]); }},
        {"logical_or", [](const Tensors& x) { return logical_or(x[0], x[1]); }},
        {"threshold_backward", [](const Tensors& x) { return threshold_backward(x[1], x[0]); }},
    };
    for (const auto& [name, f] : binary_ops)
      EXPECT_TRUE(same_on_gpu(f, {a, b})) << name << " " << dtype_name(dtype);
    const std::pair<const char*, TensorFunction> unary_ops[] = {
        {"isnan", [](const Tensors& x) { return isnan(x[0]); }},
        {"isinf", [](const Tensors& x) { return isinf(x[0]); }},
        {"logical_not", [](const Tensors& x) { return logical_not(x[0]); }},
        {"relu", [](const Tensors& x) { return relu(x[0]); }},
        {"abs", [](const Tensors& x) { return abs(x[0]); }},
        {"neg", [](const Tensors& x) { return neg(x[0]); }},
        {"exp", [](const Tensors& x) { return exp(x[0]); }},
        {"log", [](const Tensors& x) { return log(x[0]); }},
        {"sqrt", [](const Tensors& x) { return sqrt(x[0]); }},
        {"rsqrt", [](const Tensors& x) { return rsqrt(x[0]); }},
        {"tanh", [](const Tensors& x) { return tanh(x[0]); }},
        {"erf", [](const Tensors& x) { return erf(x[0]); }},
        {"sigmoid", [](const Tensors& x) { return sigmoid(x[0]); }},
        {"silu", [](const Tensors& x) { return silu(x[0]); }},
        {"gelu", [](const Tensors& x) { return gelu(x[0]); }},
        {"clamp", [](const Tensors& x) { return clamp(x[0], -1, 2); }},
        {"pow 0.5", [](const Tensors& x) { return pow(x[0], 0.5); }},
        {"pow -1", [](const Tensors& x) { return pow(x[0], -1); }},
    };
    for (const auto& [name, f] : unary_ops) EXPECT_TRUE(same_on_gpu(f, {a})) << name << " " << dtype_name(dtype);
  }
}

// Integer bases to negative integer tensor exponents give 0, or +-1 for bases +-1.
TEST(CudaElementwise, PowByTensorMatchesReference) {
  EMBER_REQUIRE_GPU();
  const std::pair<Shape, Shape> pairs[] = {{{}, {}}, {{5}, {}}, {{3, 1}, {1, 4}}, {{0, 3}, {1, 3}}, {{7, 33}, {33}}};
  for (DType dtype : kSigned) {
    bool integral = is_integral(dtype);
    for (auto& [shape_a, shape_b] : pairs) {
      Tensor base = random_tensor(shape_a, dtype, integral ? -3 : 0.25, 3);
      Tensor exponent = random_tensor(shape_b, dtype, -2, 4);
      expect_binary_on_gpu([](const Tensors& x) { return pow(x[0], x[1]); }, base, exponent, "pow");
    }
  }
}

// ---- Comparisons and logic ----------------------------------------------------

TEST(CudaElementwise, ComparisonsAndLogicMatchReference) {
  EMBER_REQUIRE_GPU();
  const std::pair<const char*, Tensor (*)(const Tensor&, const Tensor&)> ops[] = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }},
  };
  const std::pair<Shape, Shape> pairs[] = {{{}, {}}, {{6}, {}}, {{3, 1}, {1, 4}}, {{0, 2}, {1, 2}}, {{33, 7}, {33, 7}}};
  for (const auto& [name, op] : ops) {
    const auto& fn = op;  // clang 14 cannot capture a structured binding
    for (DType dtype : kAllDTypes) {
      for (auto& [shape_a, shape_b] : pairs) {
        // Values in {-1, 0, 1}, so that ties (and zeros, for the logic) are common.
        Tensor a = small_integers(shape_a, dtype), b = small_integers(shape_b, dtype);
        expect_binary_on_gpu([fn](const Tensors& x) { return fn(x[0], x[1]); }, a, b, name);
      }
      auto against_zero = [fn](const Tensors& x) {
        return fn(x[0], zeros({}, {.dtype = x[0].dtype(), .device = x[0].device()}));
      };
      EXPECT_TRUE(same_on_gpu(against_zero, {small_integers({4, 5}, dtype)}))
          << name << " against a 0-d zero, " << dtype_name(dtype);
    }
  }
  for (DType dtype : kAllDTypes) {
    Tensor a = random_tensor({6, 5}, dtype, -1, 1);
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{6, 5}, Shape{17}}) {
      Tensor t = small_integers(shape, dtype);
      expect_unary_on_gpu([](const Tensors& x) { return logical_not(x[0]); }, t, "logical_not");
      expect_unary_on_gpu([](const Tensors& x) { return isnan(x[0]); }, t, "isnan");
      expect_unary_on_gpu([](const Tensors& x) { return isinf(x[0]); }, t, "isinf");
    }
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return lt(x[0], 0.5); }, {a})) << dtype_name(dtype);
  }
}

// ---- Unary math ----------------------------------------------------------------

// neg, abs, relu and sign keep integer dtypes, and rounding gives integers back;
// the others compute integers in f32.
struct UnaryCase {
  const char* name;
  Tensor (*fn)(const Tensor&);
  double lo, hi;  // the random input domain
};
const UnaryCase kUnaryCases[] = {
    {"neg", [](const Tensor& a) { return neg(a); }, -3, 3},
    {"abs", [](const Tensor& a) { return abs(a); }, -3, 3},
    {"relu", [](const Tensor& a) { return relu(a); }, -3, 3},
    {"sign", [](const Tensor& a) { return sign(a); }, -3, 3},
    {"floor", [](const Tensor& a) { return floor(a); }, -5, 5},
    {"ceil", [](const Tensor& a) { return ceil(a); }, -5, 5},
    {"round", [](const Tensor& a) { return round(a); }, -5, 5},
    {"trunc", [](const Tensor& a) { return trunc(a); }, -5, 5},
    {"exp", [](const Tensor& a) { return exp(a); }, -5, 5},
    {"log", [](const Tensor& a) { return log(a); }, 0.05, 20},
    {"log1p", [](const Tensor& a) { return log1p(a); }, -0.9, 20},
    {"sqrt", [](const Tensor& a) { return sqrt(a); }, 0.0, 20},
    {"rsqrt", [](const Tensor& a) { return rsqrt(a); }, 0.05, 20},
    {"sin", [](const Tensor& a) { return sin(a); }, -10, 10},
    {"cos", [](const Tensor& a) { return cos(a); }, -10, 10},
    {"tanh", [](const Tensor& a) { return tanh(a); }, -5, 5},
    {"erf", [](const Tensor& a) { return erf(a); }, -4, 4},
    {"sigmoid", [](const Tensor& a) { return sigmoid(a); }, -8, 8},
    {"gelu", [](const Tensor& a) { return gelu(a); }, -5, 5},
    {"gelu_tanh", [](const Tensor& a) { return gelu(a, GeluApproximation::tanh); }, -5, 5},
    {"silu", [](const Tensor& a) { return silu(a); }, -8, 8},
};

TEST(CudaElementwise, UnaryMatchesReferenceForEveryDtypeShapeAndLayout) {
  EMBER_REQUIRE_GPU();
  for (const UnaryCase& op : kUnaryCases) {
    for (DType dtype : kSigned) {
      for (const Shape& shape : unary_shapes())
        expect_unary_on_gpu([&](const Tensors& x) { return op.fn(x[0]); }, random_tensor(shape, dtype, op.lo, op.hi),
                            op.name);
    }
  }
}

TEST(CudaElementwise, PowByScalarMatchesReference) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloating) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{7, 33}}) {
      Tensor positive = random_tensor(shape, dtype, 0.25, 4), signed_values = random_tensor(shape, dtype, -3, 3);
      for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, 2.5, 0.0, 1.0 / 3})
        expect_unary_on_gpu([e](const Tensors& x) { return pow(x[0], e); }, positive, fmt::format("pow {}", e));
      for (int64_t e : {2, 3, -1})
        expect_unary_on_gpu([e](const Tensors& x) { return pow(x[0], e); }, signed_values, fmt::format("pow {}", e));
    }
  }
  for (DType dtype : {DType::i32, DType::i64, DType::boolean}) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{7, 33}}) {
      Tensor t = random_tensor(shape, dtype, -3, 3);
      for (int64_t e : {0, 1, 2, 3, 7})
        expect_unary_on_gpu([e](const Tensors& x) { return pow(x[0], e); }, t, fmt::format("pow {}", e));
    }
  }
}

TEST(CudaElementwise, ClampMatchesReference) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kSigned) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{9}, Shape{7, 33}}) {
      Tensor t = random_tensor(shape, dtype, -3, 3);
      expect_unary_on_gpu([](const Tensors& x) { return clamp(x[0], -1, 1); }, t, "clamp");
      expect_unary_on_gpu([](const Tensors& x) { return clamp(x[0], 1, -1); }, t, "clamp low > high");
      expect_unary_on_gpu([](const Tensors& x) { return clamp(x[0], -0.3, 1.1); }, t, "clamp by floats");
      expect_unary_on_gpu([](const Tensors& x) { return clamp_min(x[0], 0.5); }, t, "clamp_min");
      expect_unary_on_gpu([](const Tensors& x) { return clamp_max(x[0], -1); }, t, "clamp_max");
    }
  }
}

TEST(CudaElementwise, ActivationGradientsMatchReference) {
  EMBER_REQUIRE_GPU();
  const std::pair<const char*, TensorFunction> ops[] = {
      {"threshold_backward", [](const Tensors& x) { return threshold_backward(x[0], x[1]); }},
      {"gelu_backward", [](const Tensors& x) { return gelu_backward(x[0], x[1]); }},
      {"gelu_tanh_backward",
       [](const Tensors& x) { return gelu_backward(x[0], x[1], GeluApproximation::tanh); }},
      {"silu_backward", [](const Tensors& x) { return silu_backward(x[0], x[1]); }},
  };
  for (const auto& [name, f] : ops) {
    for (DType dtype : kFloating) {
      for (const Shape& shape : unary_shapes()) {
        Tensor grad = random_tensor(shape, dtype), input = random_tensor(shape, dtype, -4, 4);
        expect_binary_on_gpu(f, grad, input, name);
      }
    }
  }
}

// ---- where, addcmul, masked_fill -------------------------------------------

TEST(CudaElementwise, WhereMatchesReferenceWithBroadcasting) {
  EMBER_REQUIRE_GPU();
  const Shape shapes[][3] = {{{}, {}, {}}, {{3, 1}, {1, 4}, {3, 4}}, {{5}, {2, 5}, {}}, {{0, 2}, {1, 2}, {2}},
                             {{33, 7}, {33, 7}, {33, 7}}};
  for (DType dtype : kAllDTypes) {
    for (const auto& shape : shapes) {
      Tensor condition = random_tensor(shape[0], DType::boolean);
      Tensor a = random_tensor(shape[1], dtype), b = random_tensor(shape[2], dtype);
      for (const Layout& lc : gpu_layouts(condition))
        EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return where(x[0], x[1], x[2]); }, {lc.tensor, a, b}))
            << "where condition " << describe(DType::boolean, shape[0], lc.name) << " " << dtype_name(dtype);
      for (const Layout& la : gpu_layouts(a))
        EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return where(x[0], x[1], x[2]); }, {condition, la.tensor, b}))
            << "where " << describe(dtype, shape[1], la.name);
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return where(x[0], x[1], 2); }, {condition, a}))
          << "where with a scalar " << dtype_name(dtype);
    }
  }
}

TEST(CudaElementwise, AddcmulMatchesReferenceWithBroadcasting) {
  EMBER_REQUIRE_GPU();
  const Shape shapes[][3] = {{{}, {}, {}}, {{3, 1}, {1, 4}, {3, 4}}, {{5}, {2, 5}, {}}, {{0, 2}, {1, 2}, {2}},
                             {{33, 7}, {33, 7}, {33, 7}}};
  for (DType dtype : kSigned) {
    const Scalar value = is_floating(dtype) ? Scalar(-0.75) : Scalar(3);
    for (const auto& shape : shapes) {
      Tensor input = random_tensor(shape[0], dtype), t1 = random_tensor(shape[1], dtype),
             t2 = random_tensor(shape[2], dtype);
      for (const Layout& li : gpu_layouts(input))
        EXPECT_TRUE(same_on_gpu([value](const Tensors& x) { return addcmul(x[0], x[1], x[2], value); },
                                {li.tensor, t1, t2}))
            << "addcmul " << describe(dtype, shape[0], li.name);
      for (const Layout& l2 : gpu_layouts(t2))
        EXPECT_TRUE(same_on_gpu([value](const Tensors& x) { return addcmul(x[0], x[1], x[2], value); },
                                {input, t1, l2.tensor}))
            << "addcmul tensor2 " << describe(dtype, shape[2], l2.name);
    }
  }
}

TEST(CudaElementwise, MaskedFillMatchesReferenceWithBroadcasting) {
  EMBER_REQUIRE_GPU();
  const std::pair<Shape, Shape> pairs[] = {
      {{}, {}}, {{4, 5}, {5}}, {{4, 1}, {4, 6}}, {{0, 3}, {1, 3}}, {{33, 7}, {33, 7}}};
  for (DType dtype : kAllDTypes) {
    const Scalar value = dtype == DType::boolean ? Scalar(true) : is_floating(dtype) ? Scalar(-1.5) : Scalar(7);
    for (auto& [shape, mask_shape] : pairs) {
      Tensor t = random_tensor(shape, dtype), mask = random_tensor(mask_shape, DType::boolean);
      expect_binary_on_gpu([value](const Tensors& x) { return masked_fill(x[0], x[1], value); }, t, mask,
                           "masked_fill");
    }
  }
}

// ---- Sizes: many blocks, pack tails, misaligned dense runs -------------------

TEST(CudaElementwise, LargeTensorsMatchReference) {
  EMBER_REQUIRE_GPU();
  const int64_t n = (int64_t(1) << 20) + 3;  // whole packs over many blocks, then a tail of 3
  for (DType dtype : {DType::f32, DType::bf16}) {
    Tensor a = random_tensor({n}, dtype, -4, 4), b = random_tensor({n}, dtype, -4, 4);
    Tensor shifted_a = gpu_layouts(a).back().tensor;
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return add(x[0], x[1]); }, {a, b})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return add(x[0], x[1]); }, {shifted_a, b})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return gelu(x[0]); }, {a})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return lt(x[0], x[1]); }, {a, b})) << dtype_name(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return x[0] * 0.5; }, {a})) << dtype_name(dtype);
  }
  Tensor wide = random_tensor({1024, 1031}, DType::f32), row = random_tensor({1031}, DType::f32);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return mul(x[0].t(), x[1].reshape({1031, 1})); }, {wide, row}));
}

// The entry points refuse operands on two devices before any kernel runs.
TEST(CudaElementwise, OperandsOnDifferentDevicesAreErrors) {
  EMBER_REQUIRE_GPU();
  Tensor host = zeros({3}), device = zeros({3}).to(kGpu);
  Tensor host_mask = zeros({3}, {.dtype = DType::boolean});
  EXPECT_EMBER_ERROR(add(host, device), "add: expected both tensors on the same device");
  EXPECT_EMBER_ERROR(maximum(device, host), "maximum: expected both tensors on the same device");
  EXPECT_EMBER_ERROR(eq(device, host), "eq: expected both tensors on the same device");
  EXPECT_EMBER_ERROR(where(host_mask, device, device), "where: expected condition on cuda:0");
  EXPECT_EMBER_ERROR(masked_fill(device, host_mask, 1), "masked_fill: mask is on cpu but the input is on cuda:0");
  EXPECT_EMBER_ERROR(addcmul(device, host, device), "addcmul: expected both tensors on the same device");
}

// ---- Gradients through the GPU kernels -----------------------------------------

TEST(CudaElementwise, GradientsMatchReference) {
  EMBER_REQUIRE_GPU();
  const std::pair<const char*, TensorFunction> binary_ops[] = {
      {"add", [](const Tensors& x) { return add(x[0], x[1]); }},
      {"sub", [](const Tensors& x) { return sub(x[0], x[1]); }},
      {"mul", [](const Tensors& x) { return mul(x[0], x[1]); }},
      {"div", [](const Tensors& x) { return div(x[0], x[1]); }},
      {"maximum", [](const Tensors& x) { return maximum(x[0], x[1]); }},
      {"minimum", [](const Tensors& x) { return minimum(x[0], x[1]); }},
      {"pow", [](const Tensors& x) { return pow(x[0], x[1]); }},
  };
  const std::pair<const char*, TensorFunction> unary_ops[] = {
      {"neg", [](const Tensors& x) { return neg(x[0]); }},
      {"abs", [](const Tensors& x) { return abs(x[0]); }},
      {"exp", [](const Tensors& x) { return exp(x[0]); }},
      {"log", [](const Tensors& x) { return log(x[0]); }},
      {"log1p", [](const Tensors& x) { return log1p(x[0]); }},
      {"sqrt", [](const Tensors& x) { return sqrt(x[0]); }},
      {"rsqrt", [](const Tensors& x) { return rsqrt(x[0]); }},
      {"sin", [](const Tensors& x) { return sin(x[0]); }},
      {"cos", [](const Tensors& x) { return cos(x[0]); }},
      {"tanh", [](const Tensors& x) { return tanh(x[0]); }},
      {"erf", [](const Tensors& x) { return erf(x[0]); }},
      {"sigmoid", [](const Tensors& x) { return sigmoid(x[0]); }},
      {"relu", [](const Tensors& x) { return relu(x[0]); }},
      {"gelu", [](const Tensors& x) { return gelu(x[0]); }},
      {"gelu_tanh", [](const Tensors& x) { return gelu(x[0], GeluApproximation::tanh); }},
      {"silu", [](const Tensors& x) { return silu(x[0]); }},
      {"pow_scalar", [](const Tensors& x) { return pow(x[0], 2.5); }},
      {"clamp", [](const Tensors& x) { return clamp(x[0], 0.7, 1.4); }},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    // Positive inputs keep log, sqrt, pow and div smooth; b broadcasts along dim 0.
    Tensor a = random_tensor({4, 6}, dtype, 0.25, 2), b = random_tensor({6}, dtype, 0.5, 2);
    for (const auto& [name, f] : binary_ops)
      EXPECT_TRUE(same_gradients_on_gpu(f, {a, b})) << name << " " << dtype_name(dtype);
    for (const auto& [name, f] : unary_ops)
      EXPECT_TRUE(same_gradients_on_gpu(f, {a.t()})) << name << " " << dtype_name(dtype);
    Tensor condition = random_tensor({4, 1}, DType::boolean);
    EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& x) { return where(x[0], x[1], x[2]); }, {condition, a, b}))
        << "where " << dtype_name(dtype);
    EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& x) { return masked_fill(x[0], x[1], 3); }, {a, condition}))
        << "masked_fill " << dtype_name(dtype);
    EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& x) { return addcmul(x[0], x[1], x[2], 0.5); }, {b, a, a}))
        << "addcmul " << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace ember::testing
