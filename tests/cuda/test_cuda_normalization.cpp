// CUDA layer_norm, rms_norm and batch_norm (kernels/cuda/normalization.cu)
// against the CPU oracle (tests/cuda/cuda_compare.h): every floating dtype;
// outputs and saved statistics, with and without weight and bias, of random
// shapes and layouts, long rows (50000) and many short ones; the fused
// backwards (input, weight and bias gradients, the latter summed over many
// rows); batch norm in training and evaluation over [N, C], [N, C, L] and
// [N, C, H, W], one channel, one sample; the same bits on every run; values
// and gradients. Without a GPU every test but the registration one skips.
#include <string>

#include "cuda/cuda_compare.h"
#include "cuda/kernel_coverage.h"

namespace ember::testing {
namespace {

const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

TEST(CudaNormalization, RegistersExactlyTheCpuDtypes) {
  EXPECT_TRUE(cuda_registers_cpu_dtypes({"layer_norm", "rms_norm", "layer_norm_backward", "rms_norm_backward",
                                         "batch_norm", "batch_norm_backward"}));
}

// ---- layer_norm and rms_norm --------------------------------------------------

struct RowCase {
  Shape input;
  Shape normalized;
};
const RowCase kRowCases[] = {{{4, 6}, {6}},         {{3, 5, 7}, {5, 7}}, {{7}, {7}},          {{2, 50000}, {50000}},
                             {{3000, 33}, {33}},    {{9, 1}, {1}},       {{0, 8}, {8}},       {{5, 3, 128}, {128}}};

std::string describe(const char* op, DType dtype, const RowCase& c, bool weighted, bool biased) {
  return std::string(op) + " " + std::string(dtype_name(dtype)) + " " + c.input.str() + " normalized " +
         c.normalized.str() + (weighted ? " weight" : "") + (biased ? " bias" : "");
}

TEST(CudaNormalization, RowNormsForwardAndBackward) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatingDTypes) {
    for (const RowCase& c : kRowCases) {
      const Tensor x = random_tensor(c.input, dtype, -3, 3);
      const Tensor weight = random_tensor(c.normalized, dtype, 0.5, 1.5), bias = random_tensor(c.normalized, dtype);
      const Tensor grad = random_tensor(c.input, dtype);
      for (bool weighted : {false, true}) {
        for (bool biased : {false, true}) {
          const Tensors inputs = {x, weighted ? weight : Tensor(), biased ? bias : Tensor(), grad};
          auto layer = [&](const Tensors& in) { return layer_norm_forward(in[0], c.normalized, in[1], in[2], 1e-5); };
          const std::string what = describe("layer_norm", dtype, c, weighted, biased);
          // Rows of 50000 in f16/bf16: the statistics' float sums round in their own order.
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return layer(in).output; }, inputs, 2)) << what;
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return layer(in).mean; }, inputs)) << what;
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return layer(in).rstd; }, inputs)) << what;
          const NormalizationResult saved = reference([&] { return layer(inputs); });
          auto layer_backward = [&](const Tensors& in) {
            return layer_norm_backward(in[3], in[0], c.normalized, in[1], in[4], in[5], biased);
          };
          const Tensors backward_inputs = {x, inputs[1], inputs[2], grad, saved.mean, saved.rstd};
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return layer_backward(in).input; }, backward_inputs, 2))
              << what << " backward";
          if (weighted) {
            EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return layer_backward(in).weight; }, backward_inputs, 4))
                << what << " grad weight";
          }
          if (biased) {
            EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return layer_backward(in).bias; }, backward_inputs, 4))
                << what << " grad bias";
          }
          if (biased) continue;  // rms_norm has no bias
          auto rms = [&](const Tensors& in) { return rms_norm_forward(in[0], c.normalized, in[1], 1e-6); };
          const std::string rms_what = describe("rms_norm", dtype, c, weighted, false);
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return rms(in).output; }, inputs, 2)) << rms_what;
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return rms(in).rstd; }, inputs)) << rms_what;
          const NormalizationResult rms_saved = reference([&] { return rms(inputs); });
          auto rms_backward = [&](const Tensors& in) {
            return rms_norm_backward(in[3], in[0], c.normalized, in[1], in[4]);
          };
          const Tensors rms_inputs = {x, inputs[1], Tensor(), grad, rms_saved.rstd};
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return rms_backward(in).input; }, rms_inputs, 2))
              << rms_what << " backward";
          if (weighted) {
            EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return rms_backward(in).weight; }, rms_inputs, 4))
                << rms_what << " grad weight";
          }
        }
      }
    }
  }
}

TEST(CudaNormalization, RowNormsOfNonContiguousInputs) {
  EMBER_REQUIRE_GPU();
  const Tensor x = random_tensor({6, 10}, DType::f32), weight = random_tensor({6}, DType::f32);
  for (const Layout& layout : layouts_of(x)) {
    // The transposed layouts normalise a strided dim: the entry point makes it dense.
    const Tensor t = layout.tensor.t();
    EXPECT_TRUE(same_on_gpu([](const Tensors& in) { return layer_norm(in[0], {6}, in[1]); }, {t, weight}))
        << layout.name;
    EXPECT_TRUE(same_on_gpu([](const Tensors& in) { return rms_norm(in[0], {6}, in[1]); }, {t, weight}))
        << layout.name;
  }
}

// ---- batch_norm -----------------------------------------------------------------

const Shape kBatchShapes[] = {{16, 5}, {4, 3, 9}, {2, 3, 7, 5}, {1, 4, 6}, {8, 1, 3}, {300, 2, 1}, {2, 6, 4000}};

TEST(CudaNormalization, BatchNormInTrainingAndEvaluation) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatingDTypes) {
    for (const Shape& shape : kBatchShapes) {
      const int64_t channels = shape[1];
      // A large mean against the spread: the shifted sums keep the variance.
      const Tensor x = random_tensor(shape, dtype, 20, 24);
      const Tensor weight = random_tensor({channels}, dtype, 0.5, 1.5), bias = random_tensor({channels}, dtype);
      const TensorOptions statistics{.dtype = dtype == DType::f64 ? DType::f64 : DType::f32};
      const Tensor running_mean = random_tensor({channels}, statistics.dtype, 20, 24);
      const Tensor running_var = random_tensor({channels}, statistics.dtype, 0.5, 2);
      const Tensor grad = random_tensor(shape, dtype);
      for (bool training : {true, false}) {
        for (bool affine : {false, true}) {
          const std::string what = std::string(dtype_name(dtype)) + " " + shape.str() +
                                   (training ? " training" : " eval") + (affine ? " affine" : "");
          const Tensors inputs = {x, running_mean, running_var, affine ? weight : Tensor(), affine ? bias : Tensor()};
          auto forward = [&](const Tensors& in) {
            return batch_norm_forward(in[0], in[1], in[2], in[3], in[4], training, 1e-5);
          };
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).output; }, inputs, 4)) << what;
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).mean; }, inputs)) << what;
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).rstd; }, inputs, 4)) << what;
          if (training) {
            EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return forward(in).var; }, inputs, 4)) << what;
          }
          const NormalizationResult saved = reference([&] { return forward(inputs); });
          auto backward = [&](const Tensors& in) {
            return batch_norm_backward(in[0], in[1], in[2], in[3], in[4], training, affine);
          };
          const Tensors backward_inputs = {grad, x, affine ? weight : Tensor(), saved.mean, saved.rstd};
          EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return backward(in).input; }, backward_inputs, 4))
              << what << " backward";
          if (affine) {
            EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return backward(in).weight; }, backward_inputs, 4))
                << what << " grad weight";
            EXPECT_TRUE(same_on_gpu([&](const Tensors& in) { return backward(in).bias; }, backward_inputs, 4))
                << what << " grad bias";
          }
        }
      }
    }
  }
}

TEST(CudaNormalization, EmptyBatchNormInputs) {
  EMBER_REQUIRE_GPU();
  const Tensor x = zeros({0, 3, 4});
  EXPECT_TRUE(same_on_gpu([](const Tensors& in) { return batch_norm_forward(in[0], {}, {}, {}, {}, true, 1e-5).mean; },
                          {x}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& in) { return batch_norm(in[0], {}, {}, {}, {}, true); }, {x}));
}

// Sums over rows and over batch x spatial merge per-block partials in a fixed
// order: two runs give the same bits.
TEST(CudaNormalization, ParameterGradientsAreDeterministic) {
  EMBER_REQUIRE_GPU();
  const Tensor x = on_gpu_like(random_tensor({20000, 64}, DType::f32));
  const Tensor grad = on_gpu_like(random_tensor({20000, 64}, DType::f32));
  const Tensor weight = on_gpu_like(random_tensor({64}, DType::f32));
  const NormalizationResult saved = layer_norm_forward(x, {64}, weight, {}, 1e-5);
  auto grad_weight = [&] {
    return layer_norm_backward(grad, x, {64}, weight, saved.mean, saved.rstd, true).weight.to(kCPU).to_vector<float>();
  };
  EXPECT_EQ(grad_weight(), grad_weight());
  const Tensor images = on_gpu_like(random_tensor({64, 8, 32, 32}, DType::f32));
  auto batch_mean = [&] { return batch_norm_forward(images, {}, {}, {}, {}, true, 1e-5).mean.to(kCPU).to_vector<float>(); };
  EXPECT_EQ(batch_mean(), batch_mean());
}

TEST(CudaNormalization, GradientsMatchTheCpu) {
  EMBER_REQUIRE_GPU();
  EMBER_REQUIRE_GRADIENT_KERNELS();
  for (DType dtype : kFloatingDTypes) {
    const Tensor x = random_tensor({4, 3, 5}, dtype), weight = random_tensor({5}, dtype, 0.5, 1.5);
    const Tensor bias = random_tensor({5}, dtype), channel_weight = random_tensor({3}, dtype, 0.5, 1.5);
    const Tensor channel_bias = random_tensor({3}, dtype);
    EXPECT_TRUE(same_gradients_on_gpu(
        [](const Tensors& in) { return layer_norm(in[0], {5}, in[1], in[2]); }, {x, weight, bias}))
        << dtype_name(dtype);
    EXPECT_TRUE(same_gradients_on_gpu([](const Tensors& in) { return rms_norm(in[0], {5}, in[1]); }, {x, weight}))
        << dtype_name(dtype);
    EXPECT_TRUE(same_gradients_on_gpu(
        [](const Tensors& in) { return batch_norm(in[0], {}, {}, in[1], in[2], true); }, {x, channel_weight, channel_bias}))
        << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace ember::testing
