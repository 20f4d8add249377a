// The scan family (core/ops/scan.h): tiny exact hand cases, cumsum and
// cumprod against a naive scan for every dtype, memory layout and dim
// (negative ones too), the fast CPU kernels against the reference on inputs
// large enough to split across threads, empty and 0-d inputs, and bad inputs.
#include "support/test_support.h"

namespace ember::testing {
namespace {

// A scan written out with coordinates on the host: doubles for floating
// results, wrapping int64 for integer ones; rounded to out_dtype at the end
// (the kernels round each prefix once, so the two agree within the dtype's
// tolerance).
Tensor naive_scan(const Tensor& t, int64_t dim, bool product, DType out_dtype) {
  Shape shape = t.shape();
  if (t.dim() == 0 || t.numel() == 0) return t.to(out_dtype).clone();
  int d = int(dim < 0 ? dim + t.dim() : dim);
  int64_t length = shape[d], inner = 1;
  for (int k = d + 1; k < t.dim(); ++k) inner *= shape[k];
  int64_t outer = t.numel() / (length * inner);
  auto run = [&]<class V>(std::vector<V> values) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        V accumulated = product ? V(1) : V(0);
        for (int64_t j = 0; j < length; ++j) {
          V& v = values[size_t((o * length + j) * inner + i)];
          if constexpr (std::is_integral_v<V>)
            accumulated = product ? V(uint64_t(accumulated) * uint64_t(v)) : V(uint64_t(accumulated) + uint64_t(v));
          else
            accumulated = product ? accumulated * v : accumulated + v;
          v = accumulated;
        }
      }
    }
    return from_vector<V>(values, shape).to(out_dtype);
  };
  if (is_floating(out_dtype)) return run(t.to(DType::f64).to_vector<double>());
  return run(t.to(DType::i64).to_vector<int64_t>());
}

DType scan_dtype(DType input) { return is_floating(input) ? input : DType::i64; }

TEST(Scan, HandCases) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(cumsum(a, 1).to_vector<float>(), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(cumsum(a, 0).to_vector<float>(), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(cumprod(a, -1).to_vector<float>(), (std::vector<float>{1, 2, 6, 4, 20, 120}));
  EXPECT_EQ(cumprod(a, -2).to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 10, 18}));
  Tensor ints = from_vector<int32_t>({3, -1, 2});
  EXPECT_EQ(cumsum(ints, 0).dtype(), DType::i64);
  EXPECT_EQ(cumsum(ints, 0).to_vector<int64_t>(), (std::vector<int64_t>{3, 2, 4}));
  EXPECT_EQ(cumprod(ints, 0).to_vector<int64_t>(), (std::vector<int64_t>{3, -3, -6}));
  Tensor flags = from_vector<bool>({true, false, true, true});
  EXPECT_EQ(cumsum(flags, 0).dtype(), DType::i64);
  EXPECT_EQ(cumsum(flags, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2, 3}));
  EXPECT_EQ(cumsum(ints, 0, DType::f64).dtype(), DType::f64);
  EXPECT_EQ(cumsum(ints, 0, DType::f64).to_vector<double>(), (std::vector<double>{3, 2, 4}));
  EXPECT_EQ(cumsum(a, 1, DType::i32).to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 6, 4, 9, 15}));
}

// Sums of int32 inputs run in int64, as in PyTorch: no wrap at 2^31.
TEST(Scan, IntegerInputsAccumulateInInt64) {
  Tensor big = full({3}, 2000000000, {.dtype = DType::i32});
  EXPECT_EQ(cumsum(big, 0).to_vector<int64_t>(), (std::vector<int64_t>{2000000000, 4000000000, 6000000000}));
  // An explicit int32 result wraps, as PyTorch's does.
  EXPECT_EQ(cumsum(big, 0, DType::i32).to_vector<int32_t>()[1], int32_t(uint32_t(4000000000u)));
}

TEST(Scan, MatchesANaiveScanForEveryDtypeLayoutAndDim) {
  for (DType dtype : kAllDTypes) {
    for (int trial = 0; trial < 12; ++trial) {
      int ndim = trial % 4 + 1;
      Shape shape = random_shape(ndim, 7);
      Tensor base = random_tensor(shape, dtype, -2, 2);
      for (const Layout& layout : layouts_of(base)) {
        for (int64_t dim = -ndim; dim < ndim; ++dim) {
          SCOPED_TRACE(fmt::format("{} {} {} dim {}", dtype, shape, layout.name, dim));
          EXPECT_TRUE(all_close(cumsum(layout.tensor, dim), naive_scan(base, dim, false, scan_dtype(dtype))));
          // Products of values in [-2, 2] stay exact in every dtype for these lengths.
          Tensor small = random_tensor(shape, dtype, -2, 2);
          EXPECT_TRUE(all_close(cumprod(small, dim), naive_scan(small, dim, true, scan_dtype(dtype))));
        }
      }
    }
  }
}

// Large enough to split across threads; each element sees the reference's
// steps in the reference's order, so the results are equal, not just close.
TEST(Scan, FastKernelsEqualTheReferenceOnLargeInputs) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
    Tensor wide = random_tensor({3, 40000}, dtype, -2, 2), tall = random_tensor({40000, 3}, dtype, -2, 2);
    Tensor cube = random_tensor({30, 70, 50}, dtype, 0.9, 1.1);
    for (const auto& [input, along] : {std::pair{wide, 1}, std::pair{tall, 0}, std::pair{cube.permute({2, 0, 1}), 1}}) {
      Tensor t = input;
      int64_t dim = along;
      SCOPED_TRACE(fmt::format("{} {} dim {}", dtype, t.shape(), dim));
      EXPECT_TRUE(all_close(cumsum(t, dim), reference([&] { return cumsum(t, dim); }), 0, 0));
      EXPECT_TRUE(all_close(cumprod(t, dim), reference([&] { return cumprod(t, dim); }), 0, 0));
    }
  }
}

TEST(Scan, EmptyAndZeroDimInputs) {
  for (const Shape& shape : {Shape{0}, Shape{0, 3}, Shape{3, 0}, Shape{2, 0, 4}}) {
    for (int64_t dim = 0; dim < shape.ndim(); ++dim) {
      Tensor out = cumsum(zeros(shape), dim);
      EXPECT_EQ(out.shape(), shape);
      EXPECT_EQ(cumprod(zeros(shape, {.dtype = DType::i32}), dim).dtype(), DType::i64);
    }
  }
  Tensor scalar = full({}, 3.5);
  EXPECT_EQ(cumsum(scalar, 0).shape(), Shape{});
  EXPECT_EQ(cumsum(scalar, -1).item<float>(), 3.5f);
  EXPECT_EQ(cumprod(scalar, 0).item<float>(), 3.5f);
}

TEST(Scan, BadInputsRaiseErrorsNamingTheOp) {
  Tensor a = zeros({2, 3});
  EXPECT_EMBER_ERROR(cumsum(a, 2), "cumsum: dim 2 out of range");
  EXPECT_EMBER_ERROR(cumprod(a, -3), "cumprod: dim -3 out of range");
  EXPECT_EMBER_ERROR(cumsum(a, 0, DType::boolean), "cumsum: dtype bool is not supported");
  EXPECT_EMBER_ERROR(cumsum(Tensor(), 0), "cumsum: input is undefined");
}

}  // namespace
}  // namespace ember::testing
