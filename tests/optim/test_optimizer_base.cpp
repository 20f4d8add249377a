// The Optimizer base: zero_grad, parameter checks, option checks, the state
// dict's layout and names (PyTorch's), load_state_dict's validation, and
// 16-bit parameters.
#include <cmath>

#include "optim/optim_golden.h"

namespace ember::testing {
namespace {

Tensor leaf(const Shape& shape, double value = 1.0) {
  Tensor t = full(shape, value);
  t.requires_grad_(true);
  return t;
}

TEST(Optimizer, ZeroGradSetsToNoneOrZeroesInPlace) {
  Tensor a = leaf({2}), b = leaf({3});
  optim::SGD optimizer({a, b}, {.lr = 0.1});
  a.set_grad(full({2}, 5.0));
  Tensor b_grad = full({3}, 7.0);
  b.set_grad(b_grad);
  optimizer.zero_grad(false);
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(2, 0.0f));
  EXPECT_EQ(b_grad.to_vector<float>(), std::vector<float>(3, 0.0f));  // the same storage, zeroed
  optimizer.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
  optimizer.zero_grad();  // nothing to do
}

TEST(Optimizer, ParametersWithoutGradientsAreSkippedAndGetNoState) {
  Tensor a = leaf({2}), b = leaf({2});
  optim::Adam optimizer({a, b}, {.lr = 0.1});
  a.set_grad(ones({2}));
  optimizer.step();
  EXPECT_NE(optimizer.state(0, 0), nullptr);
  EXPECT_EQ(optimizer.state(0, 1), nullptr);
  EXPECT_EQ(b.detach().to_vector<float>(), std::vector<float>(2, 1.0f));
  optim::OptimizerStateDict dict = optimizer.state_dict();
  EXPECT_TRUE(dict.meta["state"].contains("0"));
  EXPECT_FALSE(dict.meta["state"].contains("1"));
}

TEST(Optimizer, RejectsBadParameters) {
  Tensor a = leaf({2});
  EXPECT_EMBER_ERROR(optim::SGD(std::vector<Tensor>{}), "SGD: a parameter group has no parameters");
  EXPECT_EMBER_ERROR(optim::SGD({a, a}), "parameter 1 appears twice");
  EXPECT_EMBER_ERROR(optim::SGD({zeros({2}, {.dtype = DType::i64})}), "floating-point tensors");
  Tensor non_leaf = mul(a, 2.0);
  EXPECT_EMBER_ERROR(optim::Adam({non_leaf}), "can't optimize a non-leaf tensor");
  optim::SGD optimizer({a});
  EXPECT_EMBER_ERROR(optimizer.add_param_group({a}, {}), "already in param group 0");
  EXPECT_EMBER_ERROR(optim::SGD(std::vector<optim::ParamGroup<optim::SGDOptions>>{}), "got no parameter groups");
  // Refused here, not at the first step with a kernel's message. Catches: the check left out.
  Tensor transposed = from_vector<float>({1, 2, 3, 4, 5, 6}).reshape({2, 3}).t().requires_grad_(true);
  EXPECT_EMBER_ERROR(optim::SGD({transposed}),
                     "SGD: parameter 0 of the new group (shape [3, 2], strides [1, 3]) is not contiguous");
}

// PyTorch's add_param_group({"params": p}) takes the constructor's options;
// ember's only overload took a whole options struct, so the habit of
// passing `{}` trained the new group with lr 1e-3 and no momentum without a
// word. Catches: add_param_group(params) using the struct's own values, or
// defaults() not set by the constructor.
TEST(Optimizer, AGroupAddedWithoutOptionsTakesTheConstructorsDefaults) {
  Tensor a = leaf({2}), b = leaf({2}), c = leaf({2});
  optim::SGD sgd({a}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
  sgd.add_param_group({b});
  EXPECT_EQ(sgd.options(1).lr, 0.1);
  EXPECT_EQ(sgd.options(1).momentum, 0.9);
  EXPECT_EQ(sgd.options(1).weight_decay, 0.01);
  optim::SGDOptions options = sgd.defaults();
  options.lr = 0.5;
  sgd.add_param_group({c}, options);
  EXPECT_EQ(sgd.options(2).lr, 0.5);
  EXPECT_EQ(sgd.options(2).momentum, 0.9);
  optim::AdamW adamw({leaf({2})}, {.lr = 0.02, .weight_decay = 0.5});
  adamw.add_param_group({leaf({2})});
  EXPECT_EQ(adamw.options(1).lr, 0.02);
  EXPECT_EQ(adamw.options(1).weight_decay, 0.5);
  // Built from groups, the defaults are the struct's (PyTorch's signature defaults).
  optim::SGD from_groups(std::vector<optim::ParamGroup<optim::SGDOptions>>{{{leaf({2})}, {.lr = 0.3}}});
  EXPECT_EQ(from_groups.defaults().lr, optim::SGDOptions{}.lr);
}

TEST(Optimizer, RejectsBadOptions) {
  Tensor a = leaf({2});
  EXPECT_EMBER_ERROR(optim::SGD({a}, {.lr = -1}), "SGD: invalid learning rate -1");
  EXPECT_EMBER_ERROR(optim::SGD({a}, {.lr = 0.1, .nesterov = true}), "nesterov momentum requires a momentum");
  EXPECT_EMBER_ERROR(optim::Adam({a}, {.betas = {1.0, 0.9}}), "Adam: invalid beta parameter at index 0: 1");
  EXPECT_EMBER_ERROR(optim::AdamW({a}, {.eps = -1}), "AdamW: invalid epsilon -1");
  EXPECT_EMBER_ERROR(optim::RMSprop({a}, {.momentum = -0.5}), "RMSprop: invalid momentum -0.5");
  EXPECT_EMBER_ERROR(optim::Adagrad({a}, {.lr_decay = -1}), "Adagrad: invalid lr_decay -1");
  EXPECT_EMBER_ERROR(optim::Lion({a}, {.weight_decay = -1}), "Lion: invalid weight_decay -1");
}

TEST(Optimizer, DefaultsArePyTorchs) {
  Tensor a = leaf({1});
  EXPECT_EQ(optim::AdamW({a}).options(0).weight_decay, 1e-2);
  EXPECT_EQ(optim::Adam({a}).options(0).weight_decay, 0);
  EXPECT_EQ(optim::Lion({a}).options(0).lr, 1e-4);
  EXPECT_EQ(optim::Lion({a}).options(0).betas, std::make_pair(0.9, 0.99));
  EXPECT_EQ(optim::RMSprop({a}).options(0).alpha, 0.99);
  EXPECT_EQ(optim::Adagrad({a}).options(0).eps, 1e-10);
}

// The layout and names of PyTorch's state_dict, flattened for safetensors.
TEST(Optimizer, StateDictUsesPyTorchsNames) {
  Tensor a = leaf({2}), b = leaf({3}), c = leaf({1});
  optim::Adam optimizer(std::vector<optim::ParamGroup<optim::AdamOptions>>{{{a, b}, {.lr = 0.1, .amsgrad = true}},
                                                                           {{c}, {.lr = 0.01, .betas = {0.8, 0.9}}}});
  for (const Tensor& t : {a, b, c}) t.set_grad(ones(t.shape()));
  optimizer.step();
  optimizer.step();
  optim::OptimizerStateDict dict = optimizer.state_dict();
  std::vector<std::string> names;
  for (const auto& [name, tensor] : dict.tensors) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.max_exp_avg_sq",
                                             "state.1.exp_avg", "state.1.exp_avg_sq", "state.1.max_exp_avg_sq",
                                             "state.2.exp_avg", "state.2.exp_avg_sq"}));
  EXPECT_EQ(dict.meta["state"]["2"]["step"], 2);
  const nlohmann::json& groups = dict.meta["param_groups"];
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0]["params"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(groups[1]["params"], nlohmann::json::array({2}));
  EXPECT_EQ(groups[1]["betas"], nlohmann::json::array({0.8, 0.9}));
  EXPECT_EQ(groups[0]["lr"], 0.1);
  EXPECT_EQ(groups[0]["amsgrad"], true);
  for (const char* key : {"eps", "weight_decay", "maximize", "foreach", "capturable", "differentiable", "fused"})
    EXPECT_TRUE(groups[0].contains(key)) << key;
}

// Adagrad, as PyTorch's, gives every parameter its state on construction.
TEST(Optimizer, AdagradStateExistsBeforeTheFirstStep) {
  Tensor a = leaf({2});
  optim::Adagrad optimizer({a}, {.initial_accumulator_value = 0.25});
  optim::OptimizerStateDict dict = optimizer.state_dict();
  EXPECT_EQ(dict.meta["state"]["0"]["step"], 0);
  ASSERT_EQ(dict.tensors.size(), 1u);
  EXPECT_EQ(dict.tensors[0].first, "state.0.sum");
  EXPECT_EQ(dict.tensors[0].second.to_vector<float>(), std::vector<float>(2, 0.25f));
}

class LoadStateDict : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const Tensor& t : {a, b}) t.set_grad(ones(t.shape()));
    optimizer.step();
    saved = optimizer.state_dict();
  }
  Tensor a = leaf({2}), b = leaf({3});
  optim::Adam optimizer{{a, b}, {.lr = 0.1}};
  optim::OptimizerStateDict saved;
};

TEST_F(LoadStateDict, ChecksTheGroups) {
  optim::Adam two_groups(std::vector<optim::ParamGroup<optim::AdamOptions>>{{{leaf({2})}, {}}, {{leaf({3})}, {}}});
  EXPECT_EMBER_ERROR(two_groups.load_state_dict(saved), "the state dict has 1 param groups but the optimizer has 2");
  optim::Adam three_params({leaf({2}), leaf({3}), leaf({1})});
  EXPECT_EMBER_ERROR(three_params.load_state_dict(saved),
                     "param_groups[0] has 2 parameters but the optimizer's group has 3");
  optim::OptimizerStateDict missing_lr = saved;
  missing_lr.meta["param_groups"][0].erase("lr");
  EXPECT_EMBER_ERROR(optimizer.load_state_dict(missing_lr), "param_groups[0] has no 'lr'");
  optim::OptimizerStateDict bad_betas = saved;
  bad_betas.meta["param_groups"][0]["betas"] = {0.9};
  EXPECT_EMBER_ERROR(optimizer.load_state_dict(bad_betas), "'betas' must have 2 values, got 1");
}

// Fields that would train wrongly are refused, and check_state_dict refuses
// the same and changes nothing. Mutation caught (run once, failed as
// expected): reading initial_lr with detail::number_field (any finite
// number) instead of non_negative_field loads initial_lr -1. (A NaN or
// negative lr or beta is also refused by each optimizer's check_options.)
TEST_F(LoadStateDict, RefusesNegativeOrNonFiniteFields) {
  const double nan = std::nan("");
  const std::vector<std::pair<std::string, nlohmann::json::json_pointer>> places = {
      {"lr", nlohmann::json::json_pointer("/param_groups/0/lr")},
      {"initial_lr", nlohmann::json::json_pointer("/param_groups/0/initial_lr")},
      {"betas", nlohmann::json::json_pointer("/param_groups/0/betas/1")},
      {"step", nlohmann::json::json_pointer("/state/0/step")}};
  const std::vector<std::pair<std::string, double>> values = {{"-1", -1.0}, {"NaN", nan}, {"1 (a beta)", 1.0}};
  optim::Adam fresh({leaf({2}), leaf({3})});
  for (const auto& [field, at] : places)
    for (const auto& [shown, value] : values) {
      if (value == 1.0 && field != "betas") continue;
      if (field == "lr" && value == -1.0) continue;  // loads: see below
      if (field == "step" && value != -1.0) continue;  // a step must be an integer: NaN is refused as such
      optim::OptimizerStateDict bad = saved;
      bad.meta[at] = field == "step" ? nlohmann::json(-3) : nlohmann::json(value);
      EXPECT_THROW(fresh.load_state_dict(bad), Error) << field << " = " << shown;
      EXPECT_THROW(fresh.check_state_dict(bad), Error) << field << " = " << shown;
      EXPECT_EQ(fresh.options(0).lr, 1e-3) << field << " = " << shown;
      EXPECT_EQ(fresh.state(0, 0), nullptr) << field << " = " << shown;
    }
  // A good state: check_state_dict leaves the fresh optimizer untouched, the load applies it.
  fresh.check_state_dict(saved);
  EXPECT_EQ(fresh.state(0, 0), nullptr);
  EXPECT_EQ(fresh.options(0).lr, 1e-3);
  fresh.load_state_dict(saved);
  EXPECT_EQ(fresh.options(0).lr, 0.1);
  ASSERT_NE(fresh.state(0, 0), nullptr);
  // A negative lr loads (a schedule's end leaves one: OneCycleLR's linear
  // anneal), and the step refuses it.
  optim::OptimizerStateDict ended = saved;
  ended.meta["param_groups"][0]["lr"] = -0.5;
  fresh.load_state_dict(ended);
  EXPECT_EQ(fresh.options(0).lr, -0.5);
  EXPECT_EMBER_ERROR(fresh.step(), "a negative rate would ascend the loss");
}

TEST_F(LoadStateDict, ChecksTheState) {
  optim::Adam fresh({leaf({2}), leaf({3})});
  optim::OptimizerStateDict wrong_shape = saved;
  wrong_shape.tensors[0].second = zeros({5});
  EXPECT_EMBER_ERROR(fresh.load_state_dict(wrong_shape),
                     "tensor 'state.0.exp_avg' has shape [5] but its parameter has shape [2]");
  optim::OptimizerStateDict missing_buffer = saved;
  missing_buffer.tensors.erase(missing_buffer.tensors.begin() + 1);
  EXPECT_EMBER_ERROR(fresh.load_state_dict(missing_buffer),
                     "the state of parameter 0 of param group 0 has no 'exp_avg_sq'");
  optim::OptimizerStateDict missing_step = saved;
  missing_step.meta["state"]["1"].erase("step");
  EXPECT_EMBER_ERROR(fresh.load_state_dict(missing_step), "the state of parameter 1 of param group 0 has no 'step'");
  optim::OptimizerStateDict unknown_index = saved;
  unknown_index.meta["state"]["7"] = {{"step", 1}};
  EXPECT_EMBER_ERROR(fresh.load_state_dict(unknown_index), "names parameter 7, which no param group lists");
  optim::OptimizerStateDict stray_tensor = saved;
  stray_tensor.tensors.emplace_back("momentum", zeros({2}));
  EXPECT_EMBER_ERROR(fresh.load_state_dict(stray_tensor), "tensor 'momentum' is not named state.<index>.<buffer>");
  // A buffer the optimizer does not keep: another optimizer's, or a renamed
  // one (SGD's momentum restarted from the gradient on resume). Catches:
  // unknown buffers appended to the state and carried along.
  optim::OptimizerStateDict foreign = saved;
  foreign.tensors.emplace_back("state.0.bogus", zeros({2}));
  EXPECT_EMBER_ERROR(fresh.load_state_dict(foreign),
                     "the state of parameter 0 of param group 0 has a buffer 'bogus', which Adam does not keep (it "
                     "keeps: exp_avg, exp_avg_sq, max_exp_avg_sq)");
  Tensor w = leaf({2});
  optim::SGD sgd({w}, {.lr = 0.1, .momentum = 0.9});
  w.set_grad(ones({2}));
  sgd.step();
  optim::OptimizerStateDict renamed = sgd.state_dict();
  renamed.tensors[0].first = "state.0.momentum";
  EXPECT_EMBER_ERROR(sgd.load_state_dict(renamed), "has a buffer 'momentum', which SGD does not keep (it keeps: "
                                                   "momentum_buffer)");
  optim::Lion lion({leaf({2}), leaf({3})});
  EXPECT_EMBER_ERROR(lion.load_state_dict(saved), "which Lion does not keep");
  // Its own checkpoint loads whatever its options became (a scheduler set the
  // momentum to 0; the buffer stays in the state).
  sgd.set_momentum(0, 0.0);
  sgd.load_state_dict(sgd.state_dict());
  optim::OptimizerStateDict amsgrad = saved;
  amsgrad.meta["param_groups"][0]["amsgrad"] = true;  // needs max_exp_avg_sq, which is not there
  EXPECT_EMBER_ERROR(fresh.load_state_dict(amsgrad), "has no 'max_exp_avg_sq'");
  // Nothing changed: the failed loads left the fresh optimizer as it was.
  EXPECT_FALSE(fresh.options(0).amsgrad);
  EXPECT_EQ(fresh.state(0, 0), nullptr);
}

// PyTorch keeps step counts as tensors: a dict converted from one may hold
// state.<index>.step instead of a JSON step.
TEST_F(LoadStateDict, AcceptsTheStepAsATensor) {
  optim::OptimizerStateDict from_pytorch = saved;
  from_pytorch.meta["state"]["1"].erase("step");
  from_pytorch.tensors.emplace_back("state.1.step", scalar_tensor(4.0, {}));
  optim::Adam fresh({leaf({2}), leaf({3})});
  fresh.load_state_dict(from_pytorch);
  EXPECT_EQ(fresh.state(0, 1)->step, 4);
  EXPECT_FALSE(fresh.state(0, 1)->find("step").defined());
}

// Loaded state is copied (later steps do not write into the dict) and
// converted to the parameters' dtype.
TEST_F(LoadStateDict, CopiesAndConvertsTheState) {
  Tensor a64 = leaf({2}).to(DType::f64).detach(), b64 = leaf({3}).to(DType::f64).detach();
  a64.requires_grad_(true);
  b64.requires_grad_(true);
  optim::Adam fresh({a64, b64}, {.lr = 0.5});
  fresh.load_state_dict(saved);
  EXPECT_EQ(fresh.options(0).lr, 0.1);
  const Tensor& exp_avg = fresh.state(0, 0)->at("exp_avg");
  EXPECT_EQ(exp_avg.dtype(), DType::f64);
  EXPECT_TRUE(all_close(exp_avg.to(DType::f32), saved.tensors[0].second, 0, 0));
  EXPECT_FALSE(exp_avg.storage() == saved.tensors[0].second.storage());
  EXPECT_EQ(fresh.state(0, 1)->step, 1);
}

// 16-bit parameters are updated with f32 arithmetic: one bf16 step agrees with
// the f32 step on the same values to bf16 precision.
TEST(Optimizer, Bfloat16ParametersFollowTheFloat32Update) {
  for (DType dtype : {DType::bf16, DType::f16}) {
    const nlohmann::json& spec = golden_optim()["optimizers"][5];  // adam_default
    std::vector<Tensor> half_params = golden_initial_params(dtype), float_params;
    for (const Tensor& p : half_params) {
      Tensor f = p.detach().to(DType::f32);
      f.requires_grad_(true);
      float_params.push_back(f);
    }
    auto half = make_golden_optimizer(spec, half_params), single = make_golden_optimizer(spec, float_params);
    for (size_t s = 0; s < 3; ++s) {
      set_golden_grads(half_params, s, dtype);
      set_golden_grads(float_params, s, DType::f32);
      for (const Tensor& p : float_params)  // the f32 run sees the same rounded gradients
        if (p.grad().defined()) p.set_grad(p.grad().to(dtype).to(DType::f32));
      half->step();
      single->step();
    }
    for (size_t p = 0; p < half_params.size(); ++p) {
      EXPECT_EQ(half_params[p].dtype(), dtype);
      EXPECT_EQ(half->state(0, p)->at("exp_avg").dtype(), dtype);
      EXPECT_TRUE(all_close(half_params[p].detach().to(DType::f32), float_params[p].detach(), 2e-2, 2e-2))
          << dtype_name(dtype);
    }
  }
}

// The loop of DESIGN.md on a least-squares problem: gradients from backward(),
// clipping, AdamW, a warmup schedule and zero_grad together drive the loss
// down by orders of magnitude.
TEST(Optimizer, TrainsALeastSquaresModelWithBackward) {
  Tensor inputs = random_tensor({32, 3}, DType::f32), true_weight = from_vector<float>({1.5, -2, 0.5});
  Tensor targets = matmul(inputs, true_weight);
  Tensor weight = zeros({3}).requires_grad_();
  optim::AdamW optimizer({weight}, {.lr = 0.1, .weight_decay = 0});
  optim::CosineWithWarmup scheduler(optimizer, /*num_warmup_steps=*/10, /*num_training_steps=*/300);
  auto loss_of = [&] {
    Tensor error = sub(matmul(inputs, weight), targets);
    return mean(mul(error, error));
  };
  const float initial_loss = loss_of().item<float>();
  for (int step = 0; step < 300; ++step) {
    Tensor loss = loss_of();
    loss.backward();
    optim::clip_grad_norm_({weight}, 10.0);
    optimizer.step();
    scheduler.step();
    optimizer.zero_grad();
  }
  EXPECT_LT(loss_of().item<float>(), initial_loss * 1e-4);
  EXPECT_TRUE(all_close(weight.detach(), true_weight, 1e-2, 1e-2));
}

}  // namespace
}  // namespace ember::testing
