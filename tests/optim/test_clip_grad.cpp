// clip_grad_norm_ and clip_grad_value_ against PyTorch's
// torch.nn.utils (golden_optim.json) and hand cases.
#include <cmath>

#include "optim/optim_golden.h"

namespace ember::testing {
namespace {

// Parameters with the golden gradients, plus one without a gradient.
std::vector<Tensor> params_with_golden_grads() {
  std::vector<Tensor> params;
  for (const nlohmann::json& grad : golden_optim()["clip_grad_norm"]["grads"]) {
    Tensor param = zeros({int64_t(grad.size())}).requires_grad_();
    param.set_grad(golden_tensor(grad, param.detach()));
    params.push_back(param);
  }
  params.push_back(zeros({2}).requires_grad_());
  return params;
}

TEST(ClipGradNorm, MatchesPyTorch) {
  for (const nlohmann::json& spec : golden_optim()["clip_grad_norm"]["cases"]) {
    const std::string name = spec["name"];
    std::vector<Tensor> params = params_with_golden_grads();
    const double norm_type = spec["norm_type"] == "inf" ? INFINITY : spec["norm_type"].get<double>();
    Tensor total = optim::clip_grad_norm_(params, spec["max_norm"].get<double>(), norm_type);
    EXPECT_EQ(total.dim(), 0) << name;
    EXPECT_EQ(total.dtype(), DType::f32) << name;
    EXPECT_NEAR(total.item<double>(), spec["total_norm"].get<double>(), 1e-6) << name;
    for (size_t p = 0; p + 1 < params.size(); ++p)
      EXPECT_TRUE(all_close(params[p].grad(), golden_tensor(spec["clipped"][p], params[p].detach()), 1e-6, 1e-6))
          << name << ", parameter " << p;
    EXPECT_FALSE(params.back().grad().defined()) << name;
  }
}

TEST(ClipGradNorm, HandCases) {
  Tensor a = zeros({2}).requires_grad_();
  a.set_grad(from_vector<float>({3, 4}));
  EXPECT_FLOAT_EQ(optim::clip_grad_norm_({a}, 1.0).item<float>(), 5.0f);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 0.6, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<float>()[1], 0.8, 1e-6);
  Tensor none = zeros({2}).requires_grad_();
  Tensor zero = optim::clip_grad_norm_({none}, 1.0);
  EXPECT_EQ(zero.item<float>(), 0.0f);
}

TEST(ClipGradNorm, NonFiniteNormsRaiseWhenAsked) {
  Tensor a = zeros({2}).requires_grad_();
  a.set_grad(from_vector<float>({INFINITY, 1}));
  EXPECT_EMBER_ERROR(optim::clip_grad_norm_({a}, 1.0, 2.0, true), "the total norm of order 2 of the gradients is inf");
  a.set_grad(from_vector<float>({NAN, 1}));
  EXPECT_EMBER_ERROR(optim::clip_grad_norm_({a}, 1.0, INFINITY, true), "is nan");
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a}, 1.0).item<float>()));  // clipped anyway, as PyTorch
}

TEST(ClipGradValue, ClampsEveryGradient) {
  Tensor a = zeros({4}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(from_vector<float>({-3, -0.5, 0.25, 2}));
  optim::clip_grad_value_({a, b}, 1.0);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{-1, -0.5, 0.25, 1}));
  EXPECT_FALSE(b.grad().defined());
}

}  // namespace
}  // namespace ember::testing
