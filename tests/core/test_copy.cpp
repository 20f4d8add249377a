// Strided copies (core/ops/copy.cpp, kernels/cpu/copy.cpp and copy_tiled.cpp):
// contiguous() of transposes, permutes, stepped slices, expanded and flipped
// views, and copy_ into transposed outputs, for every dtype, against the
// reference kernels bit for bit. Shapes run past the tile side of every
// element size (64 bytes: 64 one-byte elements down to 8 eight-byte ones) so
// whole tiles, edge tiles and tiles split between threads are all compared.
#include <algorithm>
#include <numeric>
#include <optional>

#include "support/test_support.h"

namespace ember::testing {
namespace {

// The values of `t` exactly (every dtype's values here are exact in f64).
std::vector<double> values_of(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

// contiguous(view) from the CPU kernels against the reference kernels.
void expect_same_copy(const Tensor& view, const std::string& what) {
  Tensor fast = contiguous(view);
  Tensor expected = reference([&] { return clone(view); });
  ASSERT_TRUE(fast.is_contiguous()) << what;
  ASSERT_EQ(fast.shape(), view.shape()) << what;
  EXPECT_EQ(values_of(fast), values_of(expected)) << fmt::format("{} {} shape {} strides {}", what, view.dtype(), view.shape(), view.strides());
}

// Catches a transposed block stored to the wrong rows or columns (swapping the
// store index and the load index in transpose_block fails every dtype here).
TEST(StridedCopy, TransposeMatchesReferenceEveryDtype) {
  for (DType dtype : kAllDTypes) {
    for (Shape shape : {Shape{64, 64}, Shape{150, 70}, Shape{17, 200}, Shape{3, 1}, Shape{1, 1}, Shape{0, 5}}) {
      Tensor x = random_tensor(shape, dtype, -100, 100);
      expect_same_copy(transpose(x, 0, 1), "transpose");
    }
  }
}

// The line-wide register blocks (kernels/cpu/copy_tiled.cpp, AVX-512 where
// the CPU has it; the 16-byte blocks under EMBER_CPU_BASELINE, see
// tests/CMakeLists.txt): per element size, a block is 64 bytes square (64
// one-byte elements down to 8 eight-byte ones) and a tile four blocks tall.
// Sizes here are whole blocks, whole tiles plus a block, and a few elements
// past them; the rows come from a narrowed, wider tensor (odd row pitch, the
// first element one past the allocation's start: unaligned loads), and the
// output goes to a narrowed transposed destination (odd pitch, offset stores).
// Mutation caught (run once, failed as expected): inserting lanes 1 and 2 of
// each gathered register in swapped order in transpose_lines_avx512 fails
// every dtype.
TEST(StridedCopy, LineBlocksEveryElementSizeOddPitchesAndOffsets) {
  for (DType dtype : kAllDTypes) {
    const int64_t side = 64 / element_size(dtype);  // one line of elements: the block's side
    for (auto [rows, columns] : {std::pair<int64_t, int64_t>{side, side}, {5 * side, 2 * side},
                                 {5 * side + 3, 2 * side + 1}, {4 * side - 1, side + 7}, {3, 3 * side}}) {
      Tensor wide = random_tensor({rows, columns + 3}, dtype, -100, 100);
      Tensor source = narrow(wide, 1, 1, columns);
      expect_same_copy(transpose(source, 0, 1), fmt::format("transpose of a narrowed {}x{}", rows, columns));

      Tensor destination = zeros({columns, rows + 5}, {.dtype = dtype});
      transpose(narrow(destination, 1, 2, rows), 0, 1).copy_(source);
      Tensor expected = reference([&] { return clone(transpose(source, 0, 1)); });
      EXPECT_EQ(values_of(narrow(destination, 1, 2, rows)), values_of(expected))
          << fmt::format("copy_ into a narrowed transposed {} {}x{}", dtype, rows, columns);
      EXPECT_EQ(values_of(narrow(destination, 1, 0, 2)), std::vector<double>(size_t(columns) * 2, 0.0))
          << "copy_ wrote outside its destination";
    }
    // A permute whose merged dims form a batch of transposes, each of whole blocks.
    Tensor batch = random_tensor({3, 2 * side, side + 1}, dtype, -100, 100);
    expect_same_copy(permute(narrow(batch, 2, 1, side), {0, 2, 1}), "batch of transposes");
  }
}

// Random shapes and permutations, some large enough for several tiles along
// every dim: catches an outer-dim offset or an edge-tile size computed wrongly
// (e.g. a full tile copied past the end of a 70-long dim).
TEST(StridedCopy, RandomPermutationsMatchReference) {
  std::uniform_int_distribution<int> ndims(2, 5);
  std::uniform_int_distribution<int64_t> size(1, 75);
  for (DType dtype : kAllDTypes) {
    for (int trial = 0; trial < 12; ++trial) {
      const int ndim = ndims(rng());
      Shape shape = Shape::filled(ndim, 1);
      for (int d = 0; d < ndim; ++d) shape[d] = size(rng());
      while (shape.numel() > 200000) shape[std::max_element(shape.begin(), shape.end()) - shape.begin()] /= 2;
      Dims order = Dims::filled(ndim, 0);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng());
      Tensor x = random_tensor(shape, dtype, -100, 100);
      expect_same_copy(permute(x, order), "permute");
    }
  }
}

// Views that are not plain permutations: a stepped slice of a transpose, an
// expanded column (stride 0 along the output's dense dim), a transposed
// expansion, a flip of a transpose (negative strides), empty and 0-d tensors.
TEST(StridedCopy, StridedExpandedFlippedAndEmptyViews) {
  for (DType dtype : kAllDTypes) {
    Tensor x = random_tensor({90, 130}, dtype, -100, 100);
    expect_same_copy(slice(slice(transpose(x, 0, 1), 0, 3, 130, 2), 1, 1, 90, 3), "stepped slice of a transpose");
    Tensor column = random_tensor({100, 1}, dtype, -100, 100);
    expect_same_copy(expand(column, {100, 70}), "expanded column");
    expect_same_copy(transpose(expand(column, {100, 70}), 0, 1), "transposed expansion");
    expect_same_copy(flip(transpose(x, 0, 1), {1}), "flip of a transpose");
    Tensor cube = random_tensor({20, 33, 40}, dtype, -100, 100);
    expect_same_copy(slice(permute(cube, {2, 0, 1}), 1, 0, 20, 3), "stepped slice of a permute");
    expect_same_copy(transpose(random_tensor({0, 80}, dtype), 0, 1), "empty");
    expect_same_copy(permute(random_tensor({1, 1, 1}, dtype), {2, 0, 1}), "one element");
    expect_same_copy(random_tensor({}, dtype), "0-d");
  }
}

// copy_ into a transposed destination (the output strided, the source dense),
// and between two differently permuted views; catches tiles that assume a
// dense output.
TEST(StridedCopy, CopyIntoStridedDestination) {
  for (DType dtype : kAllDTypes) {
    Tensor source = random_tensor({70, 150}, dtype, -100, 100);
    Tensor destination = zeros({150, 70}, {.dtype = dtype});
    transpose(destination, 0, 1).copy_(source);
    EXPECT_EQ(values_of(destination), values_of(reference([&] { return clone(transpose(source, 0, 1)); })))
        << dtype_name(dtype);

    Tensor cube = random_tensor({9, 70, 66}, dtype, -100, 100);
    Tensor target = zeros({66, 9, 70}, {.dtype = dtype});
    permute(target, {1, 2, 0}).copy_(cube);
    EXPECT_EQ(values_of(target), values_of(reference([&] { return clone(permute(cube, {2, 0, 1})); }))) << dtype_name(dtype);
  }
}

// Hand case: the exact values of a small transpose.
TEST(StridedCopy, HandCase) {
  Tensor a = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(contiguous(transpose(a, 0, 1)).to_vector<int32_t>(), (std::vector<int32_t>{1, 4, 2, 5, 3, 6}));
}

// A written-to tensor whose elements share memory (expand's stride 0) is
// refused by copy_ and the in-place arithmetic, naming the dim, as PyTorch
// refuses it; fill_ (one value everywhere) and a size-1 dim of stride 0 are
// fine. Mutation caught (run once, failed as expected): without
// check_no_internal_overlap, copy_ keeps the last row written and add_ adds
// twice into the same memory.
TEST(InPlaceWrite, OverlappingTargetIsRefused) {
  Tensor row = zeros({3});
  Tensor expanded = row.expand({2, 3});
  const Tensor source = arange(Scalar(0.0), Scalar(6.0), Scalar(1.0), {.dtype = DType::f32}).reshape({2, 3});
  EXPECT_EMBER_ERROR(expanded.copy_(source), "copy_: the tensor written to (shape [2, 3], strides [0, 1])");
  EXPECT_EMBER_ERROR(add_(expanded, source), "add_: the tensor written to");
  EXPECT_EMBER_ERROR(mul_(expanded, Scalar(2.0)), "dim 0 has stride 0");
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{0, 0, 0})) << "a refused write changed the tensor";
  expanded.fill_(Scalar(1.0));
  EXPECT_EQ(row.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  Tensor single = zeros({3}).expand({1, 3});  // a new leading dim of size 1 and stride 0
  single.copy_(source.narrow(0, 1, 1));
  EXPECT_EQ(single.to_vector<float>(), (std::vector<float>{3, 4, 5}));
  // No elements, nothing to collide, as PyTorch (mutation: checking the
  // strides of an empty target -> "has several elements in one memory location").
  Tensor none = zeros({1}).expand({0, 3});
  none.copy_(zeros({0, 3}));
  add_(none, zeros({0, 3}));
  EXPECT_EQ(none.numel(), 0);
}

// A source sharing memory with the target, other than element for element,
// is read as it was before the write (NumPy's rule; PyTorch refuses these).
// Mutation caught: without source_overlaps_target's copy, x.add_(x[3]) gives
// [3, 4, 5, 9, 7] (the fuzzer's case: the reference kernel read x[3] after
// writing it), the shifted copies smear one value along the row, and the
// transposes read rows already written.
TEST(InPlaceWrite, SourceOverlappingTheTargetIsReadBeforeTheWrite) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64, DType::f64}) {
    auto values = [&](Tensor t) { return t.to(DType::f64).to_vector<double>(); };
    auto row = [&](int64_t n) { return arange(Scalar(0.0), Scalar(double(n)), Scalar(1.0), {.dtype = dtype}); };
    for (bool reference_mode : {false, true}) {
      std::optional<ReferenceModeGuard> guard;
      if (reference_mode) guard.emplace();
      const std::string what = fmt::format("{} reference {}", dtype_name(dtype), reference_mode);
      Tensor x = row(5);
      add_(x, x.select(0, 3));
      EXPECT_EQ(values(x), (std::vector<double>{3, 4, 5, 6, 7})) << what;
      x = row(6);
      x.narrow(0, 1, 5).copy_(x.narrow(0, 0, 5));
      EXPECT_EQ(values(x), (std::vector<double>{0, 0, 1, 2, 3, 4})) << what;
      x = row(6);
      x.narrow(0, 0, 5).copy_(x.narrow(0, 1, 5));
      EXPECT_EQ(values(x), (std::vector<double>{1, 2, 3, 4, 5, 5})) << what;
      Tensor m = row(64 * 64).reshape({64, 64});
      Tensor expected = contiguous(m.transpose(0, 1));
      m.copy_(m.transpose(0, 1));
      EXPECT_EQ(values(m), values(expected)) << what;
      m = row(16).reshape({4, 4});
      expected = m + m.transpose(0, 1);
      add_(m, m.transpose(0, 1));
      EXPECT_EQ(values(m), values(expected)) << what;
      x = row(5);
      add_(x, x);  // the same elements in the same places: no copy needed
      EXPECT_EQ(values(x), (std::vector<double>{0, 2, 4, 6, 8})) << what;
    }
  }
}

// Two tensors over one caller's buffer (from_blob: each has a storage of its
// own) overlap as views of one storage do, and are read the same way.
// Catches: comparing storages only (PyTorch's check): the kernel read
// b[16..] after its first 16-wide write had changed them (fast kernels), or
// b[1] after a[0] (the reference).
TEST(InPlaceWrite, SourceOverlappingTheTargetThroughAnotherStorageIsReadBeforeTheWrite) {
  for (bool reference_mode : {false, true}) {
    std::optional<ReferenceModeGuard> guard;
    if (reference_mode) guard.emplace();
    std::vector<float> buffer(65), expected(65);
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = float(i);
    expected[0] = 0;
    for (size_t i = 1; i < expected.size(); ++i) expected[i] = float(i) + float(i - 1);
    Tensor b = from_blob(buffer.data(), {64}, DType::f32), a = from_blob(buffer.data() + 1, {64}, DType::f32);
    add_(a, b);
    EXPECT_EQ(buffer, expected) << "reference " << reference_mode;
    for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = float(i);
    a.copy_(b);
    EXPECT_EQ(buffer[64], 63) << "reference " << reference_mode;
    EXPECT_EQ(buffer[1], 0) << "reference " << reference_mode;
  }
}

}  // namespace
}  // namespace ember::testing
