// CUDA reductions (kernels/cuda/reduction.cu) against the CPU oracle
// (tests/cuda/cuda_compare.h): every op and every dtype the CPU registers,
// every subset of dims of random shapes (empty and size-1 dims included) in
// each memory layout; each path of the engine (a team per output, adjacent
// outputs per warp, reduced dims that do not merge, a split across blocks);
// long rows; nan, infinities and first-index ties; wrapping integer sums;
// values and gradients. Without a GPU every test but the registration one skips.
#include <cmath>
#include <limits>
#include <string>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

using ReduceFn = Tensor (*)(const Tensor&, const Dims&);

struct ReduceCase {
  const char* name;
  ReduceFn fn;
  bool floating_only;
  bool has_identity;  // false: an empty reduced dim is an error
  double lo = -2.0, hi = 2.0;
};

const ReduceCase kReduceCases[] = {
    {"sum", [](const Tensor& t, const Dims& d) { return sum(t, d); }, false, true},
    {"mean", [](const Tensor& t, const Dims& d) { return mean(t, d); }, true, true},
    {"prod", [](const Tensor& t, const Dims& d) { return prod(t, d); }, false, true, 0.5, 1.5},
    {"amax", [](const Tensor& t, const Dims& d) { return amax(t, d, true); }, false, false},
    {"amin", [](const Tensor& t, const Dims& d) { return amin(t, d); }, false, false},
    {"var", [](const Tensor& t, const Dims& d) { return var(t, d, true); }, true, true},
    {"var biased", [](const Tensor& t, const Dims& d) { return var(t, d, false, true); }, true, true},
    {"std", [](const Tensor& t, const Dims& d) { return ember::std(t, d); }, true, true},
    {"logsumexp", [](const Tensor& t, const Dims& d) { return logsumexp(t, d); }, true, true},
    {"norm 2", [](const Tensor& t, const Dims& d) { return norm(t, 2, d); }, true, true},
    {"norm 1", [](const Tensor& t, const Dims& d) { return norm(t, 1, d); }, true, true},
    {"norm 3", [](const Tensor& t, const Dims& d) { return norm(t, 3, d); }, true, true},
    {"norm 0", [](const Tensor& t, const Dims& d) { return norm(t, 0, d); }, true, true, -1.0, 1.0},
    {"norm inf", [](const Tensor& t, const Dims& d) { return norm(t, kInf, d); }, true, false},
    {"norm -inf", [](const Tensor& t, const Dims& d) { return norm(t, -kInf, d); }, true, false},
};

// max / min along one dim (values and first indices) and argmax / argmin, as
// ReduceFns over the first dim of `d` (all elements for argmax when d is empty).
const ReduceCase kIndexCases[] = {
    {"max values", [](const Tensor& t, const Dims& d) { return max(t, d[0]).values; }, false, false},
    {"max indices", [](const Tensor& t, const Dims& d) { return max(t, d[0], true).indices; }, false, false},
    {"min values", [](const Tensor& t, const Dims& d) { return min(t, d[0]).values; }, false, false},
    {"min indices", [](const Tensor& t, const Dims& d) { return min(t, d[0]).indices; }, false, false},
    {"argmax", [](const Tensor& t, const Dims&) { return argmax(t); }, false, false},
    {"argmin", [](const Tensor& t, const Dims& d) { return argmin(t, d[0]); }, false, false},
};

bool supports(const ReduceCase& op, DType dtype) { return is_floating(dtype) || !op.floating_only; }

// Every subset of the dims of a rank-`ndim` tensor.
std::vector<Dims> dim_subsets(int ndim) {
  std::vector<Dims> subsets;
  for (int mask = 0; mask < (1 << ndim); ++mask) {
    Dims dims;
    for (int d = 0; d < ndim; ++d)
      if (mask & (1 << d)) dims.push_back(d);
    subsets.push_back(dims);
  }
  return subsets;
}

bool reduces_empty_dim(const Tensor& t, const Dims& dims) {
  for (int d = 0; d < t.dim(); ++d) {
    bool reduced = dims.empty();
    for (int64_t dim : dims) reduced = reduced || dim == d;
    if (reduced && t.shape()[d] == 0) return true;
  }
  return false;
}

std::string describe(const ReduceCase& op, const Tensor& t, const Dims& dims, const std::string& layout) {
  return std::string(op.name) + " " + std::string(dtype_name(t.dtype())) + " " + t.shape().str() + " dims " +
         dims.str() + " " + layout;
}

TEST(CudaReduction, RegistersExactlyTheCpuDtypes) {
  EXPECT_TRUE(cuda_registers_cpu_dtypes(
      {"sum", "mean", "prod", "amax", "amin", "max_indices", "min_indices", "var", "std", "norm", "logsumexp"}));
}

TEST(CudaReduction, EveryOpAndDtypeOverEveryDimSubset) {
  EMBER_REQUIRE_GPU();
  for (const ReduceCase& op : kReduceCases) {
    for (DType dtype : kAllDTypes) {
      if (!supports(op, dtype)) continue;
      // Permuted: the kept and reduced dims come in every stride order.
      Tensor t = random_tensor({5, 7, 6}, dtype, op.lo, op.hi).permute({1, 0, 2});
      for (const Dims& dims : dim_subsets(3))
        EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op.fn(x[0], dims); }, {t}))
            << describe(op, t, dims, "permuted");
    }
  }
}

TEST(CudaReduction, RandomShapesInEveryLayout) {
  EMBER_REQUIRE_GPU();
  const ReduceCase* ops[] = {&kReduceCases[0], &kReduceCases[3], &kReduceCases[5], &kReduceCases[8],
                             &kReduceCases[9]};  // sum, amax, var, logsumexp, norm 2
  for (int trial = 0; trial < 6; ++trial) {
    const Shape shape = random_shape(1 + trial % 3);
    for (DType dtype : {DType::f32, DType::bf16, DType::i64}) {
      for (const ReduceCase* op : ops) {
        if (!supports(*op, dtype)) continue;
        Tensor t = random_tensor(shape, dtype, op->lo, op->hi);
        for (const Dims& dims : dim_subsets(t.dim())) {
          for (const Layout& layout : layouts_of(t)) {
            const std::string where = describe(*op, t, dims, layout.name);
            if (!op->has_identity && reduces_empty_dim(t, dims)) {
              SCOPED_TRACE(where);
              EXPECT_EMBER_ERROR(op->fn(on_gpu_like(layout.tensor), dims), "size 0");
              continue;
            }
            EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op->fn(x[0], dims); }, {layout.tensor})) << where;
          }
        }
      }
    }
  }
}

TEST(CudaReduction, ValuesAndFirstIndicesAlongEachDim) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kAllDTypes) {
    // Few distinct values: many ties, which the first index must win.
    Tensor t = random_tensor({6, 9, 5}, dtype, -2, 2).transpose(0, 2);
    for (const ReduceCase& op : kIndexCases)
      for (int64_t dim = 0; dim < 3; ++dim)
        EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op.fn(x[0], {dim}); }, {t}))
            << describe(op, t, {dim}, "transposed");
  }
}

// The shapes that take each path of the engine (Note [CUDA reductions]):
// long dense rows (a team of 512 per output), a first-dim sum of few columns
// (adjacent outputs, the reduced range split across blocks), everything into
// one output (split across blocks), reduced dims that do not merge (the
// mixed-radix walk), and rows too short to share among a warp.
struct LongCase {
  Shape shape;
  Dims dims;
};
const LongCase kLongCases[] = {
    {{3, 50000}, {1}}, {{50000, 3}, {0}}, {{1 << 20}, {}}, {{64, 33, 65}, {0, 2}}, {{20000, 5}, {1}}, {{9, 4000, 7}, {1}},
};

TEST(CudaReduction, LongRowsAndSplitReductions) {
  EMBER_REQUIRE_GPU();
  const ReduceCase* ops[] = {&kReduceCases[0], &kReduceCases[1], &kReduceCases[4], &kReduceCases[5],
                             &kReduceCases[8], &kReduceCases[9], &kReduceCases[13]};
  for (const LongCase& c : kLongCases) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32}) {
      Tensor t = random_tensor(c.shape, dtype);
      for (const ReduceCase* op : ops) {
        if (!supports(*op, dtype)) continue;
        // Sums of a million floats differ from the f64 oracle by their rounding.
        EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op->fn(x[0], c.dims); }, {t}, 10.0))
            << describe(*op, t, c.dims, "dense");
      }
      if (c.dims.size() == 1) {
        EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return max(x[0], c.dims[0]).indices; }, {t}))
            << dtype_name(dtype) << " " << c.shape.str() << " max indices";
      } else {
        EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return argmin(x[0]); }, {t}))
            << dtype_name(dtype) << " " << c.shape.str() << " argmin";
      }
    }
  }
}

// f16 sums of many elements accumulate in float: 50000 ones are 50000 (an f16
// accumulator would stop at 2048), to f16's nearest.
TEST(CudaReduction, HalfSumsAccumulateInFloat) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : {DType::f16, DType::bf16}) {
    Tensor ones = full({50000}, 1.0, {.dtype = dtype, .device = kGpu});
    const double expected = full({}, 50000.0, {.dtype = dtype}).to(DType::f64).item<double>();
    EXPECT_EQ(sum(ones).to(kCPU).to(DType::f64).item<double>(), expected) << dtype_name(dtype);
  }
}

TEST(CudaReduction, NanInfinitiesAndTiesFarApart) {
  EMBER_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Ties and nans at positions that land in different lanes and blocks.
  std::vector<double> values(100000, 0.0);
  values[70000] = values[30000] = 7;
  const Tensor tied = from_vector<double>(values);
  values[90000] = values[60000] = nan;
  const Tensor with_nans = from_vector<double>(values);
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    Tensor ties = tied.to(dtype), nans = with_nans.to(dtype);
    for (const Tensor& t : {ties, nans}) {
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return argmax(x[0]); }, {t}));
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return argmin(x[0]); }, {t}));
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return amax(x[0]); }, {t}));
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return max(x[0], 0).values; }, {t}));
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return logsumexp(x[0], {0}); }, {t}));
      EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return norm(x[0], kInf); }, {t}));
    }
    EXPECT_EQ(argmax(on_gpu_like(ties)).to(kCPU).item<int64_t>(), 30000);
    EXPECT_EQ(argmax(on_gpu_like(nans)).to(kCPU).item<int64_t>(), 60000);
  }
  // Rows of infinities: logsumexp gives -inf for all -inf and +inf with a +inf.
  Tensor rows = from_vector<double>({-kInf, -kInf, -kInf, 1, kInf, 2, kInf, kInf, -kInf, 3, nan, 4}, {4, 3});
  for (DType dtype : {DType::f32, DType::f16, DType::f64}) {
    Tensor t = rows.to(dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return logsumexp(x[0], {1}); }, {t}));
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return amin(x[0], {1}); }, {t}));
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return min(x[0], 1).indices; }, {t}));
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return sum(x[0], {1}); }, {t}));
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return var(x[0], {1}); }, {t}));
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return norm(x[0], 0.5, {1}); }, {t}));
  }
}

TEST(CudaReduction, EmptyReducedDimsGiveTheIdentity) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : {DType::f32, DType::i32, DType::boolean}) {
    Tensor empty_rows = zeros({0, 4}, {.dtype = dtype});
    for (const ReduceCase& op : kReduceCases) {
      if (!op.has_identity || !supports(op, dtype)) continue;
      EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op.fn(x[0], {0}); }, {empty_rows}))
          << describe(op, empty_rows, {0}, "empty");
      EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return op.fn(x[0], {1}); }, {empty_rows}))
          << describe(op, empty_rows, {1}, "no outputs");
    }
  }
  Tensor empty = zeros({3, 0}, {.device = kGpu});
  EXPECT_EMBER_ERROR(amax(empty, {1}), "size 0");
  EXPECT_EMBER_ERROR(argmax(empty, 1), "size 0");
}

TEST(CudaReduction, IntegerSumsAndProductsWrapAsOnTheCpu) {
  EMBER_REQUIRE_GPU();
  const int64_t big = std::numeric_limits<int64_t>::max() - 5;
  Tensor wide = from_vector<int64_t>({big, big, 7, -3, big});
  Tensor narrow = from_vector<int32_t>({1 << 30, 1 << 30, 1 << 30, 7, 1 << 29});
  for (const Tensor& t : {wide, narrow}) {
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return sum(x[0]); }, {t}));
    EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return prod(x[0]); }, {t}));
  }
  Tensor flags = random_tensor({300, 70}, DType::boolean);
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return sum(x[0], {0}); }, {flags}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return prod(x[0], {1}); }, {flags}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return amax(x[0], {1}); }, {flags}));
}

// Splitting the reduced range across blocks merges the partials in a fixed
// order: two runs give the same bits.
TEST(CudaReduction, SplitReductionsAreDeterministic) {
  EMBER_REQUIRE_GPU();
  Tensor t = on_gpu_like(random_tensor({1 << 21}, DType::f32));
  Tensor columns = on_gpu_like(random_tensor({100000, 6}, DType::f32));
  EXPECT_EQ(sum(t).to(kCPU).item<float>(), sum(t).to(kCPU).item<float>());
  EXPECT_EQ(var(t).to(kCPU).item<float>(), var(t).to(kCPU).item<float>());
  EXPECT_EQ(sum(columns, {0}).to(kCPU).to_vector<float>(), sum(columns, {0}).to(kCPU).to_vector<float>());
}

TEST(CudaReduction, GradientsMatchTheCpu) {
  EMBER_REQUIRE_GPU();
  EMBER_REQUIRE_GRADIENT_KERNELS();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    Tensor t = random_tensor({4, 7, 5}, dtype, 0.5, 1.5).transpose(0, 1);
    for (const ReduceCase& op : kReduceCases) {
      if (std::string(op.name) == "norm 0") continue;  // zero almost everywhere
      EXPECT_TRUE(same_gradients_on_gpu([&](const Tensors& x) { return op.fn(x[0], {1}); }, {t}))
          << describe(op, t, {1}, "gradient");
    }
    for (const ReduceCase& op : kIndexCases) {
      if (std::string(op.name).find("values") == std::string::npos) continue;
      EXPECT_TRUE(same_gradients_on_gpu([&](const Tensors& x) { return op.fn(x[0], {2}); }, {t}))
          << describe(op, t, {2}, "gradient");
    }
  }
}

}  // namespace
}  // namespace ember::testing
