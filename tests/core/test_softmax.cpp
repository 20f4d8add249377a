// softmax and log_softmax against the reference kernels: every floating dtype,
// every dim of small shapes (0-size, 0-d, size-1), every layout; large inputs on
// two threads (dense lines, one long line, columns); -inf and nan handling;
// exact hand values; error messages.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

using SoftmaxFn = Tensor (*)(const Tensor&, int64_t);
struct SoftmaxCase {
  const char* name;
  SoftmaxFn fn;
};
const SoftmaxCase kSoftmaxCases[] = {
    {"softmax", [](const Tensor& t, int64_t dim) { return softmax(t, dim); }},
    {"log_softmax", [](const Tensor& t, int64_t dim) { return log_softmax(t, dim); }},
};

void expect_matches_reference(const SoftmaxCase& op, const Tensor& t) {
  for (int64_t dim = -std::max(t.dim(), 1); dim < std::max(t.dim(), 1); ++dim) {
    Tensor expected = reference([&] { return op.fn(t, dim); });
    for (const Layout& layout : layouts_of(t))
      EXPECT_TRUE(all_close(op.fn(layout.tensor, dim), expected))
          << op.name << " " << dtype_name(t.dtype()) << " " << t.shape().str() << " dim " << dim << " ("
          << layout.name << ")";
  }
}

TEST(Softmax, MatchesReferenceForEveryDtypeShapeDimAndLayout) {
  std::vector<Shape> shapes = {{}, {5}, {0}, {1}, {3, 0}, {4, 1, 3}, {7, 33}, {2, 3, 4}, {1, 300}};
  for (int i = 0; i < 4; ++i) shapes.push_back(random_shape(3));
  for (const SoftmaxCase& op : kSoftmaxCases)
    for (DType dtype : kFloatingDTypes)
      for (const Shape& shape : shapes) expect_matches_reference(op, random_tensor(shape, dtype, -5.0, 5.0));
}

TEST(Softmax, LargeInputsOnTwoThreadsMatchReference) {
  set_num_threads(2);
  for (const SoftmaxCase& op : kSoftmaxCases) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      for (const Shape& shape : {Shape{200000}, Shape{64, 1000}, Shape{1000, 64}, Shape{20, 30, 100}}) {
        Tensor t = random_tensor(shape, dtype, -10.0, 10.0);
        for (int64_t dim = 0; dim < t.dim(); ++dim)
          EXPECT_TRUE(all_close(op.fn(t, dim), reference([&] { return op.fn(t, dim); })))
              << op.name << " " << shape.str() << " dim " << dim;
      }
    }
  }
  Tensor t = random_tensor({1 << 20}, DType::f32, -10.0, 10.0);
  EXPECT_NEAR(sum(softmax(t, 0)).item<double>(), 1.0, 1e-5);
  set_num_threads(1);
}

// One long line was cut into as many pieces as there were threads and their
// sums added in the line's dtype: the result changed with the thread count
// (PyTorch's does not). Mutation caught: dense_line's pieces from the thread
// count with per-piece float sums (65537 of f32 differed at 2 threads).
TEST(Softmax, ALongLineIsTheSameBitsOnAnyNumberOfThreads) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor t = random_tensor({2, 200003}, dtype, -40.0, 40.0);
    const Tensor row = t.narrow(0, 0, 1);
    set_num_threads(1);
    const Tensor one = softmax(row, 1), log_one = log_softmax(t, 1);
    for (int threads : {2, 3}) {
      set_num_threads(threads);
      EXPECT_TRUE(bitwise_equal(softmax(row, 1), one)) << dtype_name(dtype) << " on " << threads << " threads";
      EXPECT_TRUE(bitwise_equal(log_softmax(t, 1), log_one)) << dtype_name(dtype) << " on " << threads << " threads";
    }
  }
  set_num_threads(1);
}

TEST(Softmax, ExactHandValues) {
  Tensor t = from_vector<double>({0, std::log(3.0)});
  EXPECT_TRUE(all_close(softmax(t, 0), from_vector<double>({0.25, 0.75})));
  EXPECT_TRUE(all_close(log_softmax(t, 0), from_vector<double>({std::log(0.25), std::log(0.75)})));
  // Stable: huge logits do not overflow.
  EXPECT_TRUE(all_close(softmax(from_vector<float>({1000, 1000}), 0), from_vector<float>({0.5f, 0.5f})));
  Tensor columns = from_vector<float>({0, 0, 0, 0}, {2, 2});
  EXPECT_TRUE(all_close(softmax(columns, 0), full({2, 2}, 0.5)));
  EXPECT_EQ(softmax(scalar_tensor(3.0, {}), 0).item<float>(), 1.0f);
}

// -inf logits get exactly zero probability, along the last dim and along others.
TEST(Softmax, MinusInfinityGivesExactlyZero) {
  for (DType dtype : kFloatingDTypes) {
    Tensor row = from_vector<float>({-kInf, 0, 0, -kInf}).to(dtype);
    EXPECT_EQ(softmax(row, 0).to_vector<float>(), (std::vector<float>{0, 0.5f, 0.5f, 0})) << dtype_name(dtype);
    std::vector<float> logs = log_softmax(row, 0).to_vector<float>();
    EXPECT_EQ(logs[0], -kInf);
    EXPECT_NEAR(logs[1], std::log(0.5f), 1e-2);
    Tensor column = row.view({4, 1}).expand({4, 3}).contiguous();
    EXPECT_EQ(softmax(column, 0).select(1, 2).to_vector<float>(), (std::vector<float>{0, 0.5f, 0.5f, 0}));
  }
  Tensor long_row = full({100000}, -kInf);
  long_row.narrow(0, 500, 1).fill_(1.0);
  set_num_threads(2);
  std::vector<float> probabilities = softmax(long_row, 0).to_vector<float>();
  set_num_threads(1);
  EXPECT_EQ(probabilities[500], 1.0f);
  EXPECT_EQ(probabilities[499], 0.0f);
}

// As PyTorch: a line of all -inf has no maximum to subtract, so it is nan.
TEST(Softmax, AllMinusInfinityLineIsNanAndNanPropagates) {
  Tensor t = from_vector<float>({-kInf, -kInf, 1, 2}, {2, 2});
  for (const SoftmaxCase& op : kSoftmaxCases) {
    std::vector<float> rows = op.fn(t, 1).to_vector<float>();
    EXPECT_TRUE(std::isnan(rows[0]) && std::isnan(rows[1])) << op.name;
    EXPECT_FALSE(std::isnan(rows[2]) || std::isnan(rows[3])) << op.name;
    std::vector<float> columns = op.fn(t.t().contiguous(), 0).to_vector<float>();
    EXPECT_TRUE(std::isnan(columns[0]) && std::isnan(columns[2])) << op.name;
    EXPECT_FALSE(std::isnan(columns[1])) << op.name;
  }
  Tensor with_nan = from_vector<float>({1, std::nanf(""), 2});
  for (float v : softmax(with_nan, 0).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
}

// log_softmax subtracts the maximum before the log of the sum: with logits of
// large magnitude, m + log(s) rounds to m and x - (m + log(s)) loses the
// log-probabilities, which (x - m) - log(s) keeps. Equal logits give -log(n)
// along any dim (found by the op fuzzer, tests/fuzz/README_ops.md, with -1e30;
// 1e8 is enough in f32).
TEST(Softmax, LogSoftmaxOfLargeLogitsKeepsItsPrecision) {
  for (DType dtype : {DType::f32, DType::f64}) {
    for (double logit : {1e8, -1e30}) {
      Tensor x = full({4, 7}, logit, {.dtype = dtype});
      for (int64_t dim : {0, 1}) {
        const double expected = -std::log(double(x.size(dim)));
        for (double v : log_softmax(x, dim).to_vector<double>())
          EXPECT_NEAR(v, expected, 1e-6) << dtype_name(dtype) << " logit " << logit << " dim " << dim;
      }
    }
  }
}

TEST(Softmax, BadInputsNameTheOpAndValues) {
  EXPECT_EMBER_ERROR(softmax(ones({2}, {.dtype = DType::i64}), 0), "softmax: expected a floating point input, got int64");
  EXPECT_EMBER_ERROR(log_softmax(ones({2}, {.dtype = DType::boolean}), 0), "log_softmax: expected a floating point input, got bool");
  EXPECT_EMBER_ERROR(softmax(ones({2, 3}), 2), "softmax: dim 2 out of range");
  EXPECT_EMBER_ERROR(log_softmax(Tensor(), 0), "log_softmax: undefined");
}

}  // namespace
}  // namespace ember::testing
