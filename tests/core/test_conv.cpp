// conv2d (and its gradient kernels), max_pool2d and avg_pool2d against the reference kernels: every float
// dtype, stride / padding / dilation / groups, bias, non-contiguous inputs,
// bf16 on oneDNN's bf16 kernels against f32, the forced bf16 fallback, tiny
// exact cases and bad input; conv2d_backward (both gradients at once) against
// the single-gradient ops, bit for bit.
#include <limits>

#include "kernels/cpu/onednn.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

const DType kFloatDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

struct ConvCase {
  Shape input, weight;
  Conv2dOptions options;
  bool bias;
};
const ConvCase kConvCases[] = {
    {{1, 1, 5, 5}, {1, 1, 3, 3}, {}, false},
    {{2, 3, 8, 7}, {4, 3, 3, 3}, {.padding = {1, 1}}, true},
    {{2, 4, 9, 9}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .groups = 2}, true},
    {{1, 3, 10, 11}, {5, 3, 3, 3}, {.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 1}}, false},
    {{2, 6, 7, 7}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}, true},  // depthwise
    {{1, 8, 6, 6}, {16, 8, 1, 1}, {}, true},                                // pointwise
    {{3, 2, 4, 4}, {2, 2, 4, 4}, {}, false},                                // kernel covers the input
    {{0, 3, 5, 5}, {2, 3, 3, 3}, {}, true},                                 // empty batch
};

TEST(Conv2d, MatchesReferenceForEveryFloatDtypeAndOption) {
  for (DType dtype : kFloatDTypes) {
    for (const ConvCase& c : kConvCases) {
      Tensor input = random_tensor(c.input, dtype), weight = random_tensor(c.weight, dtype, -1, 1);
      Tensor bias = c.bias ? random_tensor({c.weight[0]}, dtype) : Tensor();
      Tensor expected = reference([&] { return conv2d(input, weight, bias, c.options); });
      for (const Layout& layout : layouts_of(input)) {
        EXPECT_TRUE(all_close(conv2d(layout.tensor, weight, bias, c.options), expected, 2 * tolerance(dtype),
                              2 * tolerance(dtype)))
            << dtype_name(dtype) << " input " << c.input.str() << " (" << layout.name << ") weight " << c.weight.str();
      }
    }
  }
}

// The gradient kernels against the reference in every dtype and option, and
// the reference against the adjoint identities in f64:
//   <conv2d(x, w), g> = <x, backward_input(g, w)> = <w, backward_weight(g, x)>.
TEST(Conv2d, BackwardKernelsMatchReferenceAndTheAdjointIdentities) {
  for (DType dtype : kFloatDTypes) {
    for (const ConvCase& c : kConvCases) {
      Tensor input = random_tensor(c.input, dtype), weight = random_tensor(c.weight, dtype, -1, 1);
      Tensor out = conv2d(input, weight, {}, c.options);
      Tensor grad = random_tensor(out.shape(), dtype);
      std::string what = std::string(dtype_name(dtype)) + " input " + c.input.str() + " weight " + c.weight.str();
      Tensor grad_input = conv2d_backward_input(grad, weight, input.shape(), c.options);
      Tensor grad_weight = conv2d_backward_weight(grad, input, weight.shape(), c.options);
      double tol = 4 * tolerance(dtype);
      EXPECT_TRUE(all_close(grad_input, reference([&] {
                              return conv2d_backward_input(grad, weight, input.shape(), c.options);
                            }), tol, tol)) << what;
      EXPECT_TRUE(all_close(grad_weight, reference([&] {
                              return conv2d_backward_weight(grad, input, weight.shape(), c.options);
                            }), tol, tol)) << what;
      if (dtype != DType::f64) continue;
      double forward = sum(out * grad).item<double>();
      EXPECT_NEAR(sum(input * grad_input).item<double>(), forward, 1e-9 * (1 + std::abs(forward))) << what;
      EXPECT_NEAR(sum(weight * grad_weight).item<double>(), forward, 1e-9 * (1 + std::abs(forward))) << what;
    }
  }
  Tensor grad = zeros({1, 2, 3, 3}), weight = zeros({2, 1, 3, 3});
  EXPECT_EMBER_ERROR(conv2d_backward_input(grad, weight, {1, 1, 6, 6}),
                     "conv2d_backward_input: expected grad_output [1, 2, 4, 4] of dtype float32");
  EXPECT_EMBER_ERROR(conv2d_backward_weight(grad, zeros({1, 3, 5, 5}), {2, 1, 3, 3}),
                     "conv2d_backward_weight: input [1, 3, 5, 5] and weight [2, 1, 3, 3] do not fit");
}

// bf16 on oneDNN's bf16 primitives (blocked layouts, AVX512-BF16 kernels)
// at the channel counts that select them, against the f32 reference on the
// same bf16 values: the kernels accumulate in f32, so the results differ by
// about the final rounding to bf16. Forward, input gradient and weight
// gradient; a first layer (one input channel, plain src), stride, padding,
// groups, batch 1 and non-contiguous inputs. Caught, seen failing: the bf16
// pass given NHWC instead of NCHW plain memory (kernels/cpu/conv.cpp,
// make_conv_layout).
const ConvCase kNetworkConvCases[] = {
    {{3, 1, 28, 28}, {32, 1, 3, 3}, {.padding = {1, 1}}, true},
    {{4, 32, 14, 14}, {64, 32, 3, 3}, {.padding = {1, 1}}, true},
    {{1, 16, 12, 12}, {32, 16, 3, 3}, {.padding = {1, 1}}, false},
    {{2, 16, 15, 13}, {16, 16, 3, 3}, {.stride = {2, 2}, .padding = {1, 1}}, true},
    {{2, 32, 9, 9}, {32, 16, 3, 3}, {.groups = 2}, false},
};

TEST(Conv2d, Bf16KernelsMatchF32ReferenceAtNetworkSizes) {
  const double tol = tolerance(DType::bf16);
  for (const ConvCase& c : kNetworkConvCases) {
    Tensor input = random_tensor(c.input, DType::bf16), weight = random_tensor(c.weight, DType::bf16, -1, 1);
    Tensor bias = c.bias ? random_tensor({c.weight[0]}, DType::bf16) : Tensor();
    Tensor wide_input = input.to(DType::f32), wide_weight = weight.to(DType::f32);
    Tensor wide_bias = c.bias ? bias.to(DType::f32) : Tensor();
    std::string what = "input " + c.input.str() + " weight " + c.weight.str();
    Tensor expected = reference([&] { return conv2d(wide_input, wide_weight, wide_bias, c.options); });
    for (const Layout& layout : layouts_of(input)) {
      Tensor out = conv2d(layout.tensor, weight, bias, c.options);
      EXPECT_EQ(out.dtype(), DType::bf16) << what;
      EXPECT_TRUE(all_close(out.to(DType::f32), expected, tol, tol)) << what << " (" << layout.name << ")";
    }
    Tensor grad = random_tensor(expected.shape(), DType::bf16), wide_grad = grad.to(DType::f32);
    Tensor grad_input = conv2d_backward_input(grad, weight, input.shape(), c.options);
    Tensor grad_weight = conv2d_backward_weight(grad, input, weight.shape(), c.options);
    EXPECT_EQ(grad_input.dtype(), DType::bf16) << what;
    EXPECT_EQ(grad_weight.dtype(), DType::bf16) << what;
    EXPECT_TRUE(all_close(grad_input.to(DType::f32), reference([&] {
                            return conv2d_backward_input(wide_grad, wide_weight, input.shape(), c.options);
                          }), tol, tol)) << what;
    EXPECT_TRUE(all_close(grad_weight.to(DType::f32), reference([&] {
                            return conv2d_backward_weight(wide_grad, wide_input, weight.shape(), c.options);
                          }), tol, tol)) << what;
  }
}

TEST(Conv2d, Bf16FallbackToF32MatchesReference) {
  bool was_enabled = cpu::onednn_bf16_enabled();
  cpu::set_onednn_bf16_enabled(false);
  for (const ConvCase& c : kConvCases) {
    Tensor input = random_tensor(c.input, DType::bf16), weight = random_tensor(c.weight, DType::bf16, -1, 1);
    Tensor bias = c.bias ? random_tensor({c.weight[0]}, DType::bf16) : Tensor();
    EXPECT_TRUE(all_close(conv2d(input, weight, bias, c.options),
                          reference([&] { return conv2d(input, weight, bias, c.options); })))
        << c.input.str() << " weight " << c.weight.str();
  }
  for (const ConvCase& c : kNetworkConvCases) {  // the gradients where the bf16 primitives would run
    Tensor weight = random_tensor(c.weight, DType::bf16, -1, 1), input = random_tensor(c.input, DType::bf16);
    Tensor grad = random_tensor(conv2d(input, weight, {}, c.options).shape(), DType::bf16);
    const double tol = 4 * tolerance(DType::bf16);
    EXPECT_TRUE(all_close(conv2d_backward_input(grad, weight, input.shape(), c.options),
                          reference([&] { return conv2d_backward_input(grad, weight, input.shape(), c.options); }),
                          tol, tol)) << c.input.str() << " weight " << c.weight.str();
    EXPECT_TRUE(all_close(conv2d_backward_weight(grad, input, weight.shape(), c.options),
                          reference([&] { return conv2d_backward_weight(grad, input, weight.shape(), c.options); }),
                          tol, tol)) << c.input.str() << " weight " << c.weight.str();
  }
  Tensor input = random_tensor({2, 3, 6, 6}, DType::bf16);
  Pool2dOptions options{.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  EXPECT_TRUE(all_close(max_pool2d(input, options), reference([&] { return max_pool2d(input, options); })));
  EXPECT_TRUE(all_close(avg_pool2d(input, options), reference([&] { return avg_pool2d(input, options); })));
  cpu::set_onednn_bf16_enabled(was_enabled);
}

// conv2d_backward (both gradients from one grad_output, grad_output reordered
// once on the CPU) against the two single-gradient ops, bit for bit: the same
// oneDNN primitives must see the same bytes. For every mask, each operand
// contiguous or not, and twice per geometry with a fresh grad_output, the
// fused op first, so a pass that read a blocked grad_output left over in a
// cached entry (the previous call's) differs. Among the cases are geometries
// whose two passes want grad_output in different layouts (with avx512_bf16,
// bf16 [2, 3, 8, 7] by [4, 3, 3, 3]: aBcd16b for backward data, plain for
// backward weights' GEMM) and many that want the same one. Caught, seen failing: backward
// weights reading its own blocked grad_output without reordering it
// (kernels/cpu/conv.cpp, conv_backward_both_on_layouts); backward data's
// memory given to backward weights where the layouts differ.
void expect_fused_backward_equals_single_passes(const ConvCase& c, DType dtype, const std::string& what) {
  Tensor input = random_tensor(c.input, dtype), weight = random_tensor(c.weight, dtype, -1, 1);
  const Shape out_shape = conv2d(input, weight, {}, c.options).shape();
  for (int call = 0; call < 2; ++call) {
    Tensor grad = random_tensor(out_shape, dtype);
    Conv2dGradients both = conv2d_backward(grad, input, weight, c.options);
    Tensor grad_input = conv2d_backward_input(grad, weight, input.shape(), c.options);
    Tensor grad_weight = conv2d_backward_weight(grad, input, weight.shape(), c.options);
    EXPECT_TRUE(bitwise_equal(both.input, grad_input)) << what << " call " << call;
    EXPECT_TRUE(bitwise_equal(both.weight, grad_weight)) << what << " call " << call;
    for (const Layout& layout : layouts_of(grad)) {
      both = conv2d_backward(layout.tensor, input, weight, c.options);
      EXPECT_TRUE(bitwise_equal(both.input, grad_input)) << what << " grad_output " << layout.name << " call " << call;
      EXPECT_TRUE(bitwise_equal(both.weight, grad_weight)) << what << " grad_output " << layout.name << " call " << call;
    }
    const std::vector<Layout> inputs = layouts_of(input), weights = layouts_of(weight);
    Conv2dGradients strided = conv2d_backward(grad, inputs.back().tensor, weights.back().tensor, c.options);
    EXPECT_TRUE(bitwise_equal(strided.input, grad_input)) << what << " input " << inputs.back().name;
    EXPECT_TRUE(bitwise_equal(strided.weight, grad_weight)) << what << " weight " << weights.back().name;
    for (Conv2dGradientMask mask : {Conv2dGradientMask{true, false}, {false, true}, {false, false}}) {
      Conv2dGradients some = conv2d_backward(grad, input, weight, c.options, mask);
      EXPECT_TRUE(bitwise_equal(some.input, mask.input ? grad_input : Tensor())) << what << " mask input only";
      EXPECT_TRUE(bitwise_equal(some.weight, mask.weight ? grad_weight : Tensor())) << what << " mask weight only";
    }
  }
}

// A random small convolution: batch 1 to 3, 1 or 2 groups, stride, padding
// and dilation 1 to 2 (padding 0 to 2), kernels 1 to 3, outputs non-empty.
ConvCase random_conv_case() {
  auto in_range = [](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng()); };
  ConvCase c;
  const int64_t groups = in_range(1, 2);
  c.options = {.stride = {in_range(1, 2), in_range(1, 2)}, .padding = {in_range(0, 2), in_range(0, 2)},
               .dilation = {in_range(1, 2), in_range(1, 2)}, .groups = groups};
  const Shape kernel{in_range(1, 3), in_range(1, 3)};
  c.weight = {groups * in_range(1, 3), in_range(1, 3), kernel[0], kernel[1]};
  c.input = {in_range(1, 3), c.weight[1] * groups, (kernel[0] - 1) * c.options.dilation[0] + in_range(1, 6),
             (kernel[1] - 1) * c.options.dilation[1] + in_range(1, 6)};
  return c;
}

TEST(Conv2dBackward, EqualsTheSingleGradientsBitForBit) {
  for (DType dtype : kFloatDTypes) {
    for (const ConvCase& c : kConvCases) {
      expect_fused_backward_equals_single_passes(
          c, dtype, std::string(dtype_name(dtype)) + " input " + c.input.str() + " weight " + c.weight.str());
    }
    for (int i = 0; i < 12; ++i) {
      ConvCase c = random_conv_case();
      expect_fused_backward_equals_single_passes(
          c, dtype, fmt::format("{} random input {} weight {} stride [{}, {}] padding [{}, {}] dilation [{}, {}]",
                                dtype_name(dtype), c.input, c.weight, c.options.stride[0], c.options.stride[1],
                                c.options.padding[0], c.options.padding[1], c.options.dilation[0],
                                c.options.dilation[1]));
    }
  }
}

// At the sizes that pick oneDNN's blocked layouts (the CNN's second
// convolution, batch 64, among them): f32, and bf16 on oneDNN's bf16
// primitives and on the fallback through f32; and the reference kernel's
// fused op (the two passes in turn) against its single ones.
TEST(Conv2dBackward, EqualsTheSingleGradientsAtNetworkSizes) {
  std::vector<ConvCase> cases(std::begin(kNetworkConvCases), std::end(kNetworkConvCases));
  cases.push_back({{64, 32, 14, 14}, {64, 32, 3, 3}, {.padding = {1, 1}}, false});
  const bool was_enabled = cpu::onednn_bf16_enabled();
  for (const ConvCase& c : cases) {
    const std::string what = "input " + c.input.str() + " weight " + c.weight.str();
    expect_fused_backward_equals_single_passes(c, DType::f32, "f32 " + what);
    expect_fused_backward_equals_single_passes(c, DType::bf16, "bf16 " + what);
    cpu::set_onednn_bf16_enabled(false);
    expect_fused_backward_equals_single_passes(c, DType::bf16, "bf16 fallback " + what);
    cpu::set_onednn_bf16_enabled(was_enabled);
    if (c.input[0] > 4) continue;  // the reference loops: gradcheck-sized problems
    Tensor input = random_tensor(c.input, DType::f32), weight = random_tensor(c.weight, DType::f32, -1, 1);
    Tensor grad = random_tensor(conv2d(input, weight, {}, c.options).shape(), DType::f32);
    reference([&] {
      Conv2dGradients both = conv2d_backward(grad, input, weight, c.options);
      EXPECT_TRUE(bitwise_equal(both.input, conv2d_backward_input(grad, weight, input.shape(), c.options))) << what;
      EXPECT_TRUE(bitwise_equal(both.weight, conv2d_backward_weight(grad, input, weight.shape(), c.options))) << what;
      return 0;
    });
  }
}

// conv2d's autograd node takes the fused op when both gradients are needed:
// the gradients equal the single ops' (caught, seen failing: the recorder
// returning the fused op's two gradients in each other's slots), and one
// gradient alone still works.
TEST(Conv2dBackward, AutogradGivesTheSingleOpsGradients) {
  const Conv2dOptions options{.stride = {2, 1}, .padding = {1, 1}, .groups = 2};
  Tensor input = random_tensor({2, 4, 7, 6}, DType::f32), weight = random_tensor({6, 2, 3, 3}, DType::f32);
  Tensor grad = random_tensor({2, 6, 4, 6}, DType::f32);
  for (bool input_grad : {true, false}) {
    Tensor x = input.clone().requires_grad_(input_grad), w = weight.clone().requires_grad_();
    sum(conv2d(x, w, {}, options) * grad).backward();
    EXPECT_TRUE(bitwise_equal(w.grad(), conv2d_backward_weight(grad, input, weight.shape(), options)));
    if (input_grad) {
      EXPECT_TRUE(bitwise_equal(x.grad(), conv2d_backward_input(grad, weight, input.shape(), options)));
    }
  }
}

TEST(Conv2dBackward, BadInputsNameTheOpAndValues) {
  Tensor grad = zeros({1, 2, 4, 4}), input = zeros({1, 1, 6, 6}), weight = zeros({2, 1, 3, 3});
  EXPECT_EMBER_ERROR(conv2d_backward(grad, input, Tensor()), "conv2d_backward: undefined weight");
  EXPECT_EMBER_ERROR(conv2d_backward(grad, Tensor(), weight), "conv2d_backward: undefined input");
  EXPECT_EMBER_ERROR(conv2d_backward(grad, input, weight.to(DType::f64)),
                     "conv2d_backward: expected input and weight of one dtype and device, got float32 on cpu and "
                     "float64 on cpu");
  EXPECT_EMBER_ERROR(conv2d_backward(zeros({1, 2, 3, 3}), input, weight),
                     "conv2d_backward: expected grad_output [1, 2, 4, 4] of dtype float32 on cpu, got [1, 2, 3, 3]");
  EXPECT_EMBER_ERROR(conv2d_backward(grad.to(DType::bf16), input, weight),
                     "conv2d_backward: expected grad_output [1, 2, 4, 4] of dtype float32 on cpu, got [1, 2, 4, 4] of "
                     "bfloat16");
  EXPECT_EMBER_ERROR(conv2d_backward(grad, zeros({1, 3, 6, 6}), weight),
                     "conv2d_backward: input [1, 3, 6, 6] and weight [2, 1, 3, 3] do not fit a convolution with groups 1");
  EXPECT_EMBER_ERROR(conv2d_backward(grad, zeros({1, 6, 6}), weight), "conv2d_backward: input [1, 6, 6] and weight");
  EXPECT_EMBER_ERROR(conv2d_backward(grad, input, weight, {.stride = {0, 1}}),
                     "conv2d_backward: stride must be positive, got [0, 1]");
  EXPECT_EMBER_ERROR(conv2d_backward(grad.to(DType::i32), input.to(DType::i32), weight.to(DType::i32)),
                     "conv2d_backward: expected grad_output [1, 2, 4, 4] of dtype int32");
}

TEST(Conv2d, ExactHandCase) {
  // A 3x3 input of 1..9 with a 2x2 kernel of ones: each output sums a 2x2 block.
  for (DType dtype : kFloatDTypes) {
    Tensor input = arange(1, 10).to(dtype).view({1, 1, 3, 3}), weight = ones({1, 1, 2, 2}, {.dtype = dtype});
    EXPECT_EQ(conv2d(input, weight).to_vector<double>(), (std::vector<double>{12, 16, 24, 28})) << dtype_name(dtype);
    Tensor padded = conv2d(input, weight, ones({1}, {.dtype = dtype}), {.stride = {2, 2}, .padding = {1, 1}});
    EXPECT_EQ(padded.to_vector<double>(), (std::vector<double>{2, 6, 12, 29})) << dtype_name(dtype);
  }
}

struct PoolCase {
  Shape input;
  Pool2dOptions options;
};
const PoolCase kPoolCases[] = {
    {{1, 1, 4, 4}, {}},
    {{2, 3, 7, 9}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
    {{2, 3, 7, 9}, {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false}},
    {{1, 2, 8, 5}, {.kernel_size = {2, 3}, .stride = {1, 2}, .padding = {1, 1}}},
    {{1, 2, 8, 5}, {.kernel_size = {4, 2}, .stride = {3, 1}, .padding = {2, 0}, .count_include_pad = false}},
    {{0, 2, 4, 4}, {}},
};

TEST(Pool2d, MatchesReferenceForEveryFloatDtypeAndOption) {
  for (DType dtype : kFloatDTypes) {
    for (const PoolCase& c : kPoolCases) {
      Tensor input = random_tensor(c.input, dtype);
      Tensor expected_max = reference([&] { return max_pool2d(input, c.options); });
      Tensor expected_avg = reference([&] { return avg_pool2d(input, c.options); });
      for (const Layout& layout : layouts_of(input)) {
        EXPECT_TRUE(all_close(max_pool2d(layout.tensor, c.options), expected_max))
            << "max " << dtype_name(dtype) << " " << c.input.str() << " (" << layout.name << ")";
        EXPECT_TRUE(all_close(avg_pool2d(layout.tensor, c.options), expected_avg))
            << "avg " << dtype_name(dtype) << " " << c.input.str() << " (" << layout.name << ")";
      }
    }
  }
}

// Max-pool backward against the reference, exactly, unpadded (the CPU fast
// paths, in every dtype: 2x2 windows at stride 2, four at a time in f32 and
// bf16, and any other) and padded, with ties and nans in the windows, on each
// layout of the input and of the gradient (the entry makes them contiguous).
// The widths give the 2x2 path whole vectors only (8), vectors overlapping at
// the row's end with an odd trailing column (21) and the scalar loop alone
// (5); a window's gradient sent to a wrong element of it fails here. Mutation
// seen caught: in the bf16 vector path, the windows' right elements taken
// from the low halves of the lanes (left and right swapped on load).
TEST(Pool2d, MaxPoolBackwardMatchesReferenceWithTiesAndNans) {
  const Pool2dOptions kOptions[] = {{.kernel_size = {2, 2}},
                                    {.kernel_size = {3, 2}, .stride = {1, 2}},
                                    {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}};
  for (DType dtype : kFloatDTypes) {
    for (int64_t width : {8, 21, 5}) {
      Tensor input = random_tensor({2, 3, 9, width}, DType::i64, -2, 2).to(dtype);  // few values: many ties
      input.select(0, 1).select(0, 2).fill_(std::nan(""));
      input.select(0, 0).select(0, 1).select(0, 4).fill_(std::nan(""));
      input.select(0, 1).select(0, 0).select(1, 3).fill_(std::nan(""));  // a column: nans at every window position
      for (const Pool2dOptions& options : kOptions) {
        Tensor grad = random_tensor(max_pool2d(input, options).shape(), dtype);
        Tensor expected = reference([&] { return max_pool2d_backward(grad, input, options); });
        for (const Layout& input_layout : layouts_of(input))
          for (const Layout& grad_layout : layouts_of(grad))
            EXPECT_TRUE(
                all_close(max_pool2d_backward(grad_layout.tensor, input_layout.tensor, options), expected, 0, 0))
                << dtype_name(dtype) << " width " << width << " kernel " << options.kernel_size[0] << "x"
                << options.kernel_size[1] << " input " << input_layout.name << " grad " << grad_layout.name;
      }
    }
  }
}

// A window holding a nan gives nan, wherever the nan sits in it, as in PyTorch
// and the reference (found by the op fuzzer, tests/fuzz/README_ops.md: oneDNN's
// max instruction returned the window's other values). Mutation seen caught:
// the nan test dropped from the f16 and bf16 scan of the input's bits.
TEST(Pool2d, MaxPoolPropagatesNansFromAnyPositionInTheWindow) {
  const Pool2dOptions kOptions[] = {{.kernel_size = {2, 2}},
                                    {.kernel_size = {3, 2}, .stride = {1, 2}},
                                    {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}};
  for (DType dtype : kFloatDTypes) {
    Tensor input = random_tensor({2, 3, 6, 6}, dtype);
    input.select(0, 0).select(0, 0).select(0, 0).select(0, 0).fill_(std::nan(""));  // a window's first element
    input.select(0, 0).select(0, 1).select(0, 3).select(0, 3).fill_(std::nan(""));  // a window's last element
    input.select(0, 1).select(0, 2).select(0, 4).select(0, 1).fill_(std::nan(""));
    for (const Pool2dOptions& options : kOptions) {
      Tensor expected = reference([&] { return max_pool2d(input, options); });
      EXPECT_GT(sum(isnan(expected)).item<int64_t>(), 0);
      EXPECT_TRUE(all_close(max_pool2d(input, options), expected, 0, 0))
          << dtype_name(dtype) << " kernel " << options.kernel_size[0] << "x" << options.kernel_size[1];
    }
  }
}

// A lone nan anywhere in the input reaches its window's output: the forward
// scans the whole input for nans (eight f32 or bf16/f16 elements at a time,
// then four, then one) before fixing oneDNN's windows, and one nan missed is
// a window without it. Mutation seen caught: the f32 scan's eight-element
// step testing only its first four elements for nans.
TEST(Pool2d, MaxPoolFindsALoneNanAnywhereInTheInput) {
  for (DType dtype : kFloatDTypes) {
    const Tensor clean = random_tensor({1, 2, 3, 10}, dtype);  // 60 elements: every step of the scan
    for (int64_t at = 0; at < clean.numel(); ++at) {
      Tensor input = clean.clone();
      input.view({clean.numel()}).select(0, at).fill_(std::nan(""));
      Tensor expected = reference([&] { return max_pool2d(input, {}); });
      EXPECT_TRUE(all_close(max_pool2d(input, {}), expected, 0, 0)) << dtype_name(dtype) << " nan at " << at;
    }
  }
}

// A window of -infs gives -inf, as in PyTorch and the reference (found by the
// op fuzzer: oneDNN starts its max from the lowest finite value and gave
// -FLT_MAX); a window with one finite value among -infs gives that value.
TEST(Pool2d, MaxPoolOfMinusInfinitiesIsMinusInfinity) {
  for (DType dtype : kFloatDTypes) {
    Tensor input = full({1, 2, 4, 4}, -std::numeric_limits<double>::infinity(), {.dtype = dtype});
    input.select(1, 1).select(1, 0).select(1, 0).fill_(2.5);
    for (const Pool2dOptions& options : {Pool2dOptions{.kernel_size = {1, 1}}, Pool2dOptions{.kernel_size = {2, 2}}}) {
      Tensor expected = reference([&] { return max_pool2d(input, options); });
      Tensor result = max_pool2d(input, options);
      EXPECT_TRUE(all_close(result, expected, 0, 0)) << dtype_name(dtype);
      EXPECT_EQ(result.select(1, 1).select(1, 0).select(1, 0).item<double>(), 2.5) << dtype_name(dtype);
      EXPECT_EQ(result.select(1, 0).select(1, 0).select(1, 0).item<double>(), -std::numeric_limits<double>::infinity())
          << dtype_name(dtype);
    }
    // An input with no rows is refused, as in PyTorch: its padded windows would
    // hold only padding (the op fuzzer found -FLT_MAX there, then a oneDNN failure).
    EXPECT_EMBER_ERROR(max_pool2d(zeros({1, 2, 0, 3}, {.dtype = dtype}), {.kernel_size = {4, 4}, .padding = {2, 2}}),
                       "max_pool2d: expected non-empty channel and spatial dims in input [N, C, H, W], got [1, 2, 0, 3]");
  }
}

// Options as large as int64 allows are errors, never wrapped arithmetic (the
// op fuzzer found max_pool2d's padding check overflowing, UBSan).
TEST(Pool2d, HugeOptionsAreErrorsNotOverflows) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  Tensor input = random_tensor({1, 1, 4, 4}, DType::f32);
  EXPECT_EMBER_ERROR(max_pool2d(input, {.kernel_size = {2, 2}, .padding = {huge, 0}}),
                     "max_pool2d: padding [9223372036854775807, 0] must be at most half of kernel_size [2, 2]");
  EXPECT_EMBER_ERROR(max_pool2d(input, {.kernel_size = {huge, 1}, .padding = {huge / 2, 0}}),
                     "max_pool2d: input size 4 with padding 4611686018427387903, kernel 9223372036854775807 and "
                     "dilation 1 overflows int64");
  Tensor weight = random_tensor({1, 1, 3, 3}, DType::f32);
  EXPECT_EMBER_ERROR(conv2d(input, weight, {}, {.padding = {huge, 0}}), "conv2d: input size 4 with padding");
  EXPECT_EMBER_ERROR(conv2d(input, weight, {}, {.dilation = {huge, 1}}), "dilation 9223372036854775807 overflows int64");
  // A stride far beyond the input gives one window, as a stride of 1 would
  // (oneDNN refused such strides with its own exception over 5 rows, and over
  // 3 x 4 accepted them and averaged wrongly: 0 for -0.3125, found by the op
  // fuzzer; the kernel now hands oneDNN a stride of 1 where one window fits).
  const int64_t far = std::numeric_limits<int32_t>::max();
  for (const Pool2dOptions& options : {Pool2dOptions{.kernel_size = {4, 4}, .stride = {4, far}, .padding = {2, 2}},
                                       Pool2dOptions{.kernel_size = {4, 4}, .stride = {far, far}, .padding = {2, 2}}}) {
    for (Shape shape : {Shape{2, 3, 5, 1}, Shape{2, 4, 3, 4}}) {
      Tensor image = random_tensor(shape, DType::f32);
      EXPECT_TRUE(all_close(avg_pool2d(image, options), reference([&] { return avg_pool2d(image, options); })))
          << fmt::format("{}", shape);
      EXPECT_TRUE(all_close(max_pool2d(image, options), reference([&] { return max_pool2d(image, options); })))
          << fmt::format("{}", shape);
    }
  }
  EXPECT_TRUE(all_close(conv2d(input, weight, {}, {.stride = {far, far}}),
                        reference([&] { return conv2d(input, weight, {}, {.stride = {far, far}}); })));
}

// A dilation along a kernel dim of 1, or a stride along an output dim of 1,
// changes nothing, however large: the forward and both gradients equal those
// with 1 there, in every float dtype (the third case's one window ends a
// column before the input does: the right padding is -1). Found by the op fuzzer: a 1x1 kernel
// with dilation [1, 2^63 - 1] reached oneDNN, which threw its own exception
// (the crash a non-ember exception is). Mutation caught: drop_inert_options
// (core/ops/conv.cpp) not called.
TEST(Conv2d, InertDilationAndStrideChangeNothingHoweverLarge) {
  const int64_t huge = std::numeric_limits<int64_t>::max();
  struct Inert {
    Shape input, weight;
    Conv2dOptions options, plain;
  };
  const Inert cases[] = {
      {{2, 4, 5, 2}, {2, 2, 1, 1}, {.stride = {2, 2}, .padding = {0, 2}, .dilation = {1, huge}, .groups = 2},
       {.stride = {2, 2}, .padding = {0, 2}, .groups = 2}},
      {{1, 2, 3, 6}, {3, 2, 3, 2}, {.stride = {huge, 2}, .dilation = {1, 3}}, {.stride = {1, 2}, .dilation = {1, 3}}},
      {{1, 2, 4, 6}, {6, 1, 3, 3}, {.stride = {1, huge}, .dilation = {1, 2}, .groups = 2},
       {.stride = {1, 2}, .dilation = {1, 2}, .groups = 2}},
  };
  for (DType dtype : kFloatDTypes)
    for (const Inert& c : cases) {
      SCOPED_TRACE(fmt::format("{} input {} weight {}", dtype_name(dtype), c.input, c.weight));
      Tensor input = random_tensor(c.input, dtype), weight = random_tensor(c.weight, dtype, -1, 1);
      Tensor bias = random_tensor({c.weight[0]}, dtype);
      Tensor out = conv2d(input, weight, bias, c.options);
      EXPECT_TRUE(all_close(out, conv2d(input, weight, bias, c.plain), 0, 0));
      Tensor grad_output = random_tensor(out.shape(), dtype);
      Conv2dGradients grads = conv2d_backward(grad_output, input, weight, c.options);
      Conv2dGradients plain = conv2d_backward(grad_output, input, weight, c.plain);
      EXPECT_TRUE(all_close(grads.input, plain.input, 0, 0));
      EXPECT_TRUE(all_close(grads.weight, plain.weight, 0, 0));
    }
}

// Options oneDNN bounds more tightly than the op's output-size arithmetic (a
// stride of 2^41 over a padding of 2^40 around 2 columns: two windows of
// padding only) raise an ember::Error naming the op and the geometry, not
// oneDNN's own exception, for the forward and both gradients.
TEST(Conv2d, OptionsPastOnednnsBoundsAreEmberErrors) {
  Tensor input = random_tensor({1, 1, 2, 2}, DType::f32), weight = random_tensor({1, 1, 1, 1}, DType::f32);
  const Conv2dOptions options{.stride = {1, int64_t(1) << 41}, .padding = {0, int64_t(1) << 40}};
  const std::string geometry =
      "convolution (input [1, 1, 2, 2], weight [1, 1, 1, 1], stride [1, 2199023255552], padding [0, 1099511627776]";
  EXPECT_EMBER_ERROR(conv2d(input, weight, {}, options), "conv2d: oneDNN cannot run this float32 " + geometry);
  Tensor grad_output = random_tensor({1, 1, 2, 2}, DType::f32);
  EXPECT_EMBER_ERROR(conv2d_backward_input(grad_output, weight, input.shape(), options),
                     "conv2d_backward_input: oneDNN cannot run this float32 " + geometry);
  EXPECT_EMBER_ERROR(conv2d_backward_weight(grad_output, input, weight.shape(), options),
                     "conv2d_backward_weight: oneDNN cannot run this float32 " + geometry);
}

TEST(Pool2d, PaddingIsMinusInfinityForMaxAndCountedOnlyWhenAskedForAverage) {
  for (DType dtype : kFloatDTypes) {
    Tensor input = full({1, 1, 2, 2}, -3.0, {.dtype = dtype});
    Pool2dOptions options{.kernel_size = {2, 2}, .stride = {1, 1}, .padding = {1, 1}};
    EXPECT_EQ(max_pool2d(input, options).to_vector<double>(), std::vector<double>(9, -3.0)) << dtype_name(dtype);
    // Corner windows hold one real element of four, edges two, the centre four.
    EXPECT_EQ(avg_pool2d(input, options).to_vector<double>(),
              (std::vector<double>{-0.75, -1.5, -0.75, -1.5, -3, -1.5, -0.75, -1.5, -0.75}))
        << dtype_name(dtype);
    options.count_include_pad = false;
    EXPECT_EQ(avg_pool2d(input, options).to_vector<double>(), std::vector<double>(9, -3.0)) << dtype_name(dtype);
  }
}

TEST(Conv2d, BadInputsNameTheOpAndValues) {
  EXPECT_EMBER_ERROR(conv2d(ones({1, 5, 8, 8}), ones({8, 3, 3, 3}), {}, {.groups = 2}),
                     "conv2d: expected input [N, C, H, W] with C = 6 for weight [8, 3, 3, 3] and groups 2, got [1, 5, 8, 8]");
  EXPECT_EMBER_ERROR(conv2d(ones({5, 8, 8}), ones({8, 5, 3, 3})), "conv2d: expected input [N, C, H, W], got [5, 8, 8]");
  EXPECT_EMBER_ERROR(conv2d(ones({1, 3, 8, 8}, {.dtype = DType::i32}), ones({2, 3, 3, 3}, {.dtype = DType::i32})),
                     "conv2d: expected a floating point input, got int32");
  EXPECT_EMBER_ERROR(conv2d(ones({1, 3, 8, 8}), ones({2, 3, 3, 3}, {.dtype = DType::f64})),
                     "conv2d: expected input and weight of one dtype and device, got float32");
  EXPECT_EMBER_ERROR(conv2d(ones({1, 3, 8, 8}), ones({2, 3, 3, 3}), ones({3})), "conv2d: expected bias [2], got [3]");
  EXPECT_EMBER_ERROR(conv2d(ones({1, 4, 8, 8}), ones({3, 2, 3, 3}), {}, {.groups = 2}),
                     "conv2d: weight [3, 2, 3, 3] has 3 output channels, not divisible by groups 2");
  EXPECT_EMBER_ERROR(conv2d(ones({1, 3, 2, 2}), ones({2, 3, 3, 3})), "conv2d: input [1, 3, 2, 2] with padding [0, 0] is smaller");
  EXPECT_EMBER_ERROR(conv2d(ones({1, 3, 8, 8}), ones({2, 3, 3, 3}), {}, {.stride = {0, 1}}),
                     "conv2d: stride must be positive, got [0, 1]");
  EXPECT_EMBER_ERROR(max_pool2d(ones({1, 1, 4, 4}), {.kernel_size = {2, 2}, .padding = {2, 0}}),
                     "max_pool2d: padding [2, 0] must be at most half of kernel_size [2, 2]");
  EXPECT_EMBER_ERROR(avg_pool2d(ones({1, 4, 4}), {}), "avg_pool2d: expected input [N, C, H, W], got [1, 4, 4]");
  EXPECT_EMBER_ERROR(max_pool2d(ones({1, 1, 4, 4}, {.dtype = DType::i64}), {}),
                     "max_pool2d: expected a floating point input, got int64");
}

}  // namespace
}  // namespace ember::testing
