// flip, roll and repeat_interleave (core/ops/reorder.h): hand cases, each op
// against a naive host loop over coordinates for every dtype, memory layout
// and dim (negative ones too), empty and 0-d inputs, results that never
// alias their input, and bad arguments.
#include <functional>
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// out[c] = t[source(c)] for every coordinate c of `shape`, on the host.
Tensor remap(const Tensor& t, const Shape& shape, const std::function<void(Shape&)>& source) {
  std::vector<double> values = t.to(DType::f64).to_vector<double>(), out;
  Shape strides = Shape::filled(t.dim(), 1);
  for (int d = t.dim() - 2; d >= 0; --d) strides[d] = strides[d + 1] * t.shape()[d + 1];
  Shape coordinate = Shape::filled(shape.ndim(), 0);
  for (int64_t flat = 0; flat < shape.numel(); ++flat) {
    int64_t rest = flat;
    for (int d = shape.ndim() - 1; d >= 0; --d) {
      coordinate[d] = rest % shape[d];
      rest /= shape[d];
    }
    Shape from = coordinate;
    source(from);
    int64_t offset = 0;
    for (int d = 0; d < t.dim(); ++d) offset += from[d] * strides[d];
    out.push_back(values[size_t(offset)]);
  }
  return from_vector<double>(out, shape).to(t.dtype());
}

int64_t wrapped(int64_t dim, int ndim) { return dim < 0 ? dim + ndim : dim; }

TEST(Reorder, HandCases) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(flip(a, {1}).to_vector<float>(), (std::vector<float>{3, 2, 1, 6, 5, 4}));
  EXPECT_EQ(flip(a, {0, -1}).to_vector<float>(), (std::vector<float>{6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(flip(a, {}).to_vector<float>(), a.to_vector<float>());
  EXPECT_EQ(roll(a, 1, 1).to_vector<float>(), (std::vector<float>{3, 1, 2, 6, 4, 5}));
  EXPECT_EQ(roll(a, -1, 1).to_vector<float>(), (std::vector<float>{2, 3, 1, 5, 6, 4}));
  EXPECT_EQ(roll(a, 2).to_vector<float>(), (std::vector<float>{5, 6, 1, 2, 3, 4}));  // flattened
  EXPECT_EQ(roll(a, {1, 1}, {0, 1}).to_vector<float>(), (std::vector<float>{6, 4, 5, 3, 1, 2}));
  EXPECT_EQ(roll(a, {1, 1}, {1, 1}).to_vector<float>(), roll(a, 2, 1).to_vector<float>());  // shifts of one dim add up
  EXPECT_EQ(roll(a, 7, 1).to_vector<float>(), roll(a, 1, 1).to_vector<float>());
  EXPECT_EQ(repeat_interleave(a, 2, 0).to_vector<float>(),
            (std::vector<float>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  EXPECT_EQ(repeat_interleave(a, 2).to_vector<float>(),
            (std::vector<float>{1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6}));
  Tensor counts = from_vector<int64_t>({0, 2, 1});
  EXPECT_EQ(repeat_interleave(a, counts, 1).to_vector<float>(), (std::vector<float>{2, 2, 3, 5, 5, 6}));
  EXPECT_EQ(repeat_interleave(a, counts, -1).shape(), (Shape{2, 3}));
  EXPECT_EQ(repeat_interleave(counts).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(repeat_interleave(a, from_vector<int32_t>({3}), 0).shape(), (Shape{6, 3}));
  EXPECT_EQ(repeat_interleave(a, 0, 1).shape(), (Shape{2, 0}));
}

TEST(Reorder, FlipAndRollMatchANaiveLoopForEveryDtypeLayoutAndDim) {
  for (DType dtype : kAllDTypes) {
    for (int trial = 0; trial < 10; ++trial) {
      int ndim = trial % 4 + 1;
      Shape shape = random_shape(ndim, 6);
      Tensor base = random_tensor(shape, dtype, -100, 100);
      for (const Layout& layout : layouts_of(base)) {
        for (int64_t dim = -ndim; dim < ndim; ++dim) {
          SCOPED_TRACE(fmt::format("{} {} {} dim {}", dtype, shape, layout.name, dim));
          int64_t d = wrapped(dim, ndim);
          EXPECT_TRUE(all_close(flip(layout.tensor, {dim}), remap(base, shape, [&](Shape& c) {
                                  c[int(d)] = shape[int(d)] - 1 - c[int(d)];
                                })));
          for (int64_t shift : {-7, -1, 0, 2, 5}) {
            EXPECT_TRUE(all_close(roll(layout.tensor, shift, dim), remap(base, shape, [&](Shape& c) {
                                    int64_t n = shape[int(d)];
                                    c[int(d)] = ((c[int(d)] - shift) % n + n) % n;
                                  })));
          }
        }
        // every dim at once, and the flattened roll
        Dims all;
        for (int64_t dim = 0; dim < ndim; ++dim) all.push_back(dim);
        EXPECT_TRUE(all_close(flip(layout.tensor, all), remap(base, shape, [&](Shape& c) {
                                for (int k = 0; k < ndim; ++k) c[k] = shape[k] - 1 - c[k];
                              })));
        std::vector<int64_t> shifts(size_t(ndim), 3), dims(all.begin(), all.end());
        EXPECT_TRUE(all_close(roll(layout.tensor, shifts, dims), remap(base, shape, [&](Shape& c) {
                                for (int k = 0; k < ndim; ++k) c[k] = ((c[k] - 3) % shape[k] + shape[k]) % shape[k];
                              })));
        Tensor flat = base.reshape({-1});
        EXPECT_TRUE(all_close(roll(layout.tensor, -4), roll(flat, -4, 0).reshape(shape)));
      }
    }
  }
}

// Long reversed runs: the CPU copy kernel's vectorised reversed loop, its tail, every element size.
TEST(Reorder, FlipOfLongRunsMatchesANaiveLoop) {
  for (DType dtype : kAllDTypes) {
    for (int64_t length : {7, 64, 1001}) {
      Tensor base = random_tensor({3, length}, dtype, -100, 100);
      SCOPED_TRACE(fmt::format("{} length {}", dtype, length));
      EXPECT_TRUE(all_close(flip(base, {1}), remap(base, base.shape(), [&](Shape& c) { c[1] = length - 1 - c[1]; })));
      EXPECT_TRUE(all_close(flip(base.narrow(1, 1, length - 1), {-1}),
                            remap(base, {3, length - 1}, [&](Shape& c) { c[1] = length - 1 - c[1]; })));
    }
  }
}

// Counts whose index does not fit in memory are ember::Errors naming the op:
// the index was a std::vector, whose bad_alloc and length_error escaped.
// Mutation caught: the index built in a std::vector again -> std::bad_alloc.
TEST(Reorder, RepeatInterleaveOfHugeCountsIsAnError) {
  EXPECT_EMBER_ERROR(repeat_interleave(from_vector<int64_t>({int64_t(1) << 62})), "repeat_interleave:");
  EXPECT_THROW(repeat_interleave(from_vector<int64_t>({int64_t(1) << 44})), Error);
}

TEST(Reorder, RepeatInterleaveMatchesANaiveLoopForEveryDtypeLayoutAndDim) {
  for (DType dtype : kAllDTypes) {
    for (int trial = 0; trial < 8; ++trial) {
      int ndim = trial % 3 + 1;
      Shape shape = random_shape(ndim, 5);
      Tensor base = random_tensor(shape, dtype, -100, 100);
      for (const Layout& layout : layouts_of(base)) {
        for (int64_t dim = -ndim; dim < ndim; ++dim) {
          SCOPED_TRACE(fmt::format("{} {} {} dim {}", dtype, shape, layout.name, dim));
          int d = int(wrapped(dim, ndim));
          Shape repeated = shape;
          repeated[d] *= 3;
          EXPECT_TRUE(all_close(repeat_interleave(layout.tensor, 3, dim),
                                remap(base, repeated, [&](Shape& c) { c[d] /= 3; })));
          // Slice i repeated (i % 3) times.
          std::vector<int64_t> counts, source;
          for (int64_t i = 0; i < shape[d]; ++i) {
            counts.push_back(i % 3);
            source.insert(source.end(), size_t(i % 3), i);
          }
          Shape selected = shape;
          selected[d] = int64_t(source.size());
          Tensor repeats = from_vector<int64_t>(counts, {int64_t(counts.size())});
          EXPECT_TRUE(all_close(repeat_interleave(layout.tensor, repeats, dim),
                                remap(base, selected, [&](Shape& c) { c[d] = source[size_t(c[d])]; })));
        }
        Tensor flat = base.reshape({-1});
        EXPECT_TRUE(all_close(repeat_interleave(layout.tensor, 2), repeat_interleave(flat, 2, 0)));
      }
    }
  }
}

// Shifts at the int64 limits wrap like any other (no overflow adding them up).
TEST(Reorder, RollTakesShiftsUpToTheInt64Limits) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  Tensor a = arange(0, 7, 1, {.dtype = DType::f32});
  auto wrapped_by = [](int64_t shift) { return ((shift % 7) + 7) % 7; };
  EXPECT_EQ(roll(a, {kMax, kMax}, {0, 0}).to_vector<float>(), roll(a, 2 * wrapped_by(kMax), 0).to_vector<float>());
  EXPECT_EQ(roll(a, kMin, 0).to_vector<float>(), roll(a, wrapped_by(kMin), 0).to_vector<float>());
  EXPECT_EQ(roll(a, kMin).to_vector<float>(), roll(a, wrapped_by(kMin)).to_vector<float>());
  Tensor x = arange(0, 7, 1, {.dtype = DType::f64});
  x.requires_grad_(true);
  Tensor weights = arange(0, 7, 1, {.dtype = DType::f64});
  Tensor g = autograd::grad({sum(roll(x, kMin) * weights)}, {x})[0];
  EXPECT_EQ(g.to_vector<double>(), roll(weights, -wrapped_by(kMin)).to_vector<double>());
  EXPECT_EMBER_ERROR(repeat_interleave(zeros({4}), kMax, 0), "repeat_interleave: 9223372036854775807 repeats of dim 0 of size 4 overflow 64 bits");
  EXPECT_EMBER_ERROR(repeat_interleave(from_vector<int64_t>({kMax, 1})), "sum past 64 bits");
}

TEST(Reorder, ResultsAreFreshTensors) {
  Tensor a = arange(0, 6, 1, {.dtype = DType::f32}).reshape({2, 3});
  for (Tensor out : {flip(a, {0}), roll(a, 0, 1), repeat_interleave(a, 1, 0), flip(a, {})}) {
    EXPECT_NE(out.storage(), a.storage());
    EXPECT_TRUE(out.is_contiguous());
    for (int64_t s : out.strides()) EXPECT_GE(s, 0);
  }
}

TEST(Reorder, EmptyAndZeroDimInputs) {
  Tensor empty = zeros({0, 3});
  EXPECT_EQ(flip(empty, {0, 1}).shape(), (Shape{0, 3}));
  EXPECT_EQ(roll(empty, 2, 1).shape(), (Shape{0, 3}));
  EXPECT_EQ(roll(empty, 2).shape(), (Shape{0, 3}));
  EXPECT_EQ(repeat_interleave(empty, 2, 1).shape(), (Shape{0, 6}));
  EXPECT_EQ(repeat_interleave(empty, from_vector<int64_t>({}, {0}), 0).shape(), (Shape{0, 3}));
  Tensor scalar = full({}, 2.5);
  EXPECT_EQ(flip(scalar, {0}).item<float>(), 2.5f);
  EXPECT_EQ(roll(scalar, 3, 0).item<float>(), 2.5f);
  EXPECT_EQ(roll(scalar, 3).item<float>(), 2.5f);
  EXPECT_EQ(repeat_interleave(scalar, 2).to_vector<float>(), (std::vector<float>{2.5f, 2.5f}));
  EXPECT_EQ(repeat_interleave(scalar, 2, 0).shape(), (Shape{2}));
}

TEST(Reorder, BadArgumentsRaiseErrorsNamingTheOpAndValues) {
  Tensor a = zeros({2, 3});
  EXPECT_EMBER_ERROR(flip(a, {2}), "flip: dim 2 out of range");
  EXPECT_EMBER_ERROR(flip(a, {1, -1}), "flip: dim 1 appears more than once");
  EXPECT_EMBER_ERROR(roll(a, {1, 2}, {0}), "roll: shifts and dims must have the same length, got 2 shifts [1, 2] and 1 dims [0]");
  EXPECT_EMBER_ERROR(roll(a, {1, 2}), "roll: without dims the input is flattened and takes one shift, got 2 shifts");
  EXPECT_EMBER_ERROR(roll(a, 1, -3), "roll: dim -3 out of range");
  EXPECT_EMBER_ERROR(repeat_interleave(a, -1, 0), "repeat_interleave: repeats must be non-negative, got -1");
  EXPECT_EMBER_ERROR(repeat_interleave(a, from_vector<int64_t>({1, 2}), 1),
                     "repeat_interleave: repeats must have one value per slice along dim 1 (3 for input of shape [2, 3]), got shape [2]");
  EXPECT_EMBER_ERROR(repeat_interleave(a, from_vector<int64_t>({1, -2}), 0),
                     "repeat_interleave: repeats must be non-negative, got -2 at position 1");
  EXPECT_EMBER_ERROR(repeat_interleave(a, from_vector<float>({1, 2}), 0),
                     "repeat_interleave: repeats must have dtype int32 or int64, got float32");
  EXPECT_EMBER_ERROR(repeat_interleave(a, zeros({2, 1}, {.dtype = DType::i64}), 0),
                     "repeat_interleave: repeats must be 0-d or 1-d, got shape [2, 1]");
  EXPECT_EMBER_ERROR(repeat_interleave(a, 2, 2), "repeat_interleave: dim 2 out of range");
}

}  // namespace
}  // namespace ember::testing
