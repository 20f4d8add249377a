// Matrix products (matmul, mm, bmm, addmm) against the reference kernels: every
// dtype, transposed and strided operands, broadcast batch dims, 1-d operands,
// empty dims, the forced bf16 fallback, the primitive cache, and bad input.
#include <cmath>
#include <string>
#include <thread>
#include <tuple>

#include "kernels/cpu/onednn.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

const DType kMatmulDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

// (a, b, expected result shape) under NumPy's matmul rules.
struct ShapeCase {
  Shape a, b, out;
};
const ShapeCase kShapeCases[] = {
    {{3, 4}, {4, 5}, {3, 5}},          {{1, 1}, {1, 1}, {1, 1}},           {{17, 33}, {33, 9}, {17, 9}},
    {{2, 3, 4}, {2, 4, 5}, {2, 3, 5}}, {{2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5}}, {{5, 3, 4}, {4, 2}, {5, 3, 2}},
    {{3, 4}, {2, 4, 5}, {2, 3, 5}},    {{4}, {4}, {}},                      {{4}, {4, 3}, {3}},
    {{3, 4}, {4}, {3}},                {{4}, {2, 4, 3}, {2, 3}},           {{2, 3, 4}, {4}, {2, 3}},
    {{0, 3}, {3, 4}, {0, 4}},          {{3, 0}, {0, 4}, {3, 4}},           {{2, 0, 3}, {3, 4}, {2, 0, 4}},
    {{1, 5}, {5, 1}, {1, 1}},          {{3, 1, 2, 6}, {1, 4, 6, 2}, {3, 4, 2, 2}},
};

TEST(Matmul, MatchesReferenceForEveryDtypeShapeAndLayout) {
  for (DType dtype : kMatmulDTypes) {
    for (const ShapeCase& c : kShapeCases) {
      Tensor a = random_tensor(c.a, dtype), b = random_tensor(c.b, dtype);
      Tensor expected = reference([&] { return matmul(a, b); });
      ASSERT_EQ(expected.shape(), c.out) << c.a.str() << " x " << c.b.str();
      for (const Layout& la : layouts_of(a)) {
        for (const Layout& lb : layouts_of(b)) {
          EXPECT_TRUE(all_close(matmul(la.tensor, lb.tensor), expected))
              << dtype_name(dtype) << " " << c.a.str() << " (" << la.name << ") x " << c.b.str() << " (" << lb.name
              << ")";
        }
      }
    }
  }
}

TEST(Matmul, RandomBatchedShapesWithTransposedViews) {
  for (int trial = 0; trial < 20; ++trial) {
    Shape batch = random_shape(2, 3);
    int64_t m = 1 + int64_t(rng()() % 9), k = 1 + int64_t(rng()() % 9), n = 1 + int64_t(rng()() % 9);
    for (DType dtype : {DType::f32, DType::bf16, DType::f64, DType::i64}) {
      Shape a_shape = batch, b_shape{batch.back(), n, k};  // b is stored [.., n, k] and used transposed
      a_shape.push_back(m), a_shape.push_back(k);
      Tensor a = random_tensor(a_shape, dtype), b = random_tensor(b_shape, dtype).transpose(-1, -2);
      Tensor expected = reference([&] { return matmul(a, b); });
      EXPECT_TRUE(all_close(matmul(a, b), expected)) << dtype_name(dtype) << " " << a_shape.str() << " x " << b.shape().str();
      EXPECT_TRUE(all_close(matmul(a.transpose(-1, -2).contiguous().transpose(-1, -2), b), expected));
    }
  }
}

// Both operands expanded along the same batch dim (stride 0 in each): oneDNN
// broadcasts one operand's batch dim, not both, and refused the descriptor
// with its own exception (found by the op fuzzer). Mutation caught: the
// batched primitive for these.
TEST(Matmul, BothOperandsBroadcastAlongOneBatchDim) {
  for (DType dtype : kMatmulDTypes) {
    for (auto [a_shape, b_shape, out_shape] : {std::tuple{Shape{1, 1, 5, 4}, Shape{1, 1, 4, 3}, Shape{1, 3, 5, 3}},
                                               std::tuple{Shape{2, 1, 5, 4}, Shape{1, 1, 4, 3}, Shape{2, 3, 5, 3}},
                                               std::tuple{Shape{1, 5, 4}, Shape{4, 3}, Shape{3, 5, 3}}}) {
      Shape a_expanded = out_shape, b_expanded = out_shape;
      a_expanded[a_expanded.size() - 1] = 4;
      b_expanded[b_expanded.size() - 2] = 4;
      Tensor a = random_tensor(a_shape, dtype), b = random_tensor(b_shape, dtype);
      if (b.dim() < a.dim()) b = b.unsqueeze(0);
      Tensor ea = a.expand(a_expanded), eb = b.expand(b_expanded);
      Tensor expected = reference([&] { return matmul(ea, eb); });
      EXPECT_TRUE(all_close(matmul(ea, eb), expected)) << dtype_name(dtype) << " " << out_shape.str();
    }
  }
}

TEST(Matmul, LargeProductsMatchReference) {
  set_num_threads(2);
  for (DType dtype : kMatmulDTypes) {
    Tensor a = random_tensor({70, 300}, dtype), b = random_tensor({300, 130}, dtype);
    // The reference sums f32 in f64; an f32 sum's rounding error grows like sqrt(k).
    // bf16 and f16 round once from an f32 sum in both kernels.
    double tol = tolerance(dtype) * (dtype == DType::f32 ? std::sqrt(300.0) : 1.0);
    Tensor expected = reference([&] { return mm(a, b); });
    EXPECT_TRUE(all_close(mm(a, b), expected, tol, tol)) << dtype_name(dtype);
    EXPECT_TRUE(all_close(mm(a, b.t().contiguous().t()), expected, tol, tol)) << dtype_name(dtype);
  }
  set_num_threads(1);
}

TEST(Matmul, EmptyInnerDimGivesZeros) {
  for (DType dtype : kMatmulDTypes) {
    Tensor out = matmul(empty({3, 0}, {.dtype = dtype}), empty({0, 2}, {.dtype = dtype}));
    EXPECT_TRUE(all_close(out, zeros({3, 2}, {.dtype = dtype})));
  }
}

TEST(Matmul, ExactHandCases) {
  for (DType dtype : kMatmulDTypes) {
    Tensor a = from_vector<double>({1, 2, 3, 4}, {2, 2}).to(dtype), b = from_vector<double>({5, 6, 7, 8}, {2, 2}).to(dtype);
    EXPECT_EQ(mm(a, b).to_vector<double>(), (std::vector<double>{19, 22, 43, 50})) << dtype_name(dtype);
    EXPECT_EQ(mm(a.t(), b).to_vector<double>(), (std::vector<double>{26, 30, 38, 44})) << dtype_name(dtype);
    Tensor dot = matmul(from_vector<double>({1, 2, 3}).to(dtype), from_vector<double>({4, 5, 6}).to(dtype));
    EXPECT_EQ(dot.dim(), 0);
    EXPECT_EQ(dot.item<double>(), 32.0);
  }
}

TEST(Matmul, IntegerProductsWrapLikeTheReference) {
  Tensor a = full({2, 3}, 1 << 20, {.dtype = DType::i32}), b = full({3, 2}, 1 << 13, {.dtype = DType::i32});
  EXPECT_TRUE(all_close(mm(a, b), reference([&] { return mm(a, b); })));
}

TEST(Matmul, Bf16FallbackToF32MatchesReference) {
  bool was_enabled = cpu::onednn_bf16_enabled();
  cpu::set_onednn_bf16_enabled(false);
  for (const ShapeCase& c : kShapeCases) {
    Tensor a = random_tensor(c.a, DType::bf16), b = random_tensor(c.b, DType::bf16);
    EXPECT_TRUE(all_close(matmul(a, b), reference([&] { return matmul(a, b); }))) << c.a.str() << " x " << c.b.str();
  }
  Tensor input = random_tensor({7}, DType::bf16), a = random_tensor({5, 6}, DType::bf16), b = random_tensor({6, 7}, DType::bf16);
  EXPECT_TRUE(all_close(addmm(input, a, b), reference([&] { return addmm(input, a, b); })));
  cpu::set_onednn_bf16_enabled(was_enabled);
}

TEST(Matmul, RepeatedShapesReuseCachedPrimitivesWithNewData) {
  for (int i = 0; i < 3; ++i) {
    Tensor a = random_tensor({8, 8}, DType::f32), b = random_tensor({8, 8}, DType::f32);
    EXPECT_TRUE(all_close(mm(a, b), reference([&] { return mm(a, b); })));
  }
}

// Note [Blocked weights for tall products] (kernels/cpu/matmul.cpp): from 1024
// rows on, f32 reorders B into oneDNN's blocked layout on every call. Odd k
// and n pad the blocks; a transposed B is Linear's weight; new data each time.
// Mutations caught: the reorder skipped (the primitive reads an uninitialised
// buffer), or run only on a shape's first call (the second call multiplies by
// the first call's B).
TEST(Matmul, TallF32ProductsMatchReferenceThroughBlockedWeights) {
  for (int call = 0; call < 2; ++call) {
    Tensor a = random_tensor({1030, 67}, DType::f32), b = random_tensor({67, 45}, DType::f32);
    Tensor weight = random_tensor({45, 67}, DType::f32), bias = random_tensor({45}, DType::f32);
    double tol = tolerance(DType::f32) * std::sqrt(67.0);
    EXPECT_TRUE(all_close(mm(a, b), reference([&] { return mm(a, b); }), tol, tol)) << "call " << call;
    EXPECT_TRUE(all_close(addmm(bias, a, weight.t()), reference([&] { return addmm(bias, a, weight.t()); }), tol, tol))
        << "call " << call;
  }
}

// Note [Wide products computed transposed] (kernels/cpu/matmul.cpp): 16-128
// rows times a transposed B of 1024 or more columns and depth 512 or more run
// as C^T = B^T A^T, then a transpose. Each addend form (per column, full, per
// row, a scalar), a transposed A, the smallest and largest m, and an n that
// pads the blocks; new data each call. Mutations caught: the transpose into
// place skipped, or copying the buffer without transposing it (wrong values);
// the addend not added; the operands swapped the wrong way round (A^T taken
// as the rows). Only one thread takes the transposed product; two check the
// rule that leaves them on the direct one.
TEST(Matmul, WideF32ProductsMatchReferenceThroughTheTransposedProduct) {
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{16, 1024, 512}, {77, 1030, 600}, {128, 1024, 784}}) {
    for (int call = 0; call < 3; ++call) {
      set_num_threads(call == 2 ? 2 : 1);
      const std::string what = fmt::format("m {} n {} k {} call {}", m, n, k, call);
      Tensor a = random_tensor({m, k}, DType::f32), weight = random_tensor({n, k}, DType::f32);
      Tensor a_transposed = random_tensor({k, m}, DType::f32).t();
      const double tol = tolerance(DType::f32) * std::sqrt(double(k));
      EXPECT_TRUE(all_close(mm(a, weight.t()), reference([&] { return mm(a, weight.t()); }), tol, tol)) << what;
      EXPECT_TRUE(all_close(mm(a_transposed, weight.t()), reference([&] { return mm(a_transposed, weight.t()); }), tol,
                            tol))
          << what << " transposed A";
      for (const Shape& bias_shape : {Shape{n}, Shape{m, n}, Shape{m, 1}, Shape{}}) {
        Tensor bias = random_tensor(bias_shape, DType::f32);
        EXPECT_TRUE(all_close(addmm(bias, a, weight.t()), reference([&] { return addmm(bias, a, weight.t()); }), tol,
                              tol))
            << what << " bias " << bias_shape.str();
      }
    }
  }
  set_num_threads(1);
}

TEST(Matmul, ConcurrentCallersOfOneShapeGetTheirOwnResults) {
  std::vector<Tensor> as, bs, expected;
  for (int i = 0; i < 4; ++i) {
    as.push_back(random_tensor({16, 24}, DType::f32));
    bs.push_back(random_tensor({24, 16}, DType::f32));
    expected.push_back(reference([&] { return mm(as[i], bs[i]); }));
  }
  std::vector<Tensor> results(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] {
      for (int repeat = 0; repeat < 50; ++repeat) results[i] = mm(as[i], bs[i]);
    });
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(all_close(results[i], expected[i]));
}

TEST(Addmm, MatchesReferenceWithBroadcastInputAndScalars) {
  for (DType dtype : kMatmulDTypes) {
    Tensor a = random_tensor({5, 6}, dtype), b = random_tensor({6, 7}, dtype);
    for (const Shape& input_shape : {Shape{5, 7}, Shape{7}, Shape{5, 1}, Shape{}, Shape{1, 7}}) {
      Tensor input = random_tensor(input_shape, dtype);
      for (const Layout& lb : layouts_of(b)) {
        EXPECT_TRUE(all_close(addmm(input, a, lb.tensor), reference([&] { return addmm(input, a, b); })))
            << dtype_name(dtype) << " input " << input_shape.str() << " b " << lb.name;
      }
      Tensor scaled = addmm(input, a, b, 3, 2);
      Tensor expected = reference([&] { return add(mul(mm(a, b), 2), mul(input, 3)); });
      EXPECT_TRUE(all_close(scaled, expected, 2 * tolerance(dtype), 2 * tolerance(dtype))) << dtype_name(dtype);
    }
  }
}

TEST(Addmm, ZeroBetaIgnoresInputAndEmptyInnerDimGivesInput) {
  Tensor input = full({2, 2}, std::nan("")), a = random_tensor({2, 3}, DType::f32), b = random_tensor({3, 2}, DType::f32);
  EXPECT_TRUE(all_close(addmm(input, a, b, 0, 1), mm(a, b)));
  Tensor bias = random_tensor({3}, DType::f32);
  EXPECT_TRUE(all_close(addmm(bias, empty({2, 0}), empty({0, 3})), bias.expand({2, 3}).contiguous()));
}

TEST(Matmul, BadInputsNameTheOpAndValues) {
  Tensor f32 = ones({2, 3}), f64 = ones({3, 2}, {.dtype = DType::f64});
  EXPECT_EMBER_ERROR(matmul(ones({2, 3}), ones({4, 5})), "matmul: shapes [2, 3] and [4, 5] cannot be multiplied (3 != 4)");
  EXPECT_EMBER_ERROR(matmul(ones({3}), ones({4})), "matmul: shapes [3] and [4] cannot be multiplied (3 != 4)");
  EXPECT_EMBER_ERROR(matmul(f32, f64), "matmul: expected both operands to have the same dtype, got float32 and float64");
  EXPECT_EMBER_ERROR(matmul(ones({}), ones({3})), "matmul: both arguments need to be at least 1-d");
  EXPECT_EMBER_ERROR(matmul(ones({2, 2, 3}), ones({3, 3, 2})), "matmul");
  EXPECT_EMBER_ERROR(matmul(ones({2, 2}, {.dtype = DType::boolean}), ones({2, 2}, {.dtype = DType::boolean})),
                     "matmul: not supported for dtype bool");
  EXPECT_EMBER_ERROR(mm(ones({2, 3, 4}), ones({4, 2})), "mm: expected 2-d tensors, got shapes [2, 3, 4] and [4, 2]");
  EXPECT_EMBER_ERROR(bmm(ones({2, 3, 4}), ones({3, 4, 2})), "bmm: batch sizes of shapes [2, 3, 4] and [3, 4, 2] differ (2 != 3)");
  EXPECT_EMBER_ERROR(addmm(ones({3, 3}), ones({2, 3}), ones({3, 2})), "addmm: input of shape [3, 3] cannot be broadcast");
  EXPECT_EMBER_ERROR(addmm(ones({2}, {.dtype = DType::i32}), ones({2, 2}, {.dtype = DType::i32}),
                           ones({2, 2}, {.dtype = DType::i32}), 0.5),
                     "addmm: for integer tensors (int32), alpha and beta must not be floating point");
}

}  // namespace
}  // namespace ember::testing
