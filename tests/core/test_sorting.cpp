// sort, argsort and topk: tiny exact hand cases (nan, infinities, ties),
// every dtype, layout and dim against a naive std::stable_sort written here
// and against the reference kernels, empty and 0-d tensors, rows long enough
// to run on several threads, and bad arguments.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// t's values along `dim` sorted by a plain std::stable_sort (nan above every
// number), first `count` of each slice: (values as f64, indices), each in t's
// shape with `dim` of size count, flattened in row-major order.
struct Naive {
  std::vector<double> values;
  std::vector<int64_t> indices;
};

Naive naive_sort(const Tensor& t, int dim, bool descending, int64_t count) {
  Tensor moved = t.to(DType::f64).transpose(dim, -1).contiguous();  // [..., length]
  const std::vector<double> x = moved.to_vector<double>();
  const int64_t length = moved.size(-1), rows = length == 0 ? 0 : moved.numel() / length;
  auto before = [descending](double a, double b) {
    if (std::isnan(a) || std::isnan(b)) return descending ? std::isnan(a) && !std::isnan(b) : std::isnan(b) && !std::isnan(a);
    return descending ? a > b : a < b;
  };
  Shape shape = moved.shape();
  shape[shape.ndim() - 1] = count;
  std::vector<double> values;
  std::vector<int64_t> indices;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> order(static_cast<size_t>(length));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return before(x[r * length + a], x[r * length + b]); });
    for (int64_t j = 0; j < count; ++j) {
      values.push_back(x[r * length + order[j]]);
      indices.push_back(order[j]);
    }
  }
  if (values.empty()) return {};
  // back to t's dim order
  Tensor v = from_vector(values, shape).transpose(dim, -1).contiguous();
  Tensor i = from_vector(indices, shape).transpose(dim, -1).contiguous();
  return {v.to_vector<double>(), i.to_vector<int64_t>()};
}

std::vector<double> doubles(const Tensor& t) { return t.to(DType::f64).contiguous().to_vector<double>(); }
std::vector<int64_t> longs(const Tensor& t) { return t.contiguous().to_vector<int64_t>(); }

// Values compared as f64 with nan equal to nan.
::testing::AssertionResult same_values(const std::vector<double>& actual, const std::vector<double>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "sizes " << actual.size() << " and " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i)
    if (!(actual[i] == expected[i] || (std::isnan(actual[i]) && std::isnan(expected[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": " << actual[i] << " vs " << expected[i];
  return ::testing::AssertionSuccess();
}

// A random tensor with many ties (a few distinct values), and nans for floats.
Tensor tied_tensor(const Shape& shape, DType dtype) {
  Tensor t = random_tensor(shape, DType::i64, -2, 2).to(DType::f64);
  if (is_floating(dtype) && t.numel() > 0) t = where(eq(t, 2), full_like(t, NAN), t);
  return t.to(dtype);
}

TEST(Sorting, HandCasesWithNanInfinitiesAndTies) {
  Tensor x = from_vector<float>({3, NAN, 1, -INFINITY, NAN, INFINITY, 1});
  ValuesIndices up = sort(x);
  EXPECT_TRUE(same_values(doubles(up.values), {-INFINITY, 1, 1, 3, INFINITY, NAN, NAN}));
  EXPECT_EQ(longs(up.indices), (std::vector<int64_t>{3, 2, 6, 0, 5, 1, 4}));
  ValuesIndices down = sort(x, 0, true);
  EXPECT_TRUE(same_values(doubles(down.values), {NAN, NAN, INFINITY, 3, 1, 1, -INFINITY}));
  EXPECT_EQ(longs(down.indices), (std::vector<int64_t>{1, 4, 5, 0, 2, 6, 3}));
  EXPECT_EQ(longs(argsort(x, -1, true)), longs(down.indices));
  ValuesIndices top = topk(x, 3);
  EXPECT_TRUE(same_values(doubles(top.values), {NAN, NAN, INFINITY}));
  EXPECT_EQ(longs(top.indices), (std::vector<int64_t>{1, 4, 5}));
  ValuesIndices bottom = topk(x, 3, 0, false);
  EXPECT_TRUE(same_values(doubles(bottom.values), {-INFINITY, 1, 1}));
  EXPECT_EQ(longs(bottom.indices), (std::vector<int64_t>{3, 2, 6}));
  // along dim 0 of a matrix; bools sort false before true
  Tensor m = from_vector<int32_t>({5, 1, 2, 2, 5, 0}, {3, 2});
  ValuesIndices columns = sort(m, 0);
  EXPECT_EQ(columns.values.to_vector<int32_t>(), (std::vector<int32_t>{2, 0, 5, 1, 5, 2}));
  EXPECT_EQ(longs(columns.indices), (std::vector<int64_t>{1, 2, 0, 0, 2, 1}));
  EXPECT_EQ(columns.values.dtype(), DType::i32);
  EXPECT_EQ(columns.indices.dtype(), DType::i64);
  EXPECT_EQ(longs(argsort(from_vector<bool>({true, false, true, false}))), (std::vector<int64_t>{1, 3, 0, 2}));
}

// Every dtype, every layout (contiguous, transposed storage, strided slice,
// expanded), every dim, both directions, with ties and nans: equal to the
// naive stable sort and to the reference kernels.
TEST(Sorting, MatchesNaiveStableSortForEveryDtypeLayoutAndDim) {
  const std::vector<Shape> shapes = {{7}, {4, 5}, {3, 1, 6}, {2, 3, 2, 4}, random_shape(3), random_shape(2, 9)};
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : shapes) {
      Tensor base = dtype == DType::boolean || is_floating(dtype) ? tied_tensor(shape, dtype)
                                                                  : random_tensor(shape, dtype, -50, 50);
      for (const Layout& layout : layouts_of(base)) {
        for (int dim = 0; dim < shape.ndim(); ++dim) {
          for (bool descending : {false, true}) {
            SCOPED_TRACE(fmt::format("{} {} {} dim {} descending {}", dtype, shape, layout.name, dim, descending));
            const Tensor& t = layout.tensor;
            ValuesIndices got = sort(t, dim, descending);
            ASSERT_EQ(got.values.shape(), t.shape());
            ASSERT_EQ(got.values.dtype(), dtype);
            Naive expected = naive_sort(t, dim, descending, t.size(dim));
            EXPECT_TRUE(same_values(doubles(got.values), expected.values));
            EXPECT_EQ(longs(got.indices), expected.indices);
            ValuesIndices oracle = reference([&] { return sort(t, dim, descending); });
            EXPECT_EQ(longs(got.indices), longs(oracle.indices));
            const int64_t k = t.size(dim) / 2;
            ValuesIndices top = topk(t, k, dim, descending);
            Naive expected_top = naive_sort(t, dim, descending, k);
            EXPECT_TRUE(same_values(doubles(top.values), expected_top.values));
            EXPECT_EQ(longs(top.indices), expected_top.indices);
          }
        }
      }
    }
  }
}

// Rows spread over threads (sort) and partial sorts of long rows (topk).
TEST(Sorting, LongRowsMatchTheReference) {
  Tensor t = tied_tensor({40, 1500}, DType::f32) + random_tensor({40, 1500}, DType::f32, 0, 1e-3);
  for (bool descending : {false, true}) {
    ValuesIndices got = sort(t, 1, descending), oracle = reference([&] { return sort(t, 1, descending); });
    EXPECT_EQ(longs(got.indices), longs(oracle.indices));
    EXPECT_TRUE(all_close(got.values, oracle.values));
    ValuesIndices top = topk(t.t(), 7, 0, descending), top_oracle = reference([&] { return topk(t.t(), 7, 0, descending); });
    EXPECT_EQ(longs(top.indices), longs(top_oracle.indices));
  }
}

TEST(Sorting, EmptyAndZeroDimensionalTensors) {
  for (const Shape& shape : {Shape{0}, Shape{0, 3}, Shape{3, 0}}) {
    Tensor t = zeros(shape);
    for (int dim = 0; dim < shape.ndim(); ++dim) {
      ValuesIndices s = sort(t, dim);
      EXPECT_EQ(s.values.shape(), shape);
      EXPECT_EQ(s.indices.shape(), shape);
      EXPECT_EQ(s.indices.dtype(), DType::i64);
    }
  }
  EXPECT_EQ(topk(zeros({3, 0}), 0).values.shape(), (Shape{3, 0}));
  EXPECT_EQ(topk(zeros({0, 4}), 2).values.shape(), (Shape{0, 2}));
  EXPECT_EQ(topk(arange(5.0), 0).values.shape(), (Shape{0}));
  ValuesIndices scalar = sort(scalar_tensor(2.5, {}));
  EXPECT_EQ(scalar.values.dim(), 0);
  EXPECT_EQ(scalar.values.item<float>(), 2.5f);
  EXPECT_EQ(scalar.indices.item<int64_t>(), 0);
  EXPECT_EQ(topk(scalar_tensor(2.5, {}), 1).indices.item<int64_t>(), 0);
}

TEST(Sorting, GradientFlowsBackThroughTheIndices) {
  Tensor x = from_vector<double>({3, 1, 2, 5, 4, 0}, {2, 3}).requires_grad_();
  Tensor weights = from_vector<double>({1, 10, 100}, {1, 3});
  sum(sort(x, 1).values * weights).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{100, 1, 10, 100, 10, 1}));
  Tensor y = from_vector<double>({3, 1, 2, 5}).requires_grad_();
  sum(topk(y, 2).values * from_vector<double>({1, 10})).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{10, 0, 0, 1}));
  EXPECT_FALSE(argsort(y).requires_grad());
}

TEST(Sorting, BadArgumentsAreErrors) {
  Tensor t = zeros({3, 4});
  EXPECT_EMBER_ERROR(sort(t, 2), "sort");
  EXPECT_EMBER_ERROR(argsort(t, -3), "dim -3 out of range");
  EXPECT_EMBER_ERROR(topk(t, 5), "topk: k=5 is out of range for dimension 1 of size 4");
  EXPECT_EMBER_ERROR(topk(t, -1, 0), "topk: k=-1");
  EXPECT_EMBER_ERROR(topk(scalar_tensor(1.0, {}), 2), "topk: k=2");
  EXPECT_EMBER_ERROR(sort(Tensor()), "sort: undefined tensor");
}

}  // namespace
}  // namespace ember::testing
