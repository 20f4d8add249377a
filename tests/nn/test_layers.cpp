// The layers: each forward against a composite of core ops or hand values,
// default initialisation against PyTorch's bounds, gradients by finite
// differences in f64 (autograd::gradcheck), and the printed form.
#include <cmath>

#include "support/test_support.h"

namespace ember {
namespace {

using testing::all_close;
using V = const std::vector<Tensor>&;
namespace F = nn::functional;

void expect_gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs) {
  autograd::GradcheckResult result = autograd::gradcheck(fn, inputs);
  EXPECT_TRUE(result.ok) << result.report;
}

Tensor f64(const Shape& shape) { return randn(shape, {.dtype = DType::f64}); }

TEST(Linear, ForwardIsOneAddmmOverTheLeadingDims) {
  nn::Linear linear(5, 3);
  Tensor x = randn({4, 5});
  Tensor expected = matmul(x, linear.weight.t()) + linear.bias;
  EXPECT_TRUE(all_close(linear(x), expected, 1e-5, 1e-6));
  // [2, 4, 5] -> [2, 4, 3], the same rows.
  Tensor batched = randn({2, 4, 5});
  Tensor out = linear(batched);
  EXPECT_EQ(out.shape(), (Shape{2, 4, 3}));
  EXPECT_TRUE(all_close(out.select(0, 1), linear(batched.select(0, 1)), 1e-5, 1e-6));
  // A non-contiguous input and a 1-d one.
  Tensor transposed = randn({5, 4}).t();
  EXPECT_TRUE(all_close(linear(transposed), linear(transposed.contiguous()), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(linear(x.select(0, 2)), expected.select(0, 2), 1e-5, 1e-6));
  nn::Linear no_bias(5, 3, {.bias = false});
  EXPECT_FALSE(no_bias.bias.defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  EXPECT_TRUE(all_close(no_bias(x), matmul(x, no_bias.weight.t()), 1e-5, 1e-6));
  EXPECT_EMBER_ERROR(linear(randn({4, 6})), "does not end in in_features 5");
  EXPECT_EQ(no_bias.str(), "Linear(in_features=5, out_features=3, bias=False)");
  // in_features 0 on a batched input: reshape({-1, 0}) could not count the
  // rows ("shape [-1, 0] is invalid"); PyTorch gives the bias on every row.
  // Mutation caught: the rows reshaped with -1.
  nn::Linear empty_in(0, 4);
  EXPECT_TRUE(all_close(empty_in(zeros({2, 3, 0})), empty_in.bias.expand({2, 3, 4}), 0, 0));
}

TEST(Linear, DefaultInitIsPyTorchs) {
  // kaiming_uniform_(a = sqrt(5)) gives U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias the same bound.
  nn::Linear linear(400, 300);
  double bound = 1.0 / std::sqrt(400.0);
  EXPECT_LE(max(abs(linear.weight)).item<double>(), bound);
  EXPECT_GT(max(abs(linear.weight)).item<double>(), 0.99 * bound);
  EXPECT_NEAR(std(linear.weight).item<double>(), bound / std::sqrt(3.0), 0.01 * bound);
  EXPECT_NEAR(mean(linear.weight).item<double>(), 0.0, 0.01 * bound);
  EXPECT_LE(max(abs(linear.bias)).item<double>(), bound);
  // A given generator makes it reproducible.
  Generator a(7), b(7);
  nn::Linear first(3, 2, {.generator = &a}), second(3, 2, {.generator = &b});
  EXPECT_TRUE(all_close(first.weight, second.weight, 0, 0));
  EXPECT_TRUE(all_close(first.bias, second.bias, 0, 0));
}

TEST(Linear, Gradients) {
  expect_gradcheck([](V x) { return F::linear(x[0], x[1], x[2]); }, {f64({3, 4}), f64({2, 4}), f64({2})});
  expect_gradcheck([](V x) { return F::linear(x[0], x[1], x[2]); }, {f64({2, 3, 4}), f64({2, 4}), f64({2})});
  expect_gradcheck([](V x) { return F::linear(x[0], x[1]); }, {f64({3, 4}), f64({2, 4})});
  // Through the module: its parameters receive the gradients that the functional form gives.
  nn::Linear linear(4, 2, {.dtype = DType::f64});
  Tensor x = f64({3, 4});
  sum(linear(x)).backward();
  EXPECT_TRUE(all_close(linear.bias.grad(), full({2}, 3.0, {.dtype = DType::f64})));
  EXPECT_TRUE(all_close(linear.weight.grad(), sum(x, {0}, true).expand({2, 4})));
}

TEST(Embedding, LooksUpRowsAndInitialisesStandardNormal) {
  nn::Embedding embedding(10, 3);
  Tensor indices = from_vector<int64_t>({2, 0, 9, 2}, {2, 2});
  Tensor out = embedding(indices);
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(all_close(out.select(0, 1).select(0, 1), embedding.weight.select(0, 2), 0, 0));
  EXPECT_EQ(embedding.str(), "Embedding(10, 3)");
  nn::Embedding large(1000, 500);
  EXPECT_NEAR(mean(large.weight).item<double>(), 0.0, 0.01);
  EXPECT_NEAR(std(large.weight).item<double>(), 1.0, 0.01);
  // Gradient: each row gets the sum of the output gradients that looked it up.
  sum(embedding(indices)).backward();
  EXPECT_TRUE(all_close(embedding.weight.grad().select(0, 2), full({3}, 2.0)));
  EXPECT_TRUE(all_close(embedding.weight.grad().select(0, 1), zeros({3})));
}

TEST(Embedding, PaddingRowStartsAtZeroAndGetsNoGradient) {
  nn::Embedding embedding(6, 2, {.padding_idx = -2});  // row 4
  EXPECT_EQ(embedding.padding_idx, 4);
  EXPECT_TRUE(all_close(embedding.weight.select(0, 4), zeros({2}), 0, 0));
  EXPECT_EQ(embedding.str(), "Embedding(6, 2, padding_idx=4)");
  nn::init::ones_(embedding.weight);  // the forward still reads the row's value
  Tensor indices = from_vector<int64_t>({4, 1, 4, 0});
  Tensor out = embedding(indices);
  EXPECT_TRUE(all_close(out, ones({4, 2}), 0, 0));
  sum(out * 3.0).backward();
  EXPECT_TRUE(all_close(embedding.weight.grad().select(0, 4), zeros({2}), 0, 0));
  EXPECT_TRUE(all_close(embedding.weight.grad().select(0, 1), full({2}, 3.0), 0, 0));
  // Only the lookup's contribution is blocked: another use of the weight still reaches the row.
  embedding.zero_grad();
  sum(embedding(indices) + embedding.weight.select(0, 4)).backward();
  EXPECT_TRUE(all_close(embedding.weight.grad().select(0, 4), full({2}, 4.0), 0, 0));
  EXPECT_EMBER_ERROR(nn::Embedding(6, 2, {.padding_idx = 6}), "padding_idx 6 must be within num_embeddings 6");
  // The gradient with respect to the output is whole at padding positions
  // too (a saliency map, an embedding attack): PyTorch blocks only the
  // weight's. Catches: a hook zeroing the output's gradient there ([0, 0, 3,
  // 3, 0, 0, 3, 3] from grad()).
  Tensor looked_up = embedding(indices);
  EXPECT_EQ(autograd::grad({sum(looked_up * 3.0)}, {looked_up})[0].to_vector<float>(), std::vector<float>(8, 3.0f));
  // An infinite gradient at a padding position made the row's gradient NaN
  // (0 * inf); PyTorch's is exactly 0. Mutation caught: the hook multiplying
  // by the mask instead of where().
  embedding.zero_grad();
  embedding(indices).backward(from_vector<float>({INFINITY, 1, 2, 2, NAN, 3, 1, 1}, {4, 2}));
  EXPECT_TRUE(all_close(embedding.weight.grad().select(0, 4), zeros({2}), 0, 0));
}

// The functional form counts a negative padding_idx from the end and refuses
// one past the rows, as PyTorch's F.embedding. Catches: ne(input, -1) (the
// padding row trained, its gradient [2, 2, 2]) and an index 7 of 5 rows taken.
TEST(Embedding, FunctionalPaddingIndexCountsFromTheEnd) {
  Tensor weight = ones({5, 3}).requires_grad_(true);
  sum(F::embedding(from_vector<int64_t>({0, 4, 4}), weight, -1)).backward();
  EXPECT_TRUE(all_close(weight.grad().select(0, 4), zeros({3}), 0, 0));
  EXPECT_TRUE(all_close(weight.grad().select(0, 0), ones({3}), 0, 0));
  EXPECT_EMBER_ERROR(F::embedding(from_vector<int64_t>({0}), ones({5, 3}), 7),
                     "embedding: padding_idx 7 is not a row of the weight [5, 3] (from -5 to 4)");
  EXPECT_EMBER_ERROR(F::embedding(from_vector<int64_t>({0}), ones({5, 3}), -6), "padding_idx -6 is not a row");
}

TEST(Conv2d, NegativeChannelsAreNamed) {
  EXPECT_EMBER_ERROR(nn::Conv2d(-2, 4, 3), "Conv2d: in_channels -2 and out_channels 4 must not be negative");
  // mutation: no kernel check -> made, then forward blamed the input's size
  EXPECT_EMBER_ERROR(nn::Conv2d(2, 2, 0), "Conv2d: kernel_size must be positive, got (0, 0)");
  EXPECT_EMBER_ERROR(nn::Conv2d(2, 2, Pair{3, -1}), "got (3, -1)");
}

TEST(Conv2d, ForwardInitAndPrinting) {
  nn::Conv2d conv(3, 4, 3, {.padding = {1, 1}});
  Tensor x = randn({2, 3, 5, 5});
  EXPECT_TRUE(all_close(conv(x), conv2d(x, conv.weight, conv.bias, {.padding = {1, 1}}), 1e-5, 1e-6));
  EXPECT_EQ(conv(x).shape(), (Shape{2, 4, 5, 5}));
  EXPECT_EQ(conv.weight.shape(), (Shape{4, 3, 3, 3}));
  double bound = 1.0 / std::sqrt(27.0);  // fan_in = 3 * 3 * 3
  EXPECT_LE(max(abs(conv.weight)).item<double>(), bound);
  EXPECT_LE(max(abs(conv.bias)).item<double>(), bound);
  EXPECT_EQ(nn::Conv2d(1, 32, 3).str(), "Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))");
  EXPECT_EQ(nn::Conv2d(1, 32, {3, 5}, {.stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 2}, .bias = false}).str(),
            "Conv2d(1, 32, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), dilation=(2, 2), bias=False)");
  nn::Conv2d grouped(4, 8, 3, {.groups = 2});
  EXPECT_EQ(grouped.str(), "Conv2d(4, 8, kernel_size=(3, 3), stride=(1, 1), groups=2)");
  EXPECT_EQ(grouped.weight.shape(), (Shape{8, 2, 3, 3}));
  EXPECT_EMBER_ERROR(nn::Conv2d(3, 4, 3, {.groups = 2}), "divisible by groups 2");
}

TEST(Conv2d, Gradients) {
  expect_gradcheck([](V x) { return F::conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 1}}); },
                   {f64({1, 2, 5, 4}), f64({3, 2, 3, 3}), f64({3})});
}

TEST(Pooling, ForwardAndPrinting) {
  Tensor x = randn({2, 3, 6, 6});
  nn::MaxPool2d max_pool(2);
  EXPECT_TRUE(all_close(max_pool(x), max_pool2d(x, {.kernel_size = {2, 2}, .stride = {2, 2}}), 0, 0));
  EXPECT_EQ(max_pool(x).shape(), (Shape{2, 3, 3, 3}));
  nn::AvgPool2d avg_pool(3, {.stride = {1, 1}, .padding = {1, 1}});
  EXPECT_TRUE(all_close(avg_pool(x), avg_pool2d(x, {.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}), 0, 0));
  EXPECT_EQ(max_pool.str(), "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  EXPECT_EQ(nn::AvgPool2d(2).str(), "AvgPool2d(kernel_size=2, stride=2, padding=0)");
  EXPECT_EQ(avg_pool.str(), "AvgPool2d(kernel_size=3, stride=1, padding=1)");
  EXPECT_EQ(nn::MaxPool2d({2, 3}).str(), "MaxPool2d(kernel_size=(2, 3), stride=(2, 3), padding=0, dilation=1, ceil_mode=False)");
  // A hand case: the maximum and the mean of each 2x2 window.
  Tensor hand = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 1, 4, 4});
  EXPECT_EQ(max_pool(hand).to_vector<float>(), (std::vector<float>{6, 8, 14, 16}));
  EXPECT_EQ(nn::AvgPool2d(2)(hand).to_vector<float>(), (std::vector<float>{3.5, 5.5, 11.5, 13.5}));
  // Distinct values keep each window's maximum unique, away from finite-difference ties.
  Tensor distinct = sin(arange(0, 2 * 5 * 5, 1, {.dtype = DType::f64}) * 0.37).view({1, 2, 5, 5});
  expect_gradcheck([](V in) { return F::max_pool2d(in[0], {.kernel_size = {2, 2}, .stride = {1, 2}}); }, {distinct});
  expect_gradcheck([](V in) { return F::avg_pool2d(in[0], {.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}); },
                   {f64({1, 2, 5, 5})});
}

TEST(BatchNorm, TrainingUpdatesRunningStatisticsAsPyTorch) {
  nn::BatchNorm1d norm(3);
  EXPECT_EQ(norm.str(), "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)");
  Tensor x = randn({8, 3}) * 2.0 + 1.0;
  Tensor out = norm(x);
  Tensor batch_mean = mean(x, {0});
  Tensor biased_var = var(x, {0}, /*unbiased=*/false);
  EXPECT_TRUE(all_close(out, (x - batch_mean) / sqrt(biased_var + 1e-5), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(norm.running_mean, batch_mean * 0.1, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(norm.running_var, var(x, {0}) * 0.1 + 0.9, 1e-5, 1e-6));
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 1);
  // Eval: the running statistics, which stay put.
  norm.eval();
  Tensor running_mean = norm.running_mean.clone();
  Tensor evaluated = norm(x);
  EXPECT_TRUE(all_close(evaluated, (x - norm.running_mean) / sqrt(norm.running_var + 1e-5), 1e-4, 1e-5));
  EXPECT_TRUE(all_close(norm.running_mean, running_mean, 0, 0));
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 1);
  EXPECT_EMBER_ERROR(norm(randn({2, 3, 4, 4})), "expected 2D or 3D input");
  EXPECT_EMBER_ERROR(norm(randn({2, 4})), "expected 3 channels");
}

TEST(BatchNorm, MomentumNoneIsACumulativeAverage) {
  nn::BatchNorm2d norm(2, {.momentum = std::nullopt});
  Tensor a = randn({4, 2, 3, 3}), b = randn({4, 2, 3, 3}) + 3.0;
  norm(a);
  norm(b);
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 2);
  Tensor expected = (mean(a, {0, 2, 3}) + mean(b, {0, 2, 3})) / 2.0;
  EXPECT_TRUE(all_close(norm.running_mean, expected, 1e-5, 1e-5));
  EXPECT_EQ(norm.str(), "BatchNorm2d(2, eps=1e-05, momentum=None, affine=True, track_running_stats=True)");
}

// A momentum outside [0, 1] extrapolates the running statistics, NaN makes
// them NaN: refused (mutation: no check -> running_mean NaN after one batch).
TEST(BatchNorm, MomentumOutsideZeroToOneIsRefused) {
  for (double momentum : {-0.5, 1.5, std::nan("")})
    EXPECT_EMBER_ERROR(nn::BatchNorm2d(2, {.momentum = momentum}), "BatchNorm: momentum must be in [0, 1]");
  nn::BatchNorm1d edge(2, {.momentum = 1.0});
  edge(randn({4, 2}));
}

TEST(BatchNorm, WithoutRunningStatisticsUsesTheBatchInEval) {
  nn::BatchNorm2d norm(2, {.affine = false, .track_running_stats = false});
  EXPECT_TRUE(norm.state_dict().empty());
  EXPECT_TRUE(norm.parameters().empty());
  norm.eval();
  Tensor x = randn({3, 2, 2, 2});
  Tensor expected = (x - mean(x, {0, 2, 3}, true)) / sqrt(var(x, {0, 2, 3}, false, true) + 1e-5);
  EXPECT_TRUE(all_close(norm(x), expected, 1e-4, 1e-5));
  EXPECT_EQ(norm.str(), "BatchNorm2d(2, eps=1e-05, momentum=0.1, affine=False, track_running_stats=False)");
}

TEST(BatchNorm, Gradients) {
  Tensor running_mean = zeros({3}, {.dtype = DType::f64}), running_var = ones({3}, {.dtype = DType::f64});
  expect_gradcheck([&](V x) { return F::batch_norm(x[0], running_mean, running_var, x[1], x[2], true); },
                   {f64({4, 3, 2}), f64({3}), f64({3})});
  expect_gradcheck([&](V x) { return F::batch_norm(x[0], running_mean, running_var, x[1], x[2], false); },
                   {f64({4, 3}), f64({3}), f64({3})});
}

TEST(LayerNorm, ForwardAgainstTheComposite) {
  nn::LayerNorm norm(4);
  EXPECT_TRUE(all_close(norm.weight, ones({4}), 0, 0));
  EXPECT_TRUE(all_close(norm.bias, zeros({4}), 0, 0));
  nn::init::normal_(norm.weight);
  nn::init::normal_(norm.bias);
  Tensor x = randn({2, 3, 4});
  Tensor normalised = (x - mean(x, {-1}, true)) / sqrt(var(x, {-1}, false, true) + 1e-5);
  EXPECT_TRUE(all_close(norm(x), normalised * norm.weight + norm.bias, 1e-4, 1e-5));
  EXPECT_EQ(norm.str(), "LayerNorm((4,), eps=1e-05, elementwise_affine=True)");
  nn::LayerNorm plain({3, 4}, {.eps = 1e-6, .elementwise_affine = false});
  EXPECT_TRUE(plain.parameters().empty());
  EXPECT_EQ(plain.str(), "LayerNorm((3, 4), eps=1e-06, elementwise_affine=False)");
  nn::LayerNorm no_bias(4, {.bias = false});
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  expect_gradcheck([](V x) { return F::layer_norm(x[0], {4}, x[1], x[2]); }, {f64({3, 4}), f64({4}), f64({4})});
}

TEST(RMSNorm, ForwardAgainstTheComposite) {
  nn::RMSNorm norm(4, {.eps = 1e-6});
  nn::init::normal_(norm.weight);
  Tensor x = randn({3, 4});
  Tensor expected = x * rsqrt(mean(x * x, {-1}, true) + 1e-6) * norm.weight;
  EXPECT_TRUE(all_close(norm(x), expected, 1e-4, 1e-5));
  EXPECT_EQ(norm.str(), "RMSNorm((4,), eps=1e-06, elementwise_affine=True)");
  EXPECT_EQ(nn::RMSNorm(8).str(), "RMSNorm((8,), eps=None, elementwise_affine=True)");
  expect_gradcheck([](V x) { return F::rms_norm(x[0], {4}, x[1], 1e-6); }, {f64({3, 4}), f64({4})});
}

TEST(Dropout, ZeroesAndScalesInTrainingOnly) {
  Generator generator(3);
  nn::Dropout dropout(0.25, &generator);
  Tensor x = ones({4000});
  Tensor y = dropout(x);
  double zero_fraction = double(sum(eq(y, 0.0)).item<int64_t>()) / 4000.0;
  EXPECT_NEAR(zero_fraction, 0.25, 0.03);
  // The kept elements are scaled by 1 / (1 - p).
  EXPECT_TRUE(all_close(where(eq(y, 0.0), full({4000}, 1.0 / 0.75), y), full({4000}, 1.0 / 0.75)));
  // The gradient is the same mask and scale: d(sum(dropout(x)))/dx = dropout(ones) for x = ones.
  Tensor leaf = ones({4000}, {.requires_grad = true});
  Tensor dropped = dropout(leaf);
  sum(dropped).backward();
  EXPECT_TRUE(all_close(leaf.grad(), dropped.detach(), 0, 0));
  dropout.eval();
  EXPECT_TRUE(all_close(dropout(x), x, 0, 0));
  EXPECT_EQ(dropout.str(), "Dropout(p=0.25, inplace=False)");
  EXPECT_EQ(nn::Dropout().str(), "Dropout(p=0.5, inplace=False)");
  EXPECT_EMBER_ERROR(nn::Dropout(1.5), "between 0 and 1");
}

TEST(Activations, MatchCoreOpsAndPrintLikePyTorch) {
  Tensor x = randn({3, 5});
  EXPECT_TRUE(all_close(nn::ReLU()(x), clamp_min(x, 0.0), 0, 0));
  EXPECT_TRUE(all_close(nn::GELU()(x), x * (erf(x / std::sqrt(2.0)) + 1.0) * 0.5, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::GELU(GeluApproximation::tanh)(x), gelu(x, GeluApproximation::tanh), 0, 0));
  EXPECT_TRUE(all_close(nn::SiLU()(x), x * sigmoid(x), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::Tanh()(x), tanh(x), 0, 0));
  EXPECT_TRUE(all_close(nn::Sigmoid()(x), rdiv(exp(-x) + 1.0, 1.0), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(nn::Softmax(0)(x), exp(x) / sum(exp(x), {0}, true), 1e-5, 1e-6));
  EXPECT_TRUE(nn::Identity()(x).is_same(x));
  EXPECT_EQ(nn::Flatten()(randn({2, 3, 4, 5})).shape(), (Shape{2, 60}));
  EXPECT_EQ(nn::Flatten(0, 1)(randn({2, 3, 4})).shape(), (Shape{6, 4}));
  EXPECT_EQ(nn::ReLU().str(), "ReLU()");
  EXPECT_EQ(nn::GELU().str(), "GELU(approximate='none')");
  EXPECT_EQ(nn::GELU(GeluApproximation::tanh).str(), "GELU(approximate='tanh')");
  EXPECT_EQ(nn::SiLU().str() + nn::Tanh().str() + nn::Sigmoid().str() + nn::Identity().str(),
            "SiLU()Tanh()Sigmoid()Identity()");
  EXPECT_EQ(nn::Softmax(-1).str(), "Softmax(dim=-1)");
  EXPECT_EQ(nn::Flatten().str(), "Flatten(start_dim=1, end_dim=-1)");
}

TEST(Activations, GradientsThroughASmallNetwork) {
  // Every activation in one chain, in f64, against finite differences.
  nn::Sequential model(nn::Linear(4, 6, {.dtype = DType::f64}), nn::GELU(), nn::Linear(6, 6, {.dtype = DType::f64}),
                       nn::SiLU(), nn::Tanh(), nn::Sigmoid(), nn::Softmax(-1));
  expect_gradcheck([&](V x) { return model(x[0]); }, {f64({3, 4})});
}

}  // namespace
}  // namespace ember
