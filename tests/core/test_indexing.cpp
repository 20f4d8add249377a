// The indexing family: tiny exact hand cases, every kernel op against the
// reference kernels for every dtype and memory layout, the composed ops
// (cat, stack, split, chunk, repeat, pad) on edge shapes, and bad inputs.
#include <limits>
#include <vector>

#include "support/test_support.h"

namespace ember::testing {
namespace {

Tensor longs(const std::vector<int64_t>& values, const Shape& shape = {}) { return from_vector(values, shape); }
Tensor floats(const std::vector<float>& values, const Shape& shape = {}) { return from_vector(values, shape); }
std::vector<float> values_of(const Tensor& t) { return t.to_vector<float>(); }

// A random index tensor with values in [0, size) (size > 0) of the given dtype.
Tensor random_index(const Shape& shape, int64_t size, DType dtype = DType::i64) {
  return random_tensor(shape, dtype, 0, double(size - 1));
}

TEST(Indexing, HandCases) {
  Tensor a = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(values_of(cat({a, floats({7, 8, 9}, {1, 3})})), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(values_of(cat({a, floats({7, 8}, {2, 1})}, 1)), (std::vector<float>{1, 2, 3, 7, 4, 5, 6, 8}));
  EXPECT_EQ(stack({floats({1, 2}), floats({3, 4})}, 1).shape(), (Shape{2, 2}));
  EXPECT_EQ(values_of(stack({floats({1, 2}), floats({3, 4})}, 1)), (std::vector<float>{1, 3, 2, 4}));
  EXPECT_EQ(values_of(index_select(a, 1, longs({2, 0, 2}))), (std::vector<float>{3, 1, 3, 6, 4, 6}));
  EXPECT_EQ(values_of(gather(a, 1, longs({2, 0, 1, 1}, {2, 2}))), (std::vector<float>{3, 1, 5, 5}));
  EXPECT_EQ(values_of(scatter_add(zeros({2, 3}), 1, longs({0, 0, 2, 1}, {2, 2}), floats({1, 2, 3, 4}, {2, 2}))),
            (std::vector<float>{3, 0, 0, 0, 4, 3}));
  EXPECT_EQ(values_of(masked_fill(a, from_vector<bool>({true, false, true}), -1.0)),
            (std::vector<float>{-1, 2, -1, -1, 5, -1}));
  Tensor table = floats({0, 1, 10, 11, 20, 21}, {3, 2});
  Tensor looked_up = embedding(from_vector<int32_t>({2, 0, 2, 1}, {2, 2}), table);
  EXPECT_EQ(looked_up.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(values_of(looked_up), (std::vector<float>{20, 21, 0, 1, 20, 21, 10, 11}));
  EXPECT_EQ(one_hot(longs({2, 0})).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(one_hot(longs({1}), 4).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0, 0}));
  Tensor square = floats({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  EXPECT_EQ(values_of(tril(square)), (std::vector<float>{1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_EQ(values_of(triu(square, 1)), (std::vector<float>{0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_EQ(values_of(tril(square, -1)), (std::vector<float>{0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_EQ(values_of(repeat(floats({1, 2}), {2, 2})), (std::vector<float>{1, 2, 1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(repeat(floats({1, 2}), {2, 2}).shape(), (Shape{2, 4}));
  // 4 * 2^62 elements wrapped to 0: an empty result without a word. Mutation
  // caught: the repeated sizes multiplied unchecked.
  EXPECT_EMBER_ERROR(repeat(floats({1, 2, 3, 4}), {int64_t(1) << 62}),
                     "repeat: 4611686018427387904 repeats of dim 0 of size 4 overflow 64 bits");
  EXPECT_EQ(values_of(pad(floats({1, 2, 3}), {1, 2}, 9)), (std::vector<float>{9, 1, 2, 3, 9, 9}));
  EXPECT_EQ(values_of(pad(a, {-1, 1, 1, 0})), (std::vector<float>{0, 0, 0, 2, 3, 0, 5, 6, 0}));
}

TEST(Indexing, SplitAndChunkAreViews) {
  Tensor t = arange(10).reshape({5, 2});
  std::vector<Tensor> pieces = split(t, 2);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[2].shape(), (Shape{1, 2}));
  EXPECT_EQ(pieces[1].to_vector<int64_t>(), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(pieces[1].storage(), t.storage());
  std::vector<Tensor> sized = split(t, std::vector<int64_t>{1, 0, 4}, 0);
  ASSERT_EQ(sized.size(), 3u);
  EXPECT_EQ(sized[1].shape(), (Shape{0, 2}));
  EXPECT_EQ(sized[2].to_vector<int64_t>()[0], 2);
  std::vector<Tensor> chunks = chunk(t, 2, 1);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[1].to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 5, 7, 9}));
  EXPECT_EQ(chunk(arange(5), 3).size(), 3u);   // sizes 2, 2, 1
  EXPECT_EQ(chunk(arange(6), 4).size(), 3u);   // sizes 2, 2, 2, as in PyTorch
  EXPECT_EQ(chunk(zeros({0, 3}), 3).size(), 3u);
  EXPECT_EQ(split(zeros({0}), 2).size(), 1u);
  pieces[0].fill_(7);
  EXPECT_EQ(t.to_vector<int64_t>()[3], 7);
}

// Any positive split size or chunk count is valid: past the dim's size it
// gives one piece, or pieces of one element (found by the op fuzzer,
// tests/fuzz/README_ops.md: size + split_size - 1 overflowed near the int64 limit).
TEST(Indexing, SplitAndChunkTakeSizesUpToTheInt64Limit) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor t = arange(10).reshape({5, 2});
  std::vector<Tensor> whole = split(t, kMax);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].shape(), t.shape());
  std::vector<Tensor> ones = chunk(t, kMax);
  ASSERT_EQ(ones.size(), 5u);
  EXPECT_EQ(ones[4].to_vector<int64_t>(), (std::vector<int64_t>{8, 9}));
  // An empty dim gives one empty piece per chunk (as PyTorch), so a count
  // past what memory holds is an ember::Error, not std::length_error (found
  // by the op fuzzer: chunk(kMax) of a [0, 3, 5, 5] tensor).
  EXPECT_EMBER_ERROR(chunk(zeros({0, 3}), kMax), "chunk: 9223372036854775807 chunks of dim 0 (size 0, shape [0, 3])");
  EXPECT_EQ(chunk(zeros({0, 3}), 1000).size(), 1000u);
}

// The fuzzer found start + length overflowing int64 inside narrow's own
// bounds check (UBSan); a length up to the limit is an error, not UB.
TEST(Indexing, NarrowBoundsDoNotOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor t = arange(10);
  EXPECT_EMBER_ERROR(t.narrow(0, 3, kMax), "narrow: start 3 + length 9223372036854775807 exceeds dimension size 10");
  EXPECT_EMBER_ERROR(t.narrow(0, kMax, 1), "exceeds dimension size 10");
  EXPECT_EQ(t.narrow(0, 3, 7).to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5, 6, 7, 8, 9}));
}

TEST(Indexing, CatPromotesAndSkipsLegacyEmpty) {
  Tensor ints = ones({2}, {.dtype = DType::i32}), halfs = ones({1}, {.dtype = DType::f16});
  EXPECT_EQ(cat({ints, halfs}).dtype(), DType::f16);
  EXPECT_EQ(cat({ints, ones({1}, {.dtype = DType::i64})}).dtype(), DType::i64);
  EXPECT_EQ(cat({ones({1}, {.dtype = DType::boolean}), ints}).dtype(), DType::i32);
  Tensor legacy = zeros({0});
  EXPECT_EQ(cat({legacy, ones({2, 3}), legacy}).shape(), (Shape{2, 3}));
  EXPECT_EQ(cat({legacy, legacy}).shape(), (Shape{0}));
  EXPECT_EQ(cat({zeros({2, 0}), ones({2, 3})}, 1).shape(), (Shape{2, 3}));
}

TEST(Indexing, ComposedOpsMatchReferenceForEveryDtypeAndLayout) {
  for (DType dtype : kAllDTypes) {
    Tensor a = random_tensor({3, 4}, dtype), b = random_tensor({3, 2}, dtype), c = random_tensor({3, 1}, dtype);
    Tensor expected_cat = reference([&] { return cat({a, b, c}, -1); });
    Tensor expected_stack = reference([&] { return stack({a, a}, 2); });
    Tensor expected_repeat = reference([&] { return repeat(c, {2, 1, 3}); });
    Tensor expected_pad = reference([&] { return pad(a, {2, -1, 1, 1}, 1); });
    for (const Layout& layout : layouts_of(a)) {
      std::string what = std::string(dtype_name(dtype)) + " " + layout.name;
      EXPECT_TRUE(all_close(cat({layout.tensor, b, c}, -1), expected_cat)) << what;
      EXPECT_TRUE(all_close(stack({layout.tensor, a}, 2), expected_stack)) << what;
      EXPECT_TRUE(all_close(pad(layout.tensor, {2, -1, 1, 1}, 1), expected_pad)) << what;
    }
    for (const Layout& layout : layouts_of(c))
      EXPECT_TRUE(all_close(repeat(layout.tensor, {2, 1, 3}), expected_repeat)) << dtype_name(dtype) << layout.name;
    // Repeat holds c's column at every (i, j) block: check against the definition too.
    std::vector<double> column = c.to_vector<double>(), repeated = expected_repeat.to_vector<double>();
    for (size_t i = 0; i < repeated.size(); ++i) EXPECT_EQ(repeated[i], column[(i / 3) % 3]);
  }
}

TEST(Indexing, KernelOpsMatchReferenceForEveryDtypeShapeAndLayout) {
  const std::vector<Shape> shapes = {{5}, {4, 3}, {2, 3, 4}, {1, 6}, {7, 33}};
  for (DType dtype : kAllDTypes) {
    for (DType index_dtype : {DType::i32, DType::i64}) {
      for (const Shape& shape : shapes) {
        Tensor t = random_tensor(shape, dtype);
        std::string what = fmt::format("{} index {} shape {}", dtype, index_dtype, shape);
        for (int d = 0; d < t.dim(); ++d) {
          Tensor rows = random_index({6}, shape[d], index_dtype);
          Shape index_shape = shape;
          index_shape[d] = 5;
          Tensor positions = random_index(index_shape, shape[d], index_dtype);
          Tensor src = random_tensor(index_shape, dtype);
          Tensor expected_select = reference([&] { return index_select(t, d, rows); });
          Tensor expected_gather = reference([&] { return gather(t, d, positions); });
          Tensor expected_scatter = reference([&] { return scatter_add(t, d, positions, src); });
          for (const Layout& layout : layouts_of(t)) {
            EXPECT_TRUE(all_close(index_select(layout.tensor, d, rows), expected_select)) << what << layout.name;
            EXPECT_TRUE(all_close(gather(layout.tensor, d, positions), expected_gather)) << what << layout.name;
            EXPECT_TRUE(all_close(scatter_add(layout.tensor, d, positions, src), expected_scatter, 0, 0))
                << what << layout.name;
          }
          for (const Layout& layout : layouts_of(positions)) {
            EXPECT_TRUE(all_close(gather(t, d, layout.tensor), expected_gather)) << what << " index " << layout.name;
            EXPECT_TRUE(all_close(scatter_add(t, d, layout.tensor, src), expected_scatter, 0, 0))
                << what << " index " << layout.name;
          }
        }
        Tensor mask = random_tensor({shape.back()}, DType::boolean);
        Tensor expected_masked = reference([&] { return masked_fill(t, mask, 1); });
        for (const Layout& layout : layouts_of(t))
          EXPECT_TRUE(all_close(masked_fill(layout.tensor, mask, 1), expected_masked)) << what << layout.name;
        if (t.dim() >= 2) {
          for (int64_t diagonal : {-2, 0, 1, 5}) {
            Tensor expected_lower = reference([&] { return tril(t, diagonal); });
            Tensor expected_upper = reference([&] { return triu(t, diagonal); });
            for (const Layout& layout : layouts_of(t)) {
              EXPECT_TRUE(all_close(tril(layout.tensor, diagonal), expected_lower)) << what << layout.name;
              EXPECT_TRUE(all_close(triu(layout.tensor, diagonal), expected_upper)) << what << layout.name;
            }
          }
        }
      }
      Tensor table = random_tensor({9, 5}, dtype);
      Tensor ids = random_index({2, 3, 4}, 9, index_dtype);
      Tensor expected_embedding = reference([&] { return embedding(ids, table); });
      for (const Layout& layout : layouts_of(table))
        EXPECT_TRUE(all_close(embedding(ids, layout.tensor), expected_embedding)) << dtype_name(dtype) << layout.name;
    }
  }
  for (DType index_dtype : {DType::i32, DType::i64}) {
    Tensor ids = random_index({3, 4}, 6, index_dtype);
    Tensor expected = reference([&] { return one_hot(ids, 7); });
    for (const Layout& layout : layouts_of(ids)) EXPECT_TRUE(all_close(one_hot(layout.tensor, 7), expected));
  }
}

TEST(Indexing, LargeInputsRunInParallelAndScatterAddIsDeterministic) {
  set_num_threads(2);
  Tensor t = random_tensor({600, 300}, DType::f32);
  Tensor rows = random_index({700}, 600);
  EXPECT_TRUE(all_close(index_select(t, 0, rows), reference([&] { return index_select(t, 0, rows); })));
  Tensor columns = random_index({200}, 300);
  EXPECT_TRUE(all_close(index_select(t, 1, columns), reference([&] { return index_select(t, 1, columns); })));
  Tensor positions = random_index({600, 300}, 600);
  EXPECT_TRUE(all_close(gather(t, 0, positions), reference([&] { return gather(t, 0, positions); })));
  // Many float values land on few targets; any change of order would show in the low bits.
  Tensor few = random_index({600, 300}, 4);
  Tensor target = zeros({4, 300});
  Tensor expected = reference([&] { return scatter_add(target, 0, few, t); });
  EXPECT_TRUE(all_close(scatter_add(target, 0, few, t), expected, 0, 0));
  set_num_threads(1);
  EXPECT_TRUE(all_close(scatter_add(target, 0, few, t), expected, 0, 0));
  set_num_threads(2);
  Tensor mask = random_tensor({600, 300}, DType::boolean);
  EXPECT_TRUE(all_close(masked_fill(t, mask, 0.5), reference([&] { return masked_fill(t, mask, 0.5); })));
  EXPECT_TRUE(all_close(triu(t, 3), reference([&] { return triu(t, 3); })));
  Tensor ids = random_index({40000}, 10);
  EXPECT_TRUE(all_close(one_hot(ids, 10), reference([&] { return one_hot(ids, 10); })));
  set_num_threads(1);
}

// 16-bit scatter_add adds in f32 and rounds once, as PyTorch's. One bf16
// add at a time, 600 repeats of one index (weights 1, 1.25, ..., 2: 900 in
// all) stopped at 512, where bf16's spacing is 4; gather's, index_select's and
// embedding's gradients are this op, so bf16 embeddings lost their repeated
// tokens' gradient. Mutation caught: scatter_add in the tensor's own dtype.
TEST(Indexing, SixteenBitScatterAddRoundsOnceFromAnF32Sum) {
  std::vector<double> weights(600);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 + 0.25 * double(i % 5);
  for (DType dtype : {DType::bf16, DType::f16}) {
    Tensor src = from_vector(weights, {600}).to(dtype);
    Tensor index = full({600}, 2, {.dtype = DType::i64});
    Tensor expected = scatter_add(zeros({4}), 0, index, src.to(DType::f32)).to(dtype);
    EXPECT_EQ(scatter_add(zeros({4}, {.dtype = dtype}), 0, index, src).to_vector<double>(),
              expected.to_vector<double>())
        << dtype_name(dtype);
    EXPECT_EQ(expected.to_vector<double>()[2], 900.0) << dtype_name(dtype);
    Tensor x = zeros({4}, {.dtype = dtype});
    x.requires_grad_(true);
    Tensor by_gather = autograd::grad({gather(x, 0, index)}, {x}, {src})[0];
    Tensor by_index_select =
        autograd::grad({index_select(x.reshape({4, 1}), 0, index)}, {x}, {src.reshape({600, 1})})[0];
    EXPECT_EQ(by_gather.to_vector<double>(), expected.to_vector<double>()) << dtype_name(dtype);
    EXPECT_EQ(by_index_select.to_vector<double>(), expected.to_vector<double>()) << dtype_name(dtype);
  }
}

TEST(Indexing, EdgeShapes) {
  Tensor scalar = scalar_tensor(4.0, {});
  EXPECT_EQ(index_select(scalar, 0, longs({0})).dim(), 0);
  EXPECT_EQ(gather(scalar, 0, longs({0}, {})).item<float>(), 4.0f);
  EXPECT_EQ(scatter_add(scalar, 0, longs({0}, {}), scalar_tensor(1.0, {})).item<float>(), 5.0f);
  EXPECT_EQ(masked_fill(scalar, scalar_tensor(true, {.dtype = DType::boolean}), 1).item<float>(), 1.0f);
  EXPECT_EQ(index_select(zeros({3, 2}), 0, zeros({0}, {.dtype = DType::i64})).shape(), (Shape{0, 2}));
  EXPECT_EQ(gather(zeros({3, 2}), 1, zeros({3, 0}, {.dtype = DType::i64})).shape(), (Shape{3, 0}));
  EXPECT_EQ(embedding(zeros({0}, {.dtype = DType::i32}), zeros({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(tril(zeros({0, 3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(repeat(zeros({2}), {0, 3}).shape(), (Shape{0, 6}));
  EXPECT_EQ(repeat(scalar, {2}).to_vector<float>(), (std::vector<float>{4, 4}));
  EXPECT_EQ(pad(zeros({2}), {-2, 0}).shape(), (Shape{0}));
  EXPECT_EQ(one_hot(zeros({0}, {.dtype = DType::i64}), 3).shape(), (Shape{0, 3}));
  EXPECT_EQ(masked_fill(zeros({1, 3}), from_vector<bool>({true, false}, {2, 1}), 2).shape(), (Shape{2, 3}));
  // Seven dims that all repeat do not fit one [r, s] view of 14 dims.
  Tensor many = random_tensor({2, 1, 2, 1, 2, 1, 2}, DType::f32);
  Tensor repeated = repeat(many, {2, 2, 2, 2, 2, 2, 2});
  EXPECT_EQ(repeated.shape(), (Shape{4, 2, 4, 2, 4, 2, 4}));
  EXPECT_EQ(repeated.select(0, 3).select(0, 1).select(0, 2).select(0, 0).select(0, 1).select(0, 1).select(0, 3)
                .item<float>(),
            many.select(0, 1).select(0, 0).select(0, 0).select(0, 0).select(0, 1).select(0, 0).select(0, 1)
                .item<float>());
}

// Any int64 diagonal is valid: past the matrix's extent it keeps or zeroes
// everything (found by the op fuzzer, tests/fuzz/README_ops.md: the fast
// kernel's row + diagonal overflowed for diagonals near the int64 limits).
TEST(Indexing, TrilAndTriuTakeAnyDiagonal) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  Tensor square = floats({1, 2, 3, 4, 5, 6, 7, 8, 9}, {3, 3});
  const std::vector<float> all = values_of(square), none(9, 0.0f);
  EXPECT_EQ(values_of(tril(square, kMax)), all);
  EXPECT_EQ(values_of(tril(square, kMax - 1)), all);
  EXPECT_EQ(values_of(tril(square, kMin)), none);
  EXPECT_EQ(values_of(triu(square, kMax)), none);
  EXPECT_EQ(values_of(triu(square, kMin)), all);
  EXPECT_EQ(values_of(triu(square, kMin + 1)), all);
  EXPECT_EQ(values_of(reference([&] { return tril(square, kMax); })), all);
  EXPECT_EQ(values_of(reference([&] { return triu(square, kMin); })), all);
}

TEST(Indexing, BadIndicesAreErrorsNamingOpValueAndSize) {
  Tensor t = zeros({3, 4});
  EXPECT_EMBER_ERROR(index_select(t, 0, longs({1, 5})),
                     "index_select: index 5 is out of bounds for dimension with size 3");
  EXPECT_EMBER_ERROR(index_select(t, 1, from_vector<int32_t>({-1})), "index_select: index -1 is out of bounds");
  EXPECT_EMBER_ERROR(gather(t, 1, longs({0, 4}, {1, 2})), "gather: index 4 is out of bounds for dimension with size 4");
  EXPECT_EMBER_ERROR(scatter_add(t, 0, longs({3}, {1, 1}), ones({1, 1})), "scatter_add: index 3 is out of bounds");
  EXPECT_EMBER_ERROR(embedding(longs({-2}), t), "embedding: index -2 is out of bounds for dimension with size 3");
  EXPECT_EMBER_ERROR(one_hot(longs({3}), 3), "one_hot: index 3 is out of bounds for dimension with size 3");
  EXPECT_EMBER_ERROR(one_hot(longs({-1}), 3), "one_hot: index -1");
  EXPECT_EMBER_ERROR(one_hot(longs({-5, -3})), "one_hot: class values must be non-negative, got -5");
  set_num_threads(2);  // an error inside a parallel region still reaches the caller
  Tensor bad = longs(std::vector<int64_t>(100000, 0));
  bad.narrow(0, 77777, 1).fill_(9);
  EXPECT_EMBER_ERROR(index_select(zeros({3}), 0, bad), "index 9");
  set_num_threads(1);
}

TEST(Indexing, BadShapesAndArgumentsNameTheOp) {
  EXPECT_EMBER_ERROR(cat({zeros({2, 3}), zeros({2, 4})}),
                     "cat: sizes of tensors must match except in dimension 0: expected size 3 but got size 4 "
                     "for tensor at position 1 (shapes [2, 3] and [2, 4])");
  EXPECT_EMBER_ERROR(cat({zeros({2, 3}), zeros({3})}), "cat: tensors must have the same number of dims");
  EXPECT_EMBER_ERROR(cat({}), "cat: expected a non-empty list");
  EXPECT_EMBER_ERROR(cat({scalar_tensor(1, {})}), "cat: zero-dimensional tensor (at position 0)");
  EXPECT_EMBER_ERROR(cat({zeros({2})}, 1), "cat: dim 1 out of range");
  EXPECT_EMBER_ERROR(stack({zeros({2}), zeros({3})}), "stack: expects each tensor to be equal size, but got [2] at "
                                                       "position 0 and [3] at position 1");
  EXPECT_EMBER_ERROR(split(zeros({4}), std::vector<int64_t>{1, 2}), "split: split sizes sum to 3 but dim 0 has size 4");
  // Sizes whose sum wraps past int64 back to the dim's size made views
  // outside the storage (a read before it, then a segfault).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EMBER_ERROR(split(zeros({5}), std::vector<int64_t>{kMax, kMax, 7}), "split: split sizes [");
  EXPECT_EMBER_ERROR(split(zeros({4}), 0), "split: split_size must be positive");
  EXPECT_EMBER_ERROR(chunk(zeros({4}), 0), "chunk: expects chunks to be greater than 0, got 0");
  EXPECT_EMBER_ERROR(index_select(zeros({3}), 0, zeros({1})),
                     "index_select: index must have dtype int32 or int64, got float32");
  EXPECT_EMBER_ERROR(index_select(zeros({3}), 0, longs({0, 1}, {1, 2})), "index_select: index must be 0-d or 1-d");
  EXPECT_EMBER_ERROR(gather(zeros({3, 2}), 0, longs({0})), "gather: index of shape [1] must have as many dims");
  EXPECT_EMBER_ERROR(gather(zeros({3, 2}), 0, longs({0, 0, 0}, {1, 3})), "gather: index of shape [1, 3] exceeds");
  EXPECT_EMBER_ERROR(scatter_add(zeros({3}), 0, longs({0}), ones({1}, {.dtype = DType::f64})),
                     "scatter_add: expected self and src to have the same dtype, got float32 and float64");
  EXPECT_EMBER_ERROR(scatter_add(zeros({3}), 0, longs({0, 1}), ones({1})),
                     "scatter_add: index of shape [2] exceeds src");
  EXPECT_EMBER_ERROR(masked_fill(zeros({3}), ones({3}), 1), "masked_fill: mask must have dtype bool, got float32");
  EXPECT_EMBER_ERROR(masked_fill(zeros({3}), ones({2}, {.dtype = DType::boolean}), 1),
                     "masked_fill: shapes [3] and [2]");
  EXPECT_EMBER_ERROR(embedding(longs({0}), zeros({3})), "embedding: weight must be 2-d");
  // The arguments the wrong way round (weight first, as ember had them once): named, not a lookup of garbage.
  EXPECT_EMBER_ERROR(embedding(zeros({5, 3}), longs({0, 4})),
                     "embedding(input, weight): input holds the indices and must be int32 or int64, got float32 of "
                     "shape [5, 3] (weight: int64 of shape [2]); the order is PyTorch's F.embedding(input, weight)");
  EXPECT_EMBER_ERROR(one_hot(zeros({0}, {.dtype = DType::i64})), "one_hot: cannot infer the number of classes");
  EXPECT_EMBER_ERROR(one_hot(zeros({2})), "one_hot: index must have dtype int32 or int64");
  EXPECT_EMBER_ERROR(tril(zeros({3})), "tril: input must have at least 2 dims, got shape [3]");
  EXPECT_EMBER_ERROR(repeat(zeros({2, 2}), {2}), "repeat: number of repeat dims (1) can not be smaller");
  EXPECT_EMBER_ERROR(repeat(zeros({2}), {-1}), "repeat: repeats must be non-negative");
  EXPECT_EMBER_ERROR(pad(zeros({2}), {1}), "pad: padding length must be divisible by 2, got 1");
  EXPECT_EMBER_ERROR(pad(zeros({2}), {1, 1, 1, 1}), "pad: padding length 4 is too large for a tensor with 1 dims");
  EXPECT_EMBER_ERROR(pad(zeros({2}), {-2, -1}), "pad: dim 0 of size 2 padded by (-2, -1) would have negative size -1");
  // Pads anywhere in int64 (the op fuzzer's edge values): their sums overflowed int64 (UBSan), and
  // cropping by INT64_MIN negated it. Reproducer: tests/fuzz/corpus/ops/pad_int64_extremes.
  constexpr int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  EXPECT_EMBER_ERROR(pad(zeros({2}), {max, max}),
                     "pad: dim 0 of size 2 padded by (9223372036854775807, 9223372036854775807) would have size "
                     "18446744073709551616, past int64");
  EXPECT_EMBER_ERROR(pad(zeros({2}), {min, min}), "would have negative size -18446744073709551614");
  EXPECT_EMBER_ERROR(pad(floats({1, 2, 3}), {min, max}, 7), "would crop 9223372036854775808 elements, more than it has");
  EXPECT_EMBER_ERROR(pad(floats({1, 2, 3}), {max - 1, min}, 7), "would crop 9223372036854775808 elements");
  // A crop past the edge with a pad on the other side gave the pad value
  // alone; PyTorch refuses it. Mutation caught: compute_pad without the crop check.
  EXPECT_EMBER_ERROR(pad(floats({1, 2, 3, 4, 5}), {-6, 2}),
                     "pad: dim 0 of size 5 padded by (-6, 2) would crop 6 elements, more than it has");
  EXPECT_EQ(values_of(pad(floats({1, 2, 3}), {-3, 1}, 7)), (std::vector<float>{7}));
}

}  // namespace
}  // namespace ember::testing
