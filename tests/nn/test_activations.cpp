// nn::functional's composite activations, distances, normalize, conv1d and
// the losses huber_loss, kl_div and binary_cross_entropy against PyTorch:
// values and gradients of every case in tests/data/golden_activations.json
// (written by tests/data/make_golden_activations.py) in float64, at the
// points where the composites switch branch too; then the layers around them,
// and what they refuse.
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "nn/activation.h"
#include "nn/conv.h"
#include "nn/dropout.h"
#include "nn/functional.h"
#include "support/golden_json.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

namespace F = ember::nn::functional;
using Json = nlohmann::json;

F::KlDivReduction kl_reduction_from(const std::string& name) {
  if (name == "none") return F::KlDivReduction::none;
  if (name == "batchmean") return F::KlDivReduction::batchmean;
  return name == "sum" ? F::KlDivReduction::sum : F::KlDivReduction::mean;
}

Tensor run_case(const Json& c, const std::vector<Tensor>& x) {
  const std::string op = c["op"];
  const Json& a = c["args"];
  if (op == "leaky_relu") return F::leaky_relu(x[0], a["negative_slope"]);
  if (op == "elu") return F::elu(x[0], a["alpha"]);
  if (op == "softplus") return F::softplus(x[0], a["beta"], a["threshold"]);
  if (op == "hardtanh") return F::hardtanh(x[0], a["min_val"], a["max_val"]);
  if (op == "relu6") return F::relu6(x[0]);
  if (op == "mish") return F::mish(x[0]);
  if (op == "logsigmoid") return F::logsigmoid(x[0]);
  if (op == "cosine_similarity") return F::cosine_similarity(x[0], x[1], a["dim"], a["eps"]);
  if (op == "pairwise_distance") return F::pairwise_distance(x[0], x[1], a["p"], a["eps"], a["keepdim"]);
  if (op == "normalize") return F::normalize(x[0], a["p"], a["dim"], a["eps"]);
  if (op == "conv1d")
    return F::conv1d(x[0], x[1], x[2],
                     {.stride = a["stride"], .padding = a["padding"], .dilation = a["dilation"], .groups = a["groups"]});
  if (op == "huber_loss") return F::huber_loss(x[0], x[1], reduction_from(a["reduction"]), a["delta"]);
  if (op == "kl_div")
    return F::kl_div(x[0], x[1], {.reduction = kl_reduction_from(a["reduction"]), .log_target = a["log_target"]});
  EXPECT_EQ(op, "binary_cross_entropy");
  return F::binary_cross_entropy(x[0], x[1], {.weight = tensor_from(c["weight"]),
                                              .reduction = reduction_from(a["reduction"])});
}

TEST(ActivationsGolden, ValuesAndGradientsMatchPyTorch) {
  std::ifstream file(std::string(EMBER_TEST_DATA_DIR) + "/golden_activations.json");
  ASSERT_TRUE(file.good()) << "missing tests/data/golden_activations.json";
  const Json cases = Json::parse(file)["cases"];
  EXPECT_GE(cases.size(), 50u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& c = cases[i];
    const std::string what = "case " + std::to_string(i) + " (" + c["op"].get<std::string>() + " " +
                             c["args"].dump() + ")";
    SCOPED_TRACE(what);
    try {
      std::vector<Tensor> inputs;
      for (size_t k = 0; k < c["inputs"].size(); ++k)
        inputs.push_back(c["grads"][k].is_null() ? tensor_from(c["inputs"][k]) : leaf_from(c["inputs"][k]));
      Tensor out = run_case(c, inputs);
      EXPECT_TRUE(all_close(out, tensor_from(c["output"]), 1e-10, 1e-12)) << what << " output\n" << out;
      out.backward(tensor_from(c["grad_output"]));
      for (size_t k = 0; k < inputs.size(); ++k) {
        if (c["grads"][k].is_null()) continue;
        ASSERT_TRUE(inputs[k].grad().defined()) << what << " input " << k;
        EXPECT_TRUE(all_close(inputs[k].grad(), tensor_from(c["grads"][k]), 1e-9, 1e-12))
            << what << " gradient of input " << k << "\n" << inputs[k].grad();
      }
    } catch (const Error& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
}

// Every activation keeps an f32 or bf16 input's dtype, and its gradient
// through the branch not taken stays finite at the extremes, where exp
// overflows (a composite's 0 * inf = NaN: the mutation removing softplus's or
// elu's clamp of the untaken branch gives NaN here). At +-inf itself PyTorch's
// mish gradient is NaN too.
TEST(Activations, ExtremeInputsHaveFiniteGradients) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (auto [name, fn] : std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
             {"leaky_relu", [](const Tensor& t) { return F::leaky_relu(t); }},
             {"elu", [](const Tensor& t) { return F::elu(t); }},
             {"softplus", [](const Tensor& t) { return F::softplus(t); }},
             {"hardtanh", [](const Tensor& t) { return F::hardtanh(t); }},
             {"mish", [](const Tensor& t) { return F::mish(t); }},
             {"logsigmoid", [](const Tensor& t) { return F::logsigmoid(t); }}}) {
      SCOPED_TRACE(name + " " + std::string(dtype_name(dtype)));
      Tensor x = from_vector<float>({-1e30f, -200.0f, 200.0f, 1e30f}).to(dtype);
      x.requires_grad_(true);
      Tensor y = fn(x);
      EXPECT_EQ(y.dtype(), dtype);
      sum(y).backward();
      EXPECT_EQ(sum(isnan(x.grad())).item<int64_t>(), 0) << x.grad();
    }
  }
}

TEST(Activations, NanPropagates) {
  Tensor x = from_vector<float>({std::nanf(""), 0.5f});
  for (const Tensor& y : {F::hardtanh(x), F::leaky_relu(x), F::elu(x), F::softplus(x), F::logsigmoid(x)})
    EXPECT_TRUE(std::isnan(y.to_vector<float>()[0])) << y;
}

TEST(Activations, RefuseWhatPyTorchRefuses) {
  Tensor ints = from_vector<int64_t>({1, -2});
  EXPECT_EMBER_ERROR(F::leaky_relu(ints), "leaky_relu: expected a floating point input, got int64");
  EXPECT_EMBER_ERROR(F::softplus(ones({2}), 0.0), "softplus: beta must be nonzero");
  EXPECT_EMBER_ERROR(F::hardtanh(ones({2}), 1.0, -1.0), "hardtanh: min_val 1 must not exceed max_val -1");
  EXPECT_EMBER_ERROR(F::huber_loss(ones({2}), ones({2}), Reduction::mean, 0.0), "huber_loss: delta must be positive");
  EXPECT_EMBER_ERROR(F::kl_div(ones({2}), ones({3})), "kl_div: input of shape [2] and target of shape [3]");
  EXPECT_EMBER_ERROR(F::cosine_similarity(ones({2, 3}), ones({4, 3})), "cosine_similarity");
  EXPECT_EMBER_ERROR(F::normalize(ones({2, 3}), 2.0, 2), "normalize");
  EXPECT_EMBER_ERROR(F::conv1d(ones({1, 2, 5, 1}), ones({3, 2, 3})), "conv1d: expected input [N, C, L]");
  // conv2d's own checks are told in conv1d's shapes.
  EXPECT_EMBER_ERROR(F::conv1d(ones({1, 5, 7}), ones({2, 3, 3})), "conv1d: input [1, 5, 7], weight [2, 3, 3]");
  EXPECT_EMBER_ERROR(F::relu6(ints), "relu6: expected a floating point input");
}

// A probability outside [0, 1] (NaN included) is refused, as PyTorch's check
// refuses it: a mutation dropping the check gives a finite loss from log of a
// negative clamped at -100.
TEST(Activations, BinaryCrossEntropyRefusesNonProbabilities) {
  const Tensor target = full({3}, 0.5);
  EXPECT_EMBER_ERROR(F::binary_cross_entropy(from_vector<float>({0.5f, 1.5f, 0.2f}), target),
                     "binary_cross_entropy: every element of the input must be a probability in [0, 1]; 1 of the 3");
  EXPECT_EMBER_ERROR(F::binary_cross_entropy(from_vector<float>({std::nanf(""), 0.5f, 0.2f}), target), "1 of the 3");
  // Exact 0 and 1 are probabilities: each log is clamped at -100.
  Tensor edge = F::binary_cross_entropy(from_vector<float>({0.0f, 1.0f, 0.5f}), from_vector<float>({1.0f, 0.0f, 1.0f}),
                                        {.reduction = Reduction::none});
  EXPECT_TRUE(all_close(edge, from_vector<float>({100.0f, 100.0f, float(std::log(2.0))})));
}

// A sigmoid saturated to exactly 1.0 in f32 (logit 20) gave the whole step a
// NaN gradient: the clamped log's gradient at 1 was 0 * inf. PyTorch's
// gradient divides by max(x (1 - x), 1e-12) and gives these values. Mutation
// caught: the composite of clamped logs back in place of BinaryCrossEntropy
// -> the first gradient is NaN.
TEST(Activations, BinaryCrossEntropyOfASaturatedSigmoidHasAFiniteGradient) {
  Tensor logits = from_vector<float>({20.0f, -3.0f, 0.5f});
  logits.requires_grad_(true);
  Tensor loss = F::binary_cross_entropy(sigmoid(logits), from_vector<float>({1, 0, 1}));
  EXPECT_NEAR(loss.item<float>(), 0.174221f, 1e-6);
  loss.backward();
  const std::vector<float> grad = logits.grad().to_vector<float>();
  EXPECT_EQ(grad[0], 0.0f);
  EXPECT_NEAR(grad[1], 0.0158086f, 1e-6);
  EXPECT_NEAR(grad[2], -0.125847f, 1e-6);
}

// PyTorch's CPU autocast runs binary_cross_entropy in f32 (only CUDA's
// refuses it), and keeps normalize and the distances in the input's dtype,
// though ember's autocast runs their norm in f32.
TEST(Activations, AutocastDtypesAreAsPyTorchs) {
  Tensor p = from_vector<float>({0.2f, 0.7f}), a = from_vector<float>({1, 2, 3, 4}).reshape({2, 2}).to(DType::bf16);
  Tensor plain = F::binary_cross_entropy(p, p);
  AutocastGuard autocast(DeviceType::cpu, DType::bf16);
  Tensor cast = F::binary_cross_entropy(p.to(DType::bf16), p);
  EXPECT_EQ(cast.dtype(), DType::f32);
  EXPECT_NEAR(cast.item<float>(), plain.item<float>(), 2e-3);
  EXPECT_EQ(F::normalize(a).dtype(), DType::bf16);
  EXPECT_EQ(F::cosine_similarity(a, a).dtype(), DType::bf16);
  EXPECT_EQ(F::pairwise_distance(a, a).dtype(), DType::bf16);
}

// f16 and bf16 are computed in f32 and rounded once, as PyTorch's kernels do:
// in f16, e^12 overflows, and softplus(12) was inf with a NaN gradient.
// ELU's gradient far below 0 is e^x, positive (the tanh form's derivative
// cancelled and gave -2e-9 at -20). Mutations caught: in_f32 returning
// fn(input) -> softplus inf; expm1_nonpositive's exp(far) - 1 branch
// removed -> the f32 gradient at -20 is negative.
TEST(Activations, LowPrecisionAndFarNegativeInputs) {
  Tensor x = from_vector<float>({5, 12, 15, 19}).to(DType::f16);
  x.requires_grad_(true);
  Tensor y = F::softplus(x);
  EXPECT_TRUE(all_close(y.to(DType::f32), from_vector<float>({5.00781f, 12, 15, 19}), 1e-3, 1e-3)) << y;
  sum(F::mish(x) + y).backward();
  EXPECT_EQ(sum(isnan(x.grad())).item<int64_t>(), 0) << x.grad();
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor far = from_vector<double>({-40, -20, -15}).to(dtype);
    far.requires_grad_(true);
    sum(F::elu(far)).backward();
    const std::vector<double> grad = far.grad().to(DType::f64).to_vector<double>();
    const std::vector<double> expected = {std::exp(-40.0), std::exp(-20.0), std::exp(-15.0)};
    for (size_t i = 0; i < grad.size(); ++i)
      EXPECT_NEAR(grad[i], expected[i], 1e-6 * expected[i]) << dtype_name(dtype) << " at " << i;
  }
}

// At a NaN input PyTorch's hardtanh and elu pass the gradient (their
// backward tests x <= bound and x <= 0, false for NaN): 1, not 0 or NaN.
TEST(Activations, NanInputsGetPyTorchsGradient) {
  for (auto fn : {+[](const Tensor& t) { return F::hardtanh(t); }, +[](const Tensor& t) { return F::relu6(t); },
                  +[](const Tensor& t) { return F::elu(t); }}) {
    Tensor x = from_vector<double>({std::nan("")});
    x.requires_grad_(true);
    sum(fn(x)).backward();
    EXPECT_EQ(x.grad().item<double>(), 1.0);
  }
}

TEST(Layers, NewActivationModulesPrintAsPyTorch) {
  EXPECT_EQ(nn::LeakyReLU().str(), "LeakyReLU(negative_slope=0.01)");
  EXPECT_EQ(nn::LeakyReLU(0.2).str(), "LeakyReLU(negative_slope=0.2)");
  EXPECT_EQ(nn::ELU().str(), "ELU(alpha=1.0)");
  EXPECT_EQ(nn::Softplus().str(), "Softplus(beta=1.0, threshold=20.0)");
  EXPECT_EQ(nn::Hardtanh().str(), "Hardtanh(min_val=-1.0, max_val=1.0)");
  EXPECT_EQ(nn::ReLU6().str(), "ReLU6()");
  EXPECT_EQ(nn::Mish().str(), "Mish()");
  EXPECT_EQ(nn::LogSigmoid().str(), "LogSigmoid()");
  EXPECT_EQ(nn::Unflatten(1, {2, 3}).str(), "Unflatten(dim=1, unflattened_size=(2, 3))");
  EXPECT_EQ(nn::Dropout2d(0.3).str(), "Dropout2d(p=0.3, inplace=False)");
  EXPECT_EQ(nn::Conv1d(3, 4, 5, {.stride = 2, .padding = 1}).str(),
            "Conv1d(3, 4, kernel_size=(5,), stride=(2,), padding=(1,))");
  EXPECT_EQ(nn::Conv1d(4, 4, 3, {.dilation = 2, .groups = 2, .bias = false}).str(),
            "Conv1d(4, 4, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2, bias=False)");
}

TEST(Layers, ModulesRunTheirFunctionals) {
  Tensor x = randn({2, 3, 4});
  EXPECT_TRUE(all_close(nn::LeakyReLU(0.3)(x), F::leaky_relu(x, 0.3)));
  EXPECT_TRUE(all_close(nn::Softplus(2.0, 5.0)(x), F::softplus(x, 2.0, 5.0)));
  EXPECT_TRUE(all_close(nn::ReLU6()(x * 10.0), clamp(x * 10.0, 0, 6)));
  EXPECT_EQ(nn::Unflatten(2, {2, -1})(x).shape(), (Shape{2, 3, 2, 2}));
  EXPECT_EQ(nn::Unflatten(-1, {2, 2})(x).shape(), (Shape{2, 3, 2, 2}));
  nn::Conv1d conv(3, 6, 3, {.padding = 1, .groups = 3});
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 1, 3}));
  EXPECT_EQ(conv(x).shape(), (Shape{2, 6, 4}));
  EXPECT_TRUE(all_close(conv(x), F::conv1d(x, conv.weight, conv.bias, conv.conv)));
  EXPECT_TRUE(all_close(conv(x.select(0, 1)), conv(x).select(0, 1)));  // unbatched [C, L]
  EXPECT_EMBER_ERROR(nn::Conv1d(3, 4, 0), "Conv1d: kernel_size must be positive, got 0");
  EXPECT_EMBER_ERROR(nn::Conv1d(3, 4, 3, {.groups = 2}), "Conv1d: in_channels 3 and out_channels 4 must be divisible by groups 2");
}

// Whole channels are dropped, one draw per sample and channel, and the rest
// scaled by 1/(1-p). A mutation drawing per element (dropout of the input
// itself) leaves channels partly zero, which the test counts.
TEST(Layers, Dropout2dDropsWholeChannels) {
  nn::Dropout2d drop(0.5);
  Tensor x = ones({8, 16, 3, 3});
  Tensor y = drop(x);
  Tensor channel_sums = sum(y, {2, 3});
  const std::vector<float> sums = channel_sums.reshape({-1}).to_vector<float>();
  int dropped = 0;
  for (float s : sums) {
    EXPECT_TRUE(s == 0.0f || s == 18.0f) << s;  // 9 elements of 2
    dropped += s == 0.0f;
  }
  EXPECT_GT(dropped, 20);
  EXPECT_LT(dropped, 108);
  drop.eval();
  EXPECT_TRUE(all_close(drop(x), x));
  EXPECT_EMBER_ERROR(F::dropout2d(ones({3, 4, 5}), 0.5), "dropout2d: expected a 4-d input [N, C, H, W], got [3, 4, 5]");
}

}  // namespace
}  // namespace ember::testing
