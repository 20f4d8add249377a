// CUDA softmax, log_softmax (kernels/cuda/softmax.cu) and cross-entropy
// (kernels/cuda/loss.cu) against the CPU oracle (tests/cuda/cuda_compare.h):
// every floating dtype; softmax along every dim of random shapes and layouts,
// long rows (50000 classes) and long columns, masked and infinite logits;
// cross-entropy with class indices of both dtypes (ignore_index, weights, label
// smoothing), probability targets, every reduction and input rank, empty
// batches, 50000 classes; the fused backward; the same error as the CPU for an
// out-of-range target; values and gradients. Without a GPU every test but the
// registration one skips.
#include <cmath>
#include <limits>
#include <string>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

TEST(CudaSoftmaxLoss, RegistersExactlyTheCpuDtypes) {
  EXPECT_TRUE(cuda_registers_cpu_dtypes({"softmax", "log_softmax", "cross_entropy", "cross_entropy_backward"}));
}

// ---- softmax ---------------------------------------------------------------

Tensor softmax_of(const Tensor& t, int64_t dim, bool log) { return log ? log_softmax(t, dim) : softmax(t, dim); }

TEST(CudaSoftmaxLoss, SoftmaxAlongEveryDimOfRandomShapesAndLayouts) {
  EMBER_REQUIRE_GPU();
  for (int trial = 0; trial < 8; ++trial) {
    const Shape shape = random_shape(1 + trial % 4, 9);
    for (DType dtype : kFloatingDTypes) {
      Tensor t = random_tensor(shape, dtype, -5, 5);
      for (int64_t dim = 0; dim < t.dim(); ++dim)
        for (bool log : {false, true})
          for (const Layout& layout : layouts_of(t))
            EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return softmax_of(x[0], dim, log); }, {layout.tensor}))
                << (log ? "log_softmax " : "softmax ") << dtype_name(dtype) << " " << shape.str() << " dim " << dim
                << " " << layout.name;
    }
  }
}

// Long rows take a block per row; long columns (inner > 1) split each line
// across threadIdx.y; a 0-d tensor and empty ones need no kernel.
TEST(CudaSoftmaxLoss, SoftmaxOfLongRowsColumnsAndEmptyInputs) {
  EMBER_REQUIRE_GPU();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{4, 50000}, 1}, {{50000, 3}, 0}, {{7, 3000, 2}, 1}, {{2, 5, 40}, 1}, {{300, 64}, 1},
                        {{}, 0},         {{0, 5}, 1},     {{5, 0}, 0}};
  for (const Case& c : cases) {
    for (DType dtype : kFloatingDTypes) {
      Tensor t = random_tensor(c.shape, dtype, -8, 8);
      for (bool log : {false, true})
        EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return softmax_of(x[0], c.dim, log); }, {t}))
            << (log ? "log_softmax " : "softmax ") << dtype_name(dtype) << " " << c.shape.str() << " dim " << c.dim;
    }
  }
}

// A masked logit (-inf) gets 0 (log: -inf); a row of -inf, a +inf or a nan
// makes the row nan, as the reference (and PyTorch).
TEST(CudaSoftmaxLoss, SoftmaxOfMaskedAndNonFiniteRows) {
  EMBER_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Tensor rows = from_vector<double>({1, -kInf, 3, -kInf, -kInf, -kInf, kInf, 2, 1, nan, 1, 2, -kInf, 0, -kInf, 40},
                                    {4, 4});
  for (DType dtype : kFloatingDTypes) {
    for (bool log : {false, true}) {
      Tensor t = rows.to(dtype);
      EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return softmax_of(x[0], 1, log); }, {t})) << dtype_name(dtype);
      EXPECT_TRUE(same_on_gpu([&](const Tensors& x) { return softmax_of(x[0], 0, log); }, {t})) << dtype_name(dtype);
    }
  }
}

TEST(CudaSoftmaxLoss, SoftmaxGradientsMatchTheCpu) {
  EMBER_REQUIRE_GPU();
  EMBER_REQUIRE_GRADIENT_KERNELS();
  for (DType dtype : kFloatingDTypes) {
    Tensor t = random_tensor({6, 5, 7}, dtype, -3, 3);
    for (int64_t dim : {0, 2})
      for (bool log : {false, true})
        EXPECT_TRUE(same_gradients_on_gpu([&](const Tensors& x) { return softmax_of(x[0], dim, log); }, {t}))
            << dtype_name(dtype) << " dim " << dim << (log ? " log" : "");
  }
}

// ---- cross-entropy -----------------------------------------------------------

// Class indices in [0, classes) of `shape`, every third one ignore_index.
Tensor class_targets(const Shape& shape, int64_t classes, DType dtype, int64_t ignore_index) {
  std::vector<int64_t> values = random_tensor(shape, DType::i64, 0, double(classes - 1)).to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); i += 3) values[i] = ignore_index;
  return from_vector<int64_t>(values).reshape(shape).to(dtype);
}

Tensor probability_targets(const Shape& shape, DType dtype) {
  return softmax(random_tensor(shape, DType::f64, -2, 2), shape.ndim() == 1 ? 0 : 1).to(dtype);
}

struct InputCase {
  Shape input;
  Shape target;  // of class indices
};
const InputCase kInputCases[] = {{{6, 5}, {6}}, {{5}, {}},         {{3, 4, 5}, {3, 5}}, {{0, 4}, {0}},
                                 {{9, 1}, {9}}, {{40, 70}, {40}}, {{3, 50000}, {3}}};

// The inputs of one case: x, target, weight (undefined when not weighted).
struct Operands {
  Tensor x, target, weight;
};

CrossEntropyOptions options_with(const Tensor& weight, int64_t ignore_index, Reduction reduction, double smoothing) {
  return {.weight = weight, .ignore_index = ignore_index, .reduction = reduction, .label_smoothing = smoothing};
}

TEST(CudaSoftmaxLoss, CrossEntropyForEveryTargetOptionAndReduction) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatingDTypes) {
    for (const InputCase& shapes : kInputCases) {
      const int64_t classes = shapes.input[shapes.input.ndim() == 1 ? 0 : 1];
      const Tensor x = random_tensor(shapes.input, dtype, -4, 4);
      const Tensor weight = random_tensor({classes}, dtype, 0.2, 2);
      const Tensor targets[] = {class_targets(shapes.target, classes, DType::i64, -100),
                                class_targets(shapes.target, classes, DType::i32, 1 % classes),
                                probability_targets(shapes.input, dtype)};
      for (const Tensor& target : targets) {
        const int64_t ignore_index = target.dtype() == DType::i32 ? 1 % classes : -100;
        for (bool weighted : {false, true}) {
          for (double smoothing : {0.0, 0.2}) {
            for (Reduction reduction : {Reduction::none, Reduction::mean, Reduction::sum}) {
              const std::string what = std::string(dtype_name(dtype)) + " " + shapes.input.str() + " target " +
                                       std::string(dtype_name(target.dtype())) + (weighted ? " weighted" : "") +
                                       " smoothing " + std::to_string(smoothing) + " reduction " +
                                       std::to_string(int(reduction));
              const Tensors inputs = {x, target, weighted ? weight : Tensor()};
              auto forward = [&](const Tensors& in) {
                return cross_entropy_forward(in[0], in[1], options_with(in[2], ignore_index, reduction, smoothing));
              };
              // The mean of f16 sums over 50000 classes rounds in its own order.
              EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).loss; }, inputs, 4)) << what;
              EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).row_max; }, inputs)) << what;
              EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).log_sum; }, inputs)) << what;
              EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).total_weight; }, inputs)) << what;
              const CrossEntropyResult saved = reference([&] { return forward(inputs); });
              const Tensor grad = random_tensor(saved.loss.shape(), dtype);
              EXPECT_TRUE(same_on_gpu(
                  [&](const Tensors& in) {
                    return cross_entropy_backward(in[3], in[0], in[1],
                                                  options_with(in[2], ignore_index, reduction, smoothing), in[4],
                                                  in[5], in[6]);
                  },
                  {x, target, weighted ? weight : Tensor(), grad, saved.row_max, saved.log_sum, saved.total_weight}))
                  << what << " backward";
            }
          }
        }
      }
    }
  }
}

// Without smoothing, a -inf logit of a class other than the target takes no
// part: the loss stays finite. An all -inf or +inf row is nan, ignored rows 0.
TEST(CudaSoftmaxLoss, CrossEntropyOfMaskedAndNonFiniteLogits) {
  EMBER_REQUIRE_GPU();
  Tensor logits = from_vector<double>({1, -kInf, 3, -kInf, -kInf, -kInf, kInf, 2, 1, 0.5, 1, 2}, {4, 3});
  Tensor target = from_vector<int64_t>({0, 1, 2, -100});
  for (DType dtype : kFloatingDTypes) {
    for (Reduction reduction : {Reduction::none, Reduction::sum}) {
      auto loss = [&](const Tensors& in) {
        return cross_entropy(in[0], in[1], {.reduction = reduction});
      };
      EXPECT_TRUE(same_on_gpu(loss, {logits.to(dtype), target})) << dtype_name(dtype);
    }
  }
}

TEST(CudaSoftmaxLoss, OutOfRangeTargetsRaiseTheCpuError) {
  EMBER_REQUIRE_GPU();
  Tensor x = random_tensor({6, 5}, DType::f32);
  for (DType target_dtype : {DType::i64, DType::i32}) {
    // Rows 2 and 4 are out of range: the error names the first, as on the CPU.
    Tensor target = from_vector<int64_t>({0, -100, 7, 4, -1, 3}).to(target_dtype);
    std::string cpu_message, gpu_message;
    try {
      cross_entropy(x, target);
    } catch (const Error& e) {
      cpu_message = e.what();
    }
    try {
      cross_entropy(on_gpu_like(x), on_gpu_like(target));
    } catch (const Error& e) {
      gpu_message = e.what();
    }
    EXPECT_NE(cpu_message.find("target 7 is out of bounds for 5 classes (target element 2"), std::string::npos)
        << cpu_message;
    EXPECT_EQ(gpu_message, cpu_message);
    // The flag is cleared for the next call: a valid target passes.
    Tensor valid = from_vector<int64_t>({0, -100, 2, 4, 1, 3}).to(target_dtype);
    EXPECT_TRUE(same_on_gpu([](const Tensors& in) { return cross_entropy(in[0], in[1]); }, {x, valid}));
  }
}

TEST(CudaSoftmaxLoss, CrossEntropyGradientsMatchTheCpu) {
  EMBER_REQUIRE_GPU();
  EMBER_REQUIRE_GRADIENT_KERNELS();
  for (DType dtype : kFloatingDTypes) {
    Tensor x = random_tensor({5, 4, 3}, dtype, -3, 3);
    Tensor classes = class_targets({5, 3}, 4, DType::i64, -100);
    Tensor probabilities = probability_targets({5, 4, 3}, dtype);
    Tensor weight = random_tensor({4}, dtype, 0.5, 1.5);
    for (const Tensor& target : {classes, probabilities}) {
      for (Reduction reduction : {Reduction::none, Reduction::mean, Reduction::sum}) {
        // Only x is differentiated; target and weight follow it to its device.
        auto loss = [&](const Tensors& in) {
          const Device device = in[0].device();
          return cross_entropy(in[0], target.to(device),
                               {.weight = weight.to(device), .reduction = reduction, .label_smoothing = 0.1});
        };
        EXPECT_TRUE(same_gradients_on_gpu(loss, {x})) << dtype_name(dtype) << " reduction " << int(reduction);
      }
    }
  }
}

}  // namespace
}  // namespace ember::testing
