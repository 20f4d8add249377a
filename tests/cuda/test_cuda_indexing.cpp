// The CUDA indexing kernels (kernels/cuda/indexing.cu) against the reference
// ones: gather, scatter_add, index_select, embedding, tril, triu and one_hot
// in every dtype the CPU registers, i32 and i64 indices, strided operands,
// empty and large inputs, and bad indices, which must raise the CPU's error.
// Each op only moves or adds elements, so results must be equal, not close.
// Skips without a GPU, except the coverage test, which needs only a CUDA build.
#include <set>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

const DType kValueDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean};
const DType kIndexDTypes[] = {DType::i32, DType::i64};

// A random index tensor with values in [0, size) (size > 0).
Tensor random_index(const Shape& shape, int64_t size, DType dtype) {
  return random_tensor(shape, dtype, 0, double(size - 1));
}

// same_on_gpu demanding equal values (nan matches nan).
::testing::AssertionResult equal_on_gpu(const TensorFunction& f, const Tensors& inputs) {
  return same_on_gpu(f, inputs, 0.0);
}

// The message of the ember::Error that f throws, or "no error".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The CPU's error for f(inputs) and the GPU's for the same inputs on the GPU.
void expect_same_error(const TensorFunction& f, const Tensors& inputs, const std::string& fragment) {
  const std::string expected = error_of([&] { f(inputs); });
  EXPECT_NE(expected.find(fragment), std::string::npos) << expected;
  Tensors gpu_inputs;
  for (const Tensor& t : inputs) gpu_inputs.push_back(on_gpu_like(t));
  EXPECT_EQ(error_of([&] { f(gpu_inputs); }), expected);
}

TEST(CudaIndexing, EveryCpuDtypeHasACudaKernel) {
  const std::set<std::string> ours = {"gather", "scatter_add", "index_select", "embedding", "tril", "triu", "one_hot"};
  EXPECT_TRUE(cuda_registers_cpu_dtypes(ours));
}

TEST(CudaIndexing, GatherAndScatterAddMatchTheCpuForEveryDtypeShapeAndLayout) {
  EMBER_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{5}, {4, 3}, {2, 3, 4}, {1, 6}, {7, 33}, {3, 1, 2, 5}};
  for (DType dtype : kValueDTypes) {
    for (DType index_dtype : kIndexDTypes) {
      for (const Shape& shape : shapes) {
        Tensor t = random_tensor(shape, dtype);
        for (int d = 0; d < t.dim(); ++d) {
          const std::string what = fmt::format("{} index {} shape {} dim {}", dtype, index_dtype, shape, d);
          // The index is smaller than the input in the other dims, and longer along d (repeats).
          Shape index_shape = shape;
          for (int k = 0; k < index_shape.ndim(); ++k) index_shape[k] = k == d ? 7 : std::max<int64_t>(1, shape[k] - 1);
          Tensor positions = random_index(index_shape, shape[d], index_dtype);
          Tensor src = random_tensor(index_shape, dtype);
          auto gather_along = [d](const Tensors& x) { return gather(x[0], d, x[1]); };
          auto scatter_along = [d](const Tensors& x) { return scatter_add(x[0], d, x[1], x[2]); };
          for (const Layout& layout : layouts_of(t)) {
            EXPECT_TRUE(equal_on_gpu(gather_along, {layout.tensor, positions})) << what << " " << layout.name;
            EXPECT_TRUE(equal_on_gpu(scatter_along, {layout.tensor, positions, src})) << what << " " << layout.name;
          }
          for (const Layout& layout : layouts_of(positions)) {
            EXPECT_TRUE(equal_on_gpu(gather_along, {t, layout.tensor})) << what << " index " << layout.name;
            EXPECT_TRUE(equal_on_gpu(scatter_along, {t, layout.tensor, src})) << what << " index " << layout.name;
          }
          for (const Layout& layout : layouts_of(src))
            EXPECT_TRUE(equal_on_gpu(scatter_along, {t, positions, layout.tensor})) << what << " src " << layout.name;
        }
      }
    }
  }
}

TEST(CudaIndexing, ScatterAddAddsInIndexOrderLikeTheCpu) {
  EMBER_REQUIRE_GPU();
  // Many values land on few targets: any other order of the adds shows in the
  // low bits. The shapes take one owner per slice, many owners over few
  // slices (the 1-d case), and an embedding's backward (an expanded index).
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    Tensor values = random_tensor({600, 300}, dtype);
    Tensor few = random_index({600, 300}, 4, DType::i64);
    auto scatter_rows = [](const Tensors& x) { return scatter_add(x[0], 0, x[1], x[2]); };
    EXPECT_TRUE(equal_on_gpu(scatter_rows, {zeros({4, 300}, {.dtype = dtype}), few, values})) << dtype_name(dtype);
    auto scatter_columns = [](const Tensors& x) { return scatter_add(x[0], 1, x[1], x[2]); };
    Tensor across = random_index({600, 300}, 50, DType::i32);
    EXPECT_TRUE(equal_on_gpu(scatter_columns, {zeros({600, 50}, {.dtype = dtype}), across, values}))
        << dtype_name(dtype);
    Tensor long_values = random_tensor({100000}, dtype);
    Tensor long_index = random_index({100000}, 1000, DType::i64);
    EXPECT_TRUE(equal_on_gpu(scatter_rows, {random_tensor({1000}, dtype), long_index, long_values}))
        << dtype_name(dtype);
    Tensor tokens = random_index({5000, 1}, 300, DType::i64).expand({5000, 64});
    Tensor rows = random_tensor({5000, 64}, dtype);
    EXPECT_TRUE(equal_on_gpu(scatter_rows, {zeros({300, 64}, {.dtype = dtype}), tokens, rows})) << dtype_name(dtype);
  }
  // Integers wrap and bools "or", as arith::add does.
  auto scatter = [](const Tensors& x) { return scatter_add(x[0], 0, x[1], x[2]); };
  Tensor big = from_vector<int32_t>({std::numeric_limits<int32_t>::max(), 5});
  EXPECT_TRUE(equal_on_gpu(scatter, {big, from_vector<int64_t>({0, 0, 1}), from_vector<int32_t>({1, 2, 3})}));
  Tensor flags = from_vector<bool>({false, false, true});
  EXPECT_TRUE(equal_on_gpu(
      scatter, {flags, from_vector<int64_t>({0, 0, 1, 2}), from_vector<bool>({false, true, false, false})}));
}

TEST(CudaIndexing, IndexSelectAndEmbeddingMatchTheCpu) {
  EMBER_REQUIRE_GPU();
  const std::vector<Shape> shapes = {{5}, {4, 3}, {2, 3, 4}, {1, 6}, {7, 33}};
  for (DType dtype : kValueDTypes) {
    for (DType index_dtype : kIndexDTypes) {
      for (const Shape& shape : shapes) {
        Tensor t = random_tensor(shape, dtype);
        for (int d = 0; d < t.dim(); ++d) {
          const std::string what = fmt::format("{} index {} shape {} dim {}", dtype, index_dtype, shape, d);
          Tensor rows = random_index({9}, shape[d], index_dtype);
          auto select = [d](const Tensors& x) { return index_select(x[0], d, x[1]); };
          for (const Layout& layout : layouts_of(t))
            EXPECT_TRUE(equal_on_gpu(select, {layout.tensor, rows})) << what << " " << layout.name;
          for (const Layout& layout : layouts_of(rows))
            EXPECT_TRUE(equal_on_gpu(select, {t, layout.tensor})) << what << " index " << layout.name;
          EXPECT_TRUE(equal_on_gpu(select, {t, random_index({}, shape[d], index_dtype)})) << what << " 0-d index";
        }
      }
      Tensor table = random_tensor({9, 5}, dtype);
      auto embed = [](const Tensors& x) { return embedding(x[1], x[0]); };
      Tensor ids = random_index({2, 3, 4}, 9, index_dtype);
      for (const Layout& layout : layouts_of(table))
        EXPECT_TRUE(equal_on_gpu(embed, {layout.tensor, ids})) << dtype_name(dtype) << " " << layout.name;
      for (const Layout& layout : layouts_of(ids))
        EXPECT_TRUE(equal_on_gpu(embed, {table, layout.tensor})) << dtype_name(dtype) << " ids " << layout.name;
    }
  }
  // Large enough for many blocks and the grid-stride loop.
  Tensor vocabulary = random_tensor({5000, 768}, DType::bf16);
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return embedding(x[1], x[0]); },
                           {vocabulary, random_index({8, 1024}, 5000, DType::i64)}));
  Tensor wide = random_tensor({600, 300}, DType::f32);
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return index_select(x[0], 1, x[1]); },
                           {wide, random_index({200}, 300, DType::i32)}));
}

TEST(CudaIndexing, TrilAndTriuMatchTheCpuForEveryDiagonal) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kValueDTypes) {
    for (const Shape& shape : {Shape{4, 3}, Shape{3, 5}, Shape{2, 3, 4}, Shape{1, 1}, Shape{2, 1, 7, 6}}) {
      Tensor t = random_tensor(shape, dtype);
      for (int64_t diagonal : {-100, -3, -1, 0, 1, 2, 100}) {
        const std::string what = fmt::format("{} shape {} diagonal {}", dtype, shape, diagonal);
        for (const Layout& layout : layouts_of(t)) {
          EXPECT_TRUE(equal_on_gpu([diagonal](const Tensors& x) { return tril(x[0], diagonal); }, {layout.tensor}))
              << what << " " << layout.name;
          EXPECT_TRUE(equal_on_gpu([diagonal](const Tensors& x) { return triu(x[0], diagonal); }, {layout.tensor}))
              << what << " " << layout.name;
        }
      }
    }
  }
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return triu(x[0], 3); }, {random_tensor({600, 700}, DType::f32)}));
}

TEST(CudaIndexing, OneHotMatchesTheCpu) {
  EMBER_REQUIRE_GPU();
  for (DType index_dtype : kIndexDTypes) {
    Tensor ids = random_index({3, 4}, 6, index_dtype);
    for (const Layout& layout : layouts_of(ids))
      EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return one_hot(x[0], 7); }, {layout.tensor})) << layout.name;
    EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return one_hot(x[0], 10); },
                             {random_index({40000}, 10, index_dtype)}));
  }
}

TEST(CudaIndexing, EmptyInputsGiveEmptyResults) {
  EMBER_REQUIRE_GPU();
  Tensor none = zeros({0}, {.dtype = DType::i64});
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return gather(x[0], 0, x[1]); },
                           {random_tensor({4}, DType::f32), none}));
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return scatter_add(x[0], 0, x[1], x[2]); },
                           {random_tensor({4}, DType::f32), none, zeros({0})}));
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return index_select(x[0], 0, x[1]); },
                           {random_tensor({4, 3}, DType::f32), none}));
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return index_select(x[0], 0, x[1]); },
                           {zeros({4, 0}), from_vector<int64_t>({1, 2})}));
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return embedding(x[1], x[0]); },
                           {random_tensor({4, 3}, DType::f32), zeros({2, 0}, {.dtype = DType::i32})}));
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return tril(x[0]); }, {zeros({0, 3})}));
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return one_hot(x[0], 3); }, {none}));
}

TEST(CudaIndexing, BadIndicesRaiseTheCpuErrorAndLeaveTheGpuUsable) {
  EMBER_REQUIRE_GPU();
  Tensor t = random_tensor({3, 4}, DType::f32);
  for (DType index_dtype : kIndexDTypes) {
    auto index = [&](const std::vector<int64_t>& values, const Shape& shape) {
      return from_vector(values, shape).to(index_dtype);
    };
    expect_same_error([](const Tensors& x) { return index_select(x[0], 0, x[1]); }, {t, index({1, 5, 0}, {3})},
                      "index_select: index 5 is out of bounds for dimension with size 3");
    expect_same_error([](const Tensors& x) { return index_select(x[0], 1, x[1]); }, {t, index({-1}, {1})},
                      "index_select: index -1 is out of bounds for dimension with size 4");
    expect_same_error([](const Tensors& x) { return gather(x[0], 1, x[1]); }, {t, index({0, 4}, {1, 2})},
                      "gather: index 4 is out of bounds for dimension with size 4");
    expect_same_error([](const Tensors& x) { return scatter_add(x[0], 0, x[1], x[2]); },
                      {t, index({0, 3}, {2, 1}), ones({2, 1})},
                      "scatter_add: index 3 is out of bounds for dimension with size 3");
    expect_same_error([](const Tensors& x) { return scatter_add(x[0], 0, x[1], x[2]); },
                      {zeros({1000}), index(std::vector<int64_t>(5000, -7), {5000}), ones({5000})},
                      "scatter_add: index -7 is out of bounds");
    expect_same_error([](const Tensors& x) { return embedding(x[1], x[0]); }, {t, index({2, -2}, {2})},
                      "embedding: index -2 is out of bounds for dimension with size 3");
    expect_same_error([](const Tensors& x) { return one_hot(x[0], 3); }, {index({1, 3}, {2})},
                      "one_hot: index 3 is out of bounds for dimension with size 3");
    expect_same_error([](const Tensors& x) { return one_hot(x[0], 0); }, {index({0}, {1})},
                      "one_hot: index 0 is out of bounds for dimension with size 0");
  }
  // The scratch flag is cleared for the next op.
  EXPECT_TRUE(equal_on_gpu([](const Tensors& x) { return gather(x[0], 1, x[1]); },
                           {t, from_vector<int64_t>({3, 0}, {1, 2})}));
}

}  // namespace
}  // namespace ember::testing
