// Reductions against the reference kernels: every op and dtype, every subset of
// dims of small shapes (0-size, 0-d, size-1 dims), keepdim both ways, every
// memory layout; large inputs on two threads (each CPU loop shape); f32 accuracy
// against f64; exact hand values; nan handling; error messages.
#include <bit>
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace ember::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using ReduceFn = Tensor (*)(const Tensor&, const Dims&, bool);

struct ReduceCase {
  const char* name;
  ReduceFn fn;
  bool floating_only;  // an error for bool and integer inputs
  bool has_identity;   // false: reducing a size-0 dim is an error
  double lo = -2.0, hi = 2.0;
};

const ReduceCase kReduceCases[] = {
    {"sum", [](const Tensor& t, const Dims& d, bool k) { return sum(t, d, k); }, false, true},
    {"mean", [](const Tensor& t, const Dims& d, bool k) { return mean(t, d, k); }, true, true},
    {"prod", [](const Tensor& t, const Dims& d, bool k) { return prod(t, d, k); }, false, true, 0.5, 1.5},
    {"amax", [](const Tensor& t, const Dims& d, bool k) { return amax(t, d, k); }, false, false},
    {"amin", [](const Tensor& t, const Dims& d, bool k) { return amin(t, d, k); }, false, false},
    {"var", [](const Tensor& t, const Dims& d, bool k) { return var(t, d, true, k); }, true, true},
    {"var biased", [](const Tensor& t, const Dims& d, bool k) { return var(t, d, false, k); }, true, true},
    {"std", [](const Tensor& t, const Dims& d, bool k) { return ember::std(t, d, true, k); }, true, true},
    {"logsumexp", [](const Tensor& t, const Dims& d, bool k) { return logsumexp(t, d, k); }, true, true},
    {"norm 2", [](const Tensor& t, const Dims& d, bool k) { return norm(t, 2, d, k); }, true, true},
    {"norm 1", [](const Tensor& t, const Dims& d, bool k) { return norm(t, 1, d, k); }, true, true},
    {"norm 3", [](const Tensor& t, const Dims& d, bool k) { return norm(t, 3, d, k); }, true, true},
    {"norm 0.5", [](const Tensor& t, const Dims& d, bool k) { return norm(t, 0.5, d, k); }, true, true},
    {"norm 0", [](const Tensor& t, const Dims& d, bool k) { return norm(t, 0, d, k); }, true, true, -1.0, 1.0},
    {"norm inf", [](const Tensor& t, const Dims& d, bool k) { return norm(t, kInf, d, k); }, true, false},
    {"norm -inf", [](const Tensor& t, const Dims& d, bool k) { return norm(t, -kInf, d, k); }, true, false},
};

// Every subset of the dims of a rank-`ndim` tensor, with negative spellings mixed in.
std::vector<Dims> dim_subsets(int ndim) {
  std::vector<Dims> subsets;
  for (int mask = 0; mask < (1 << ndim); ++mask) {
    Dims dims;
    for (int d = 0; d < ndim; ++d)
      if (mask & (1 << d)) dims.push_back(mask % 3 == 0 ? d - ndim : d);
    subsets.push_back(dims);
  }
  if (ndim == 0) subsets.push_back({0});
  return subsets;
}

bool reduces_empty_dim(const Tensor& t, const Dims& dims) {
  for (int d = 0; d < t.dim(); ++d) {
    bool reduced = dims.empty();
    for (int64_t dim : dims) reduced = reduced || (dim + t.dim()) % t.dim() == d;
    if (reduced && t.shape()[d] == 0) return true;
  }
  return false;
}

// `atol` < 0 takes the dtype's default; long float sums that cancel need more.
void expect_matches_reference(const ReduceCase& op, const Tensor& t, bool all_layouts, double atol = -1) {
  for (const Dims& dims : dim_subsets(t.dim())) {
    for (bool keepdim : {false, true}) {
      std::string where = std::string(op.name) + " " + std::string(dtype_name(t.dtype())) + " " + t.shape().str() +
                          " dims " + dims.str() + (keepdim ? " keepdim" : "");
      if (!op.has_identity && reduces_empty_dim(t, dims)) {
        EXPECT_EMBER_ERROR(op.fn(t, dims, keepdim), "size 0");
        continue;
      }
      Tensor expected = reference([&] { return op.fn(t, dims, keepdim); });
      for (const Layout& layout : layouts_of(t)) {
        if (!all_layouts && layout.name != "contiguous" && layout.name != "transposed") continue;
        EXPECT_TRUE(all_close(op.fn(layout.tensor, dims, keepdim), expected, -1, atol)) << where << " (" << layout.name << ")";
      }
    }
  }
}

std::vector<Shape> small_shapes() {
  std::vector<Shape> shapes = {{}, {5}, {0}, {1}, {3, 0}, {1, 1}, {4, 1, 3}, {7, 33}, {2, 3, 4}, {0, 2, 3}};
  for (int i = 0; i < 4; ++i) shapes.push_back(random_shape(3));
  return shapes;
}

TEST(Reduction, MatchesReferenceForEveryDtypeShapeDimsAndLayout) {
  for (const ReduceCase& op : kReduceCases) {
    for (DType dtype : kAllDTypes) {
      if (op.floating_only && !is_floating(dtype)) continue;
      for (const Shape& shape : small_shapes())
        expect_matches_reference(op, random_tensor(shape, dtype, op.lo, op.hi), /*all_layouts=*/true);
    }
  }
}

// Large enough for two threads, shaped to reach each CPU loop: dense rows,
// columns, strided runs, and one output split across threads.
TEST(Reduction, LargeInputsOnTwoThreadsMatchReference) {
  set_num_threads(2);
  for (const ReduceCase& op : kReduceCases) {
    for (DType dtype : {DType::f32, DType::bf16, DType::i32}) {
      if (op.floating_only && !is_floating(dtype)) continue;
      for (const Shape& shape : {Shape{70001}, Shape{96, 700}, Shape{700, 96}, Shape{40, 50, 60}}) {
        Tensor t = random_tensor(shape, dtype, op.lo, op.hi);
        // Thousands of float terms in [-2, 2]: rounding error is relative to sum(|x|), not to the result.
        expect_matches_reference(op, t, /*all_layouts=*/false, dtype == DType::f32 ? 1e-4 : -1);
      }
    }
  }
  set_num_threads(1);
}

// f16 reductions accumulate in f32 in the same order as f32 ones (the dense
// and column loops widen f16 blocks first): each result is the f32 result on
// the widened input, rounded to f16, exactly (a nan as any nan), on dense
// rows, columns and strided runs, with nans and infinities in some rows.
// Mutations run once: the dense loop widening one element short of its block
// failed here, as did the column loop widening its first row for every row.
// Fewer outputs than threads split each output's range in as many pieces as
// threads: sum(x, 1) of [5, 300001] changed with the count (PyTorch's does
// not). The pieces now follow the serial fold's own tree, so every count
// gives the serial bits, sums of everything included. Mutation caught:
// split_reduced cutting the range by the thread count again. (Two outputs
// and at most 3 threads: LeakSanitizer reports libomp's own allocations
// once a process has run more threads than that.)
TEST(Reduction, FewOutputsAreTheSameBitsOnAnyNumberOfThreads) {
  const Tensor t = random_tensor({2, 300001}, DType::f32, -2.0, 2.0);
  const Tensor spread = random_tensor({300, 2, 1001}, DType::f32, -2.0, 2.0).permute({1, 0, 2});
  auto results = [&] {
    return std::vector<Tensor>{sum(t, {1}), mean(t, {1}), var(t, {1}), logsumexp(t, {1}), sum(t), norm(t, 2.0, {1}),
                               sum(spread, {1, 2}), amax(t, {1})};
  };
  set_num_threads(1);
  const std::vector<Tensor> serial = results();
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    const std::vector<Tensor> parallel = results();
    for (size_t i = 0; i < serial.size(); ++i)
      EXPECT_TRUE(bitwise_equal(parallel[i], serial[i])) << "result " << i << " on " << threads << " threads";
  }
  set_num_threads(1);
}

TEST(Reduction, HalfResultsAreTheF32ResultsRounded) {
  auto same = [](const Tensor& got, const Tensor& want, const std::string& what) {
    const std::vector<float> g = got.to(DType::f32).to_vector<float>(), w = want.to(DType::f32).to_vector<float>();
    ASSERT_EQ(g.size(), w.size()) << what;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(w[i])) ASSERT_TRUE(std::isnan(g[i])) << what << " at " << i;
      else ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(w[i])) << what << " at " << i << ": " << g[i] << " vs " << w[i];
    }
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Shape& shape : {Shape{70001}, Shape{96, 700}, Shape{700, 96}, Shape{40, 50, 60}}) {
      Tensor half = random_tensor(shape, DType::f16, -4.0, 4.0);
      if (shape.ndim() == 2) {  // non-finite values in a few rows and columns
        half.select(0, 3).select(0, 5).fill_(std::numeric_limits<float>::quiet_NaN());
        half.select(0, 7).select(0, 2).fill_(std::numeric_limits<float>::infinity());
      }
      const Tensor wide = half.to(DType::f32);
      const std::string where = shape.str() + " on " + std::to_string(threads) + " thread(s)";
      for (int64_t dim = 0; dim < half.dim(); ++dim) {
        const std::string along = where + " dim " + std::to_string(dim);
        same(sum(half, {dim}), sum(wide, {dim}).to(DType::f16), "sum " + along);
        same(mean(half, {dim}), mean(wide, {dim}).to(DType::f16), "mean " + along);
        same(amax(half, {dim}), amax(wide, {dim}).to(DType::f16), "amax " + along);
        EXPECT_EQ(argmin(half, dim).to_vector<int64_t>(), argmin(wide, dim).to_vector<int64_t>()) << "argmin " << along;
      }
      same(sum(half), sum(wide).to(DType::f16), "sum " + where);
      same(sum(half.transpose(0, -1), {0}), sum(wide.transpose(0, -1), {0}).to(DType::f16), "strided sum " + where);
    }
  }
  set_num_threads(1);
}

// Pairwise / multi-lane float accumulation keeps 1M-element f32 sums within
// ~1e-5 of the f64 sum, along the last dim, the first dim and over everything.
TEST(Reduction, FloatSumsOfAMillionElementsMatchDouble) {
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    Tensor flat = random_tensor({1 << 20}, DType::f32, 0.0, 1.0);
    EXPECT_TRUE(all_close(sum(flat), sum(flat.to(DType::f64)).to(DType::f32), 1e-6, 0));
    for (const Shape& shape : {Shape{1024, 1024}, Shape{2, 1 << 19}, Shape{1 << 19, 2}}) {
      Tensor t = flat.view(shape);
      for (int64_t dim : {0, 1}) {
        Tensor expected = sum(t.to(DType::f64), {dim}).to(DType::f32);
        EXPECT_TRUE(all_close(sum(t, {dim}), expected, 1e-5, 0)) << shape.str() << " dim " << dim;
        EXPECT_TRUE(all_close(mean(t, {dim}), mean(t.to(DType::f64), {dim}).to(DType::f32), 1e-5, 0));
      }
    }
  }
  set_num_threads(1);
}

TEST(Reduction, ExactHandValues) {
  Tensor t = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(t, {0}).to_vector<float>(), (std::vector<float>{5, 7, 9}));
  EXPECT_EQ(sum(t, {-1}).to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(sum(t).item<float>(), 21);
  EXPECT_EQ(sum(t, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(sum(t, {}, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(sum(t.t(), {0}).to_vector<float>(), (std::vector<float>{6, 15}));
  EXPECT_EQ(mean(t).item<float>(), 3.5f);
  EXPECT_EQ(prod(t, {1}).to_vector<float>(), (std::vector<float>{6, 120}));
  EXPECT_EQ(amax(t, {0}).to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(amin(t, {1}).to_vector<float>(), (std::vector<float>{1, 4}));
  EXPECT_EQ(max(t).item<float>(), 6);
  EXPECT_EQ(min(t).item<float>(), 1);

  Tensor quarter = from_vector<double>({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(var(quarter).item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(var(quarter, {}, false).item<double>(), 1.25);
  EXPECT_DOUBLE_EQ(ember::std(quarter, {}, false).item<double>(), std::sqrt(1.25));
  EXPECT_DOUBLE_EQ(logsumexp(from_vector<double>({0, 0}), {0}).item<double>(), std::log(2.0));

  Tensor v = from_vector<float>({3, -4, 0});
  EXPECT_EQ(norm(v).item<float>(), 5);
  EXPECT_EQ(norm(v, 1).item<float>(), 7);
  EXPECT_EQ(norm(v, kInf).item<float>(), 4);
  EXPECT_EQ(norm(v, -kInf).item<float>(), 0);
  EXPECT_EQ(norm(v, 0).item<float>(), 2);
  EXPECT_NEAR(norm(v, 3).item<float>(), std::cbrt(91.0), 1e-5);
}

// any and all against a naive loop over rows, for every dtype, random shapes
// (empty dims included), each dim with and without keepdim, a transposed
// input, and NaN counted as nonzero; equal as torch.equal.
TEST(Reduction, AnyAndAllMatchANaiveLoop) {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    for (int trial = 0; trial < 6; ++trial) {
      const Shape shape = random_shape(3, 4);
      // About half the elements zero, so that both answers occur.
      Tensor t = (random_tensor(shape, DType::f64, -1.0, 1.0) * gt(random_tensor(shape, DType::f64, 0, 1), 0.5))
                     .to(dtype)
                     .transpose(0, 2);
      for (int64_t dim = 0; dim < 3; ++dim) {
        for (bool keepdim : {false, true}) {
          SCOPED_TRACE(fmt::format("{} {} dim {} keepdim {}", dtype_name(dtype), t.shape(), dim, keepdim));
          // The reduced dim moved last: a naive loop over its rows.
          Tensor moved = t.to(DType::f64).transpose(dim, 2).contiguous();
          const std::vector<double> values = moved.reshape({-1}).to_vector<double>();
          const int64_t length = moved.size(2), rows = moved.size(0) * moved.size(1);
          std::vector<bool> any_expected, all_expected;
          for (int64_t row = 0; row < rows; ++row) {
            bool some = false, every = true;
            for (int64_t i = 0; i < length; ++i) {
              const bool nonzero = values[size_t(row * length + i)] != 0.0;
              some = some || nonzero;
              every = every && nonzero;
            }
            any_expected.push_back(some);
            all_expected.push_back(every);
          }
          auto rows_of = [&](const Tensor& out) {
            EXPECT_EQ(out.dtype(), DType::boolean);
            EXPECT_EQ(out.dim(), keepdim ? 3 : 2);
            Tensor kept = keepdim ? out : out.unsqueeze(dim);
            std::vector<bool> got;
            for (double v : kept.transpose(dim, 2).to(DType::f64).contiguous().reshape({-1}).to_vector<double>())
              got.push_back(v != 0);
            return got;
          };
          const std::vector<bool> any_got = rows_of(any(t, {dim}, keepdim)), all_got = rows_of(all(t, {dim}, keepdim));
          EXPECT_EQ(any_got, any_expected);
          EXPECT_EQ(all_got, all_expected);
        }
      }
    }
  }
  Tensor with_nan = from_vector<float>({0.0f, std::nanf("")});
  EXPECT_TRUE(any(with_nan).item<bool>());
  EXPECT_FALSE(all(with_nan).item<bool>());
  EXPECT_TRUE(all(with_nan.narrow(0, 1, 1)).item<bool>());
  EXPECT_FALSE(any(zeros({0})).item<bool>());
  EXPECT_TRUE(all(zeros({0})).item<bool>());
  EXPECT_EMBER_ERROR(any(zeros({2, 3}), {2}), "any:");
  EXPECT_TRUE(equal(from_vector<int64_t>({1, 2}), from_vector<float>({1, 2})));
  EXPECT_FALSE(equal(ones({2}), ones({3})));
  EXPECT_FALSE(equal(with_nan, with_nan));
}

TEST(Reduction, DtypesFollowPyTorch) {
  Tensor flags = from_vector<bool>({true, false, true});
  EXPECT_EQ(sum(flags).dtype(), DType::i64);
  EXPECT_EQ(sum(flags).item<int64_t>(), 2);
  EXPECT_EQ(prod(ones({3}, {.dtype = DType::i32})).dtype(), DType::i64);
  EXPECT_EQ(sum(ones({3}, {.dtype = DType::bf16})).dtype(), DType::bf16);
  EXPECT_EQ(amax(flags).dtype(), DType::boolean);
  EXPECT_EQ(amax(flags).item<bool>(), true);
  EXPECT_EQ(amin(flags).item<bool>(), false);
  EXPECT_EQ(amax(ones({3}, {.dtype = DType::i32})).dtype(), DType::i32);
  EXPECT_EQ(argmax(flags).dtype(), DType::i64);
  EXPECT_EQ(max(ones({2, 3}, {.dtype = DType::f16}), 1).values.dtype(), DType::f16);
  EXPECT_EQ(max(ones({2, 3}, {.dtype = DType::f16}), 1).indices.dtype(), DType::i64);
  Tensor big = full({2}, int64_t(1) << 62, {.dtype = DType::i64});
  EXPECT_EQ(sum(big).item<int64_t>(), std::numeric_limits<int64_t>::min());  // wraps, as PyTorch
}

TEST(Reduction, MaxMinAlongDimMatchReferenceWithFirstIndices) {
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{}, Shape{5}, Shape{4, 1, 3}, Shape{7, 33}, Shape{3, 0, 2}, random_shape(3)}) {
      // Few distinct values, so ties are common and first-index order is tested.
      Tensor t = random_tensor(shape, dtype == DType::boolean ? dtype : DType::i32, -2, 2).to(dtype);
      for (int64_t dim = -std::max(t.dim(), 1); dim < std::max(t.dim(), 1); ++dim) {
        for (bool keepdim : {false, true}) {
          if (t.dim() > 0 && t.shape()[int(dim < 0 ? dim + t.dim() : dim)] == 0) {
            EXPECT_EMBER_ERROR(max(t, dim, keepdim), "max: cannot reduce over dim");
            EXPECT_EMBER_ERROR(argmin(t, dim, keepdim), "argmin: cannot reduce over dim");
            continue;
          }
          ValuesIndices expected_max = reference([&] { return max(t, dim, keepdim); });
          ValuesIndices expected_min = reference([&] { return min(t, dim, keepdim); });
          for (const Layout& layout : layouts_of(t)) {
            ValuesIndices got_max = max(layout.tensor, dim, keepdim), got_min = min(layout.tensor, dim, keepdim);
            EXPECT_TRUE(all_close(got_max.values, expected_max.values)) << shape.str() << " " << layout.name;
            EXPECT_TRUE(all_close(got_max.indices, expected_max.indices)) << shape.str() << " " << layout.name;
            EXPECT_TRUE(all_close(got_min.values, expected_min.values)) << shape.str() << " " << layout.name;
            EXPECT_TRUE(all_close(got_min.indices, expected_min.indices)) << shape.str() << " " << layout.name;
            EXPECT_TRUE(all_close(argmax(layout.tensor, dim, keepdim), expected_max.indices));
            EXPECT_TRUE(all_close(argmin(layout.tensor, dim, keepdim), expected_min.indices));
          }
        }
      }
      if (t.numel() > 0) {
        Tensor flat_expected = reference([&] { return argmax(t); });
        for (const Layout& layout : layouts_of(t)) EXPECT_TRUE(all_close(argmax(layout.tensor), flat_expected));
      }
    }
  }
}

TEST(Reduction, IndicesAreLogicalPositionsOnTwoThreads) {
  set_num_threads(2);
  Tensor t = random_tensor({300, 400}, DType::i32, 0, 3);  // many ties
  for (const Layout& layout : layouts_of(t)) {
    EXPECT_TRUE(all_close(argmax(layout.tensor), reference([&] { return argmax(t); }))) << layout.name;
    EXPECT_TRUE(all_close(argmin(layout.tensor, 0), reference([&] { return argmin(t, 0); }))) << layout.name;
    EXPECT_TRUE(all_close(argmax(layout.tensor, 1), reference([&] { return argmax(t, 1); }))) << layout.name;
  }
  Tensor hand = from_vector<float>({1, 9, 9, 0}, {2, 2});
  EXPECT_EQ(argmax(hand).item<int64_t>(), 1);
  EXPECT_EQ(argmax(hand.t()).item<int64_t>(), 1);  // logical order [[1, 9], [9, 0]] -> flat 1
  EXPECT_EQ(argmax(hand, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmax(hand, 1, true).shape(), (Shape{2, 1}));
  set_num_threads(1);
}

TEST(Reduction, NanPropagatesLikePyTorch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor t = from_vector<float>({1, nan, 3, nan, 7, 2}, {2, 3});
  EXPECT_TRUE(std::isnan(amax(t).item<float>()));
  EXPECT_TRUE(std::isnan(amin(t).item<float>()));
  EXPECT_TRUE(std::isnan(sum(t).item<float>()));
  ValuesIndices row_max = max(t, 1);
  EXPECT_TRUE(std::isnan(row_max.values.to_vector<float>()[0]));
  EXPECT_EQ(row_max.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmin(t).item<int64_t>(), 1);
  EXPECT_EQ(argmax(t, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_TRUE(std::isnan(logsumexp(t, {1}).to_vector<float>()[0]));
}

TEST(Reduction, InfinitiesInLogSumExpAndNorm) {
  Tensor t = from_vector<double>({-kInf, -kInf, kInf, 1, kInf, kInf}, {3, 2});
  EXPECT_EQ(logsumexp(t, {1}).to_vector<double>(), (std::vector<double>{-kInf, kInf, kInf}));
  EXPECT_EQ(norm(t, 2, {1}).to_vector<double>(), (std::vector<double>{kInf, kInf, kInf}));
}

TEST(Reduction, EmptyAndZeroDimInputs) {
  Tensor empty = zeros({0, 3});
  EXPECT_EQ(sum(empty, {0}).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(prod(empty, {0}).to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_TRUE(std::isnan(mean(empty).item<float>()));
  EXPECT_TRUE(std::isnan(var(empty, {0}).to_vector<float>()[0]));
  EXPECT_EQ(logsumexp(empty, {0}).to_vector<float>()[0], -kInf);
  EXPECT_EQ(norm(empty, 2, {0}).to_vector<float>()[0], 0);
  // A negative p over nothing came out inf; refused as -inf is (as
  // torch.linalg.vector_norm). Mutation caught: the check for p = -inf only.
  EXPECT_EMBER_ERROR(norm(zeros({0}), -1.0), "norm (p = -1): cannot reduce over dim 0 of size 0");
  EXPECT_EMBER_ERROR(norm(zeros({0}), -2.5), "norm (p = -2.5)");
  EXPECT_EQ(amax(empty, {1}).shape(), (Shape{0}));  // nothing reduced over the empty dim
  EXPECT_EMBER_ERROR(amax(empty, {0}), "amax: cannot reduce over dim 0 of size 0 (input shape [0, 3])");
  EXPECT_EMBER_ERROR(amin(empty), "amin: cannot reduce over dim 0 of size 0");
  EXPECT_EMBER_ERROR(max(empty), "max: cannot reduce an empty tensor (shape [0, 3])");
  EXPECT_EMBER_ERROR(min(empty), "min: cannot reduce an empty tensor");
  EXPECT_EMBER_ERROR(argmax(empty), "argmax: cannot reduce over dim 0 of size 0");
  EXPECT_EMBER_ERROR(norm(empty, kInf, {0}), "norm (p = inf): cannot reduce over dim 0");

  // An empty tensor whose other sizes multiply past int64: the loop's merged
  // sizes overflowed (UBSan; found by the op fuzzer through mse_loss of an
  // unflatten). Mutation caught under UBSan: merge_group's products back in int64.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  Tensor vast = zeros({huge, 7, 0});
  EXPECT_EQ(sum(vast).item<float>(), 0);
  EXPECT_TRUE(std::isnan(mean(vast).item<float>()));
  EXPECT_EQ(sum(vast, {0, 2}).to_vector<float>(), std::vector<float>(7, 0));

  Tensor scalar = scalar_tensor(2.5, {});
  EXPECT_EQ(sum(scalar).item<float>(), 2.5f);
  EXPECT_EQ(sum(scalar, {0}).dim(), 0);
  EXPECT_EQ(sum(scalar, {-1}, true).dim(), 0);
  EXPECT_EQ(max(scalar, 0).indices.item<int64_t>(), 0);
  EXPECT_EQ(argmax(scalar).item<int64_t>(), 0);
  EXPECT_TRUE(std::isnan(var(scalar).item<float>()));  // n - 1 = 0
  EXPECT_EQ(var(scalar, {}, false).item<float>(), 0);
}

TEST(Reduction, BadInputsNameTheOpAndValues) {
  Tensor t = zeros({2, 3});
  EXPECT_EMBER_ERROR(sum(t, {1, -1}), "sum: dim 1 appears more than once in dims [1, -1]");
  EXPECT_EMBER_ERROR(sum(t, {2}), "sum: dim 2 out of range");
  EXPECT_EMBER_ERROR(max(t, -3), "max: dim -3 out of range");
  EXPECT_EMBER_ERROR(argmax(t, 5), "argmax: dim 5 out of range");
  Tensor ints = ones({3}, {.dtype = DType::i64});
  EXPECT_EMBER_ERROR(mean(ints), "mean: expected a floating point input, got int64");
  EXPECT_EMBER_ERROR(var(ints), "var: expected a floating point input, got int64");
  EXPECT_EMBER_ERROR(ember::std(ints), "std: expected a floating point input");
  EXPECT_EMBER_ERROR(norm(ones({2}, {.dtype = DType::i32})), "norm: expected a floating point input, got int32");
  // torch.logsumexp takes integers and bools, in f32 (the others refuse them
  // there too). Mutation caught: the conversion removed -> "logsumexp:
  // expected a floating point input".
  const Tensor lse = logsumexp(from_vector<int64_t>({1, 2, 3}), {0});
  EXPECT_EQ(lse.dtype(), DType::f32);
  EXPECT_FLOAT_EQ(lse.item<float>(), 3.4076059f);
  EXPECT_FLOAT_EQ(logsumexp(ones({2}, {.dtype = DType::boolean}), {0}).item<float>(), 1.0f + std::log(2.0f));
  EXPECT_EMBER_ERROR(norm(t, std::nan("")), "norm: p must be a number");
  EXPECT_EMBER_ERROR(sum(Tensor()), "sum: undefined");
}

}  // namespace
}  // namespace ember::testing
