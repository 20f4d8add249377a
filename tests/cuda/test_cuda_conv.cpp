// Convolution (cuDNN) and pooling on the GPU against the CPU oracle: every
// floating dtype, strides, padding, dilation, groups, bias, gradients, and
// max pooling's NaN and tie rules. Label `cuda`: skips without a GPU.
#include "cuda_compare.h"

namespace ember::testing {
namespace {

constexpr DType kFloatingTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

struct ConvCase {
  Shape input, weight;
  Conv2dOptions options;
};

const ConvCase kConvCases[] = {
    {{2, 3, 7, 6}, {4, 3, 3, 3}, {}},
    {{1, 4, 9, 9}, {6, 2, 3, 3}, {.stride = {2, 1}, .padding = {1, 2}, .groups = 2}},
    {{2, 2, 8, 8}, {3, 2, 2, 3}, {.stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 1}}},
    {{1, 1, 5, 5}, {1, 1, 1, 1}, {}},
};

TEST(CudaConv, ForwardMatchesTheOracle) {
  EMBER_REQUIRE_GPU();
  for (DType dtype : kFloatingTypes) {
    for (const ConvCase& c : kConvCases) {
      Tensor input = random_tensor(c.input, dtype), weight = random_tensor(c.weight, dtype);
      Tensor bias = random_tensor({c.weight[0]}, dtype);
      Conv2dOptions options = c.options;
      // Sums of up to 27 products: a few roundings of the dtype.
      EXPECT_TRUE(same_on_gpu([options](const Tensors& x) { return conv2d(x[0], x[1], x[2], options); },
                              {input, weight, bias}, 8))
          << dtype_name(dtype) << " input " << c.input.str();
      EXPECT_TRUE(same_on_gpu([options](const Tensors& x) { return conv2d(x[0], x[1], Tensor(), options); },
                              {input, weight}, 8));
    }
  }
}

TEST(CudaConv, GradientsMatchTheOracle) {
  EMBER_REQUIRE_GPU();
  for (const ConvCase& c : kConvCases) {
    Tensor input = random_tensor(c.input, DType::f32), weight = random_tensor(c.weight, DType::f32);
    Tensor bias = random_tensor({c.weight[0]}, DType::f32);
    Conv2dOptions options = c.options;
    EXPECT_TRUE(same_gradients_on_gpu([options](const Tensors& x) { return conv2d(x[0], x[1], x[2], options); },
                                      {input, weight, bias}, 16))
        << "input " << c.input.str();
  }
}

TEST(CudaPool, ForwardAndBackwardMatchTheOracle) {
  EMBER_REQUIRE_GPU();
  const Pool2dOptions cases[] = {{}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}},
                                 {.kernel_size = {3, 2}, .stride = {1, 2}, .padding = {1, 0}, .count_include_pad = false}};
  for (DType dtype : kFloatingTypes) {
    for (const Pool2dOptions& options : cases) {
      Tensor input = random_tensor({2, 3, 7, 8}, dtype);
      EXPECT_TRUE(same_on_gpu([options](const Tensors& x) { return max_pool2d(x[0], options); }, {input}))
          << dtype_name(dtype);
      EXPECT_TRUE(same_on_gpu([options](const Tensors& x) { return avg_pool2d(x[0], options); }, {input}, 2))
          << dtype_name(dtype);
    }
  }
  for (const Pool2dOptions& options : cases) {
    Tensor input = random_tensor({2, 2, 6, 7}, DType::f32);
    EXPECT_TRUE(same_gradients_on_gpu([options](const Tensors& x) { return max_pool2d(x[0], options); }, {input}));
    EXPECT_TRUE(same_gradients_on_gpu([options](const Tensors& x) { return avg_pool2d(x[0], options); }, {input}));
  }
}

TEST(CudaPool, MaxPoolingTiesAndNansFollowTheCpu) {
  EMBER_REQUIRE_GPU();
  // Every element equal: each window's gradient goes to its first element only,
  // and overlapping windows add up on the elements they share.
  Tensor ties = ones({1, 1, 5, 5});
  Pool2dOptions overlapping{.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}};
  EXPECT_TRUE(same_gradients_on_gpu([overlapping](const Tensors& x) { return max_pool2d(x[0], overlapping); }, {ties}));
  Tensor with_nan = random_tensor({1, 1, 4, 4}, DType::f32);
  with_nan.select(2, 1).select(2, 2).fill_(std::nan(""));
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return max_pool2d(x[0], {}); }, {with_nan}));
  EXPECT_TRUE(same_on_gpu([](const Tensors& x) { return max_pool2d_backward(ones({1, 1, 2, 2}).to(x[0].device()), x[0], {}); },
                          {with_nan}));
}

}  // namespace
}  // namespace ember::testing
