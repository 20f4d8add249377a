// Higher-order gradients (Note [Higher-order gradients] in autograd/README.md):
// create_graph on backward and grad, gradgradcheck over the gradcheck case
// table, a Hessian-vector product of an MLP against finite differences of its
// gradients, and a WGAN-GP gradient penalty that trains.
#include <set>
#include <string>

#include "autograd/grad_cases.h"
#include "autograd/leaf.h"
#include "core/ops/conv.h"
#include "core/ops/normalization.h"
#include "nn/functional/activation.h"
#include "nn/functional/loss.h"

namespace ember::testing {
namespace {

std::vector<double> values(const Tensor& t) { return t.contiguous().to_vector<double>(); }

// Where a NaN is compared no comparison holds: maximum/minimum gave both
// inputs a zero gradient there (PyTorch: g to both), and relu's recorded
// gradient (create_graph) gave 0 at NaN where its fused one gives g.
// Mutations caught: the masks gt/lt in MaximumBackward; gt(out, 0) in ReluBackward.
TEST(HigherOrder, NanPassesTheGradientInMaximumMinimumAndRelu) {
  for (bool create_graph : {false, true}) {
    SCOPED_TRACE(create_graph);
    Tensor a = leaf({NAN, 1, 2}), b = leaf({1, NAN, 2});
    std::vector<Tensor> grads = autograd::grad({sum(maximum(a, b))}, {a, b}, {}, std::nullopt, create_graph);
    EXPECT_EQ(values(grads[0]), (std::vector<double>{1, 1, 0.5}));
    EXPECT_EQ(values(grads[1]), (std::vector<double>{1, 1, 0.5}));
    grads = autograd::grad({sum(minimum(a, b))}, {a, b}, {}, std::nullopt, create_graph);
    EXPECT_EQ(values(grads[0]), (std::vector<double>{1, 1, 0.5}));
    Tensor x = leaf({NAN, -1, 2});
    EXPECT_EQ(values(autograd::grad({sum(relu(x))}, {x}, {}, std::nullopt, create_graph)[0]),
              (std::vector<double>{1, 0, 1}));
  }
}

TEST(HigherOrder, GradWithCreateGraphIsDifferentiable) {
  Tensor x = leaf({1, -2, 0.5});
  Tensor y = sum(x * x * x);
  Tensor g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];  // 3 x^2
  ASSERT_TRUE(g.requires_grad());
  EXPECT_EQ(values(g), (std::vector<double>{3, 12, 0.75}));
  Tensor gg = autograd::grad({sum(g)}, {x})[0];  // 6 x
  EXPECT_EQ(values(gg), (std::vector<double>{6, -12, 3}));
  // Without create_graph the gradient is a constant, as before.
  EXPECT_FALSE(autograd::grad({sum(x * x * x)}, {x})[0].requires_grad());
}

TEST(HigherOrder, BackwardWithCreateGraphRetainsTheGraphAndRecordsDotGrad) {
  Tensor x = leaf({0.3, -0.7});
  Tensor y = sum(tanh(x));
  y.backward({}, std::nullopt, /*create_graph=*/true);
  ASSERT_TRUE(x.grad().requires_grad());  // 1 - tanh^2
  Tensor first = x.grad();
  y.backward({}, std::nullopt, true);  // retain_graph defaulted to create_graph: a second backward works
  // d/dx sum(1 - tanh^2 x) = -2 tanh x (1 - tanh^2 x), through the saved output of tanh
  Tensor second = autograd::grad({sum(first)}, {x})[0];
  for (int i = 0; i < 2; ++i) {
    double v = values(x)[size_t(i)], t = std::tanh(v);
    EXPECT_NEAR(values(second)[size_t(i)], -2 * t * (1 - t * t), 1e-12);
    EXPECT_NEAR(values(x.grad())[size_t(i)], 2 * (1 - t * t), 1e-12);  // accumulated out of place
  }
  EXPECT_NEAR(values(first)[0], 1 - std::pow(std::tanh(0.3), 2), 1e-12);  // the first .grad was not modified
  // A .grad made with create_graph holds a graph that reaches x's accumulator,
  // which holds x: a cycle, as in PyTorch (whose docs recommend autograd::grad
  // for this). Dropping .grad breaks it; without this LeakSanitizer reports it.
  x.set_grad(Tensor());
}

// gradgradcheck catches a gradient silently cut from the graph: a hook that
// detaches the incoming gradient leaves first derivatives right and makes
// their dependence on that gradient vanish.
TEST(HigherOrder, GradgradcheckCatchesADetachedGradient) {
  auto fn = [](const std::vector<Tensor>& x) {
    Tensor y = x[0] * x[0];
    if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g.detach(); });
    return y * 1.0;
  };
  std::vector<Tensor> inputs = {random_tensor({4}, DType::f64)};
  EXPECT_TRUE(autograd::gradcheck(fn, inputs).ok);
  EXPECT_FALSE(autograd::gradgradcheck(fn, inputs).ok);
}

// Second derivatives at the points where a first-derivative formula takes a
// shortcut, each against finite differences of the gradient (PyTorch's values
// too, checked by the audit that found them). Mutations caught, each seen
// failing: prod's grad-mode branch removed (the Hessian row of a zero element
// is 0, PyTorch's [0, 3, 0]); norm's p >= 2 branches removed (0 along a zero
// element instead of 1/|x|); logsigmoid back to min(x, 0) - log1p(e^-|x|)
// (bce_with_logits' second derivative at a logit of 0 is 0, not 1/4).
TEST(HigherOrder, SecondDerivativesAtZerosMatchFiniteDifferences) {
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  const std::vector<std::pair<std::string, Fn>> cases = {
      {"prod", [](const std::vector<Tensor>& x) { return prod(x[0]); }},
      {"prod dim", [](const std::vector<Tensor>& x) { return prod(x[0].reshape({2, 3}), {1}); }},
      {"prod dims keepdim", [](const std::vector<Tensor>& x) { return prod(x[0].reshape({3, 2}).t(), {0}, true); }},
      {"norm", [](const std::vector<Tensor>& x) { return norm(x[0]); }},
      {"norm dim", [](const std::vector<Tensor>& x) { return norm(x[0].reshape({2, 3}), 2.0, {1}); }},
      {"norm p=3", [](const std::vector<Tensor>& x) { return norm(x[0], 3.0); }},
      {"logsigmoid", [](const std::vector<Tensor>& x) { return nn::functional::logsigmoid(x[0]); }},
      {"bce_with_logits",
       [](const std::vector<Tensor>& x) {
         return nn::functional::binary_cross_entropy_with_logits(x[0], full_like(x[0], 0.3), {.reduction = Reduction::sum});
       }},
  };
  for (const auto& [name, fn] : cases) {
    for (const std::vector<double>& values : {std::vector<double>{2, 0, 3, -1, 0.5, 1.5},
                                              std::vector<double>{2, 0, 0, -1, 0.5, 1.5}}) {
      SCOPED_TRACE(name + (values[2] == 0 ? " (two zeros)" : " (one zero)"));
      autograd::GradcheckResult result = autograd::gradgradcheck(fn, {from_vector(values)});
      EXPECT_TRUE(result.ok) << result.report;
    }
  }
}

// std is not differentiable at a constant group; its gradient there is 0, and
// so is its second derivative (PyTorch's). The safe divisor made the second
// derivative (I - 1/n) / (n - 1) there. Mutation caught: the where around
// StdBackward's product removed -> H[0] = [1/3, -1/6, -1/6].
TEST(HigherOrder, StdOfAConstantGroupHasZeroSecondDerivative) {
  Tensor x = leaf({1, 1, 1});
  Tensor g = autograd::grad({std(x)}, {x}, {}, std::nullopt, true)[0];
  EXPECT_EQ(values(g), (std::vector<double>{0, 0, 0}));
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<Tensor> row = autograd::grad({g.select(0, i)}, {x}, {}, true, false, true);
    if (row[0].defined()) {
      EXPECT_EQ(values(row[0]), (std::vector<double>{0, 0, 0})) << "row " << i;
    }
  }
}

// A gradient penalty through a critic out = sum(act(x w1 + b1) w2): d out/dx
// depends on b1 only through act's mask (or max pooling's argmax), so its
// derivative in b1 is zero; PyTorch's backward functions keep the edge and
// give b1 a zero gradient. ember's masked products cut it: b1 got no .grad
// (an optimizer skipped it, where PyTorch's Adam moves it by its momentum),
// and grad() refused b1 as unused; under abs the first derivative did not
// even require grad. Mutations caught: the zero_through term removed from
// ReluBackward, AbsBackward, MaxPool2dBackward, LeakyRelu or Hardtanh ->
// b1's gradient undefined.
TEST(HigherOrder, AGradientPenaltyThroughAMaskReachesEveryParameter) {
  using Activation = Tensor (*)(const Tensor&);
  const std::pair<const char*, Activation> activations[] = {
      {"relu", [](const Tensor& z) { return relu(z); }},
      {"leaky_relu", [](const Tensor& z) { return nn::functional::leaky_relu(z, 0.2); }},
      {"hardtanh", [](const Tensor& z) { return nn::functional::hardtanh(z); }},
      {"relu6", [](const Tensor& z) { return nn::functional::relu6(z); }},
      {"abs", [](const Tensor& z) { return abs(z); }},
      {"max_pool2d",
       [](const Tensor& z) { return max_pool2d(z.reshape({1, 1, 1, 2}), {.kernel_size = {1, 2}}).reshape({1, 1}); }},
  };
  for (auto [name, act] : activations) {
    Tensor x = leaf({0.5, -1.0, 2.0}, {1, 3}), w1 = leaf({0.3, -0.2, 0.1, 0.4, -0.5, 0.6}, {3, 2});
    // A constant w2: max pooling refuses a double backward whose incoming gradient requires grad.
    Tensor b1 = leaf({0.1, -0.1}), w2 = full({}, 1.5, {.dtype = DType::f64});
    Tensor out = sum(act(matmul(x, w1) + b1) * w2);  // pre-activations -0.85 and 0.6
    Tensor dx = autograd::grad({out}, {x}, {}, std::nullopt, true)[0];
    EXPECT_TRUE(dx.requires_grad()) << name;
    Tensor penalty = sum(dx * dx);
    std::vector<Tensor> grads = autograd::grad({penalty}, {w1, b1}, {}, true);
    ASSERT_TRUE(grads[1].defined()) << name;
    EXPECT_EQ(values(grads[1]), (std::vector<double>{0, 0})) << name;
    penalty.backward();
    ASSERT_TRUE(b1.grad().defined()) << name;
    EXPECT_EQ(values(b1.grad()), (std::vector<double>{0, 0})) << name;
    EXPECT_TRUE(all_close(w1.grad(), grads[0])) << name;
  }
}

// Under create_graph the norms' and GELU's gradients are composites of
// recorded ops. On bf16 and f16 inputs they ran in that dtype, rounding at
// every step: against an f64 reference the bf16 layer-norm input gradient was
// off by 3.1% of its largest value, against 0.26% from the fused kernel
// (batch norm: 7.7% against 0.23%). They compute in f32 and round once now,
// as the kernels and PyTorch do; here they differ from the fused kernels'
// by under 0.01% of the largest value, where the 16-bit composites differed by
// 0.4-0.9% (bf16) and 0.05-0.17% (f16). Mutation caught: composite_in_f32
// running in the input's dtype.
TEST(HigherOrder, SixteenBitCompositeGradientsMatchTheFusedKernels) {
  using Op = Tensor (*)(const Tensor&, const Tensor&);
  const std::pair<const char*, Op> ops[] = {
      {"layer_norm", [](const Tensor& x, const Tensor& w) { return layer_norm(x, {64}, w, w * 0.5); }},
      {"rms_norm", [](const Tensor& x, const Tensor& w) { return rms_norm(x, {64}, w); }},
      {"batch_norm", [](const Tensor& x, const Tensor& w) { return batch_norm(x, {}, {}, w, w * 0.5, true); }},
      {"gelu", [](const Tensor& x, const Tensor& w) { return gelu(x) * w; }},
      {"gelu_tanh", [](const Tensor& x, const Tensor& w) { return gelu(x, GeluApproximation::tanh) * w; }},
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    manual_seed(5);
    Tensor x = (randn({16, 64}) * 3.0).to(dtype), w = (randn({64}) + 1.0).to(dtype), u = randn({16, 64}).to(dtype);
    x.requires_grad_(true);
    w.requires_grad_(true);
    for (auto [name, op] : ops) {
      const Tensor plain = autograd::grad({op(x, w)}, {x}, {u})[0];
      const Tensor recorded = autograd::grad({op(x, w)}, {x}, {u}, std::nullopt, /*create_graph=*/true)[0];
      EXPECT_TRUE(recorded.requires_grad()) << name;
      const double largest = max(abs(plain.to(DType::f32))).item<double>();
      const double tolerance = (dtype == DType::bf16 ? 0.002 : 0.0002) * largest;
      EXPECT_TRUE(all_close(recorded.detach(), plain, 0, tolerance)) << name << " " << dtype_name(dtype);
    }
  }
}

TEST(HigherOrder, FusedBackwardKernelsRefuseUnderCreateGraph) {
  Tensor x = randn({2, 3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor w = randn({3}, {.dtype = DType::f64, .requires_grad = true});
  Tensor pooled = max_pool2d(x.reshape({1, 1, 2, 3}) * w, {.kernel_size = {1, 2}});
  Tensor y = sum(pooled * pooled);  // the pooling's incoming gradient, 2 pooled, requires grad
  EXPECT_EMBER_ERROR(autograd::grad({y}, {x}, {}, std::nullopt, true), "double backward of MaxPool2dBackward is not supported");
  // The same graph without create_graph is fine.
  EXPECT_TRUE(autograd::grad({y}, {x})[0].defined());
}

// Ops whose gradient is a fused backward kernel with no gradient of its own:
// they raise "double backward of <node> is not supported" under create_graph.
const std::map<std::string, std::string> kNoDoubleBackward = {
    {"cross_entropy", "CrossEntropyBackward: the cross_entropy_backward kernel"},
    {"conv2d", "Conv2dBackward: oneDNN's conv2d_backward (or _input / _weight)"},
    {"max_pool2d", "MaxPool2dBackward: the max_pool2d_backward kernel"},
    {"avg_pool2d", "AvgPool2dBackward: conv2d_backward_input"},
    {"attention", "AttentionBackward: the attention_backward kernel (the composite path, e.g. with dropout, has one)"},
};

// Piecewise-constant ops: their gradient is a constant 0 (PyTorch's
// zeros_like(grad)), with nothing to differentiate again.
const std::set<std::string> kConstantGradient = {"floor", "ceil", "round", "trunc", "sign", "floor_divide"};

// Every op of the gradcheck table passes gradgradcheck, or is listed above and
// refuses, or has a constant gradient: zeros, even under create_graph.
TEST(HigherOrder, GradgradcheckEveryOpWithADifferentiableGradient) {
  for (const auto& [name, list] : gradcheck_cases()) {
    SCOPED_TRACE(name);
    auto refused = kNoDoubleBackward.find(name);
    for (const GradCase& c : list) {
      std::vector<Tensor> inputs;
      for (const Shape& shape : c.shapes) inputs.push_back(random_tensor(shape, DType::f64, c.lo, c.hi));
      if (kConstantGradient.count(name)) {
        for (Tensor& input : inputs) input.requires_grad_(true);
        for (const Tensor& grad : autograd::grad({sum(c.fn(inputs))}, inputs, {}, std::nullopt, true))
          EXPECT_EQ(max(abs(grad)).item<double>(), 0.0) << name;
        continue;
      }
      if (refused != kNoDoubleBackward.end()) {
        std::string node = refused->second.substr(0, refused->second.find(':'));
        EXPECT_EMBER_ERROR(autograd::gradgradcheck(c.fn, inputs), "double backward of " + node + " is not supported");
        continue;
      }
      try {
        autograd::GradcheckResult result = autograd::gradgradcheck(c.fn, inputs);
        EXPECT_TRUE(result.ok) << name << ": " << result.report;
      } catch (const Error& e) {
        ADD_FAILURE() << name << ": " << e.what();
      }
    }
  }
  for (const auto& [name, reason] : kNoDoubleBackward)
    EXPECT_TRUE(gradcheck_cases().count(name)) << name << " is listed as refusing but has no case";
}

// A two-layer MLP on fixed data, its parameters a list of f64 leaves.
struct Mlp {
  std::vector<Tensor> params;  // w1 [3, 4], b1 [4], w2 [4, 2]
  Tensor x = random_tensor({5, 3}, DType::f64), target = random_tensor({5, 2}, DType::f64);

  Mlp() {
    for (Shape shape : {Shape{3, 4}, Shape{4}, Shape{4, 2}}) {
      params.push_back(random_tensor(shape, DType::f64, -1, 1));
      params.back().requires_grad_(true);
    }
  }
  Tensor loss(const std::vector<Tensor>& p) const {
    Tensor h = gelu(matmul(x, p[0]) + p[1]);
    Tensor out = matmul(tanh(h), p[2]);
    return mean((out - target) * (out - target));
  }
};

// H v = d/dp (grad(p) . v): one backward with create_graph, then a second
// backward of the dot product. Finite differences of the gradient along v,
// (grad(p + e v) - grad(p - e v)) / 2e, are its independent check.
TEST(HigherOrder, HessianVectorProductOfAnMlpMatchesFiniteDifferencesOfItsGradient) {
  Mlp mlp;
  std::vector<Tensor> v;
  for (const Tensor& p : mlp.params) v.push_back(random_tensor(p.shape(), DType::f64));
  std::vector<Tensor> grads = autograd::grad({mlp.loss(mlp.params)}, mlp.params, {}, std::nullopt, true);
  Tensor dot = zeros({}, {.dtype = DType::f64});
  for (size_t i = 0; i < grads.size(); ++i) dot = dot + sum(grads[i] * v[i]);
  std::vector<Tensor> hvp = autograd::grad({dot}, mlp.params);

  const double eps = 1e-5;
  auto gradient_at = [&](double step) {
    std::vector<Tensor> shifted;
    for (size_t i = 0; i < mlp.params.size(); ++i) {
      Tensor p = (mlp.params[i].detach() + v[i] * step);
      p.requires_grad_(true);
      shifted.push_back(p);
    }
    return autograd::grad({mlp.loss(shifted)}, shifted);
  };
  std::vector<Tensor> plus = gradient_at(eps), minus = gradient_at(-eps);
  for (size_t i = 0; i < hvp.size(); ++i) {
    Tensor numeric = (plus[i] - minus[i]) / (2 * eps);
    EXPECT_TRUE(all_close(hvp[i], numeric, 1e-6, 1e-7)) << "parameter " << i << "\n" << hvp[i].str() << "\n" << numeric.str();
  }
  EXPECT_GT(norm(hvp[0]).item<double>(), 1e-3);  // a real curvature, not a vanishing one
}

// WGAN-GP: the critic's loss is mean D(fake) - mean D(real) + lambda
// mean((|dD/dx (x_hat)| - 1)^2) at points x_hat between real and fake samples.
struct Critic {
  std::vector<Tensor> params;  // w1 [2, 8], b1 [8], w2 [8, 1]

  Critic() {
    for (Shape shape : {Shape{2, 8}, Shape{8}, Shape{8, 1}}) {
      params.push_back(random_tensor(shape, DType::f64, -0.5, 0.5));
      params.back().requires_grad_(true);
    }
  }
  static Tensor score(const std::vector<Tensor>& p, const Tensor& x) {
    return matmul(tanh(matmul(x, p[0]) + p[1]), p[2]);
  }
  // The penalty, differentiable in the parameters (its inner gradient is taken with create_graph).
  static Tensor penalty(const std::vector<Tensor>& p, const Tensor& real, const Tensor& fake, const Tensor& mix) {
    Tensor x_hat = (real * mix + fake * rsub(mix, 1)).detach();
    x_hat.requires_grad_(true);
    Tensor gradient = autograd::grad({sum(score(p, x_hat))}, {x_hat}, {}, std::nullopt, true)[0];
    Tensor norms = sqrt(sum(gradient * gradient, {1}) + 1e-12);
    return mean((norms - 1) * (norms - 1));
  }
};

TEST(HigherOrder, GradientPenaltyReachesTheCriticParametersAsFiniteDifferencesSay) {
  Critic critic;
  Tensor real = random_tensor({4, 2}, DType::f64, 0.5, 1.5), fake = random_tensor({4, 2}, DType::f64, -1.5, -0.5);
  Tensor mix = random_tensor({4, 1}, DType::f64, 0, 1);
  autograd::GradcheckResult check = autograd::gradcheck(
      [&](const std::vector<Tensor>& p) { return Critic::penalty(p, real, fake, mix); }, critic.params);
  EXPECT_TRUE(check.ok) << check.report;
  Tensor penalty = Critic::penalty(critic.params, real, fake, mix);
  std::vector<Tensor> grads = autograd::grad({penalty}, critic.params);
  for (const Tensor& g : grads) EXPECT_GT(norm(g).item<double>(), 1e-6);  // every parameter is reached
}

TEST(HigherOrder, WganGpCriticTrains) {
  Critic critic;
  const double lambda = 10, lr = 0.02;
  auto batch = [](double center) { return random_tensor({16, 2}, DType::f64, center - 0.5, center + 0.5); };
  struct Losses {
    Tensor total, wasserstein, penalty;
  };
  auto critic_loss = [&](const Tensor& real, const Tensor& fake, const Tensor& mix) {
    Tensor wasserstein = mean(Critic::score(critic.params, fake)) - mean(Critic::score(critic.params, real));
    Tensor penalty = Critic::penalty(critic.params, real, fake, mix);
    return Losses{wasserstein + penalty * lambda, wasserstein, penalty};
  };
  Tensor eval_real = batch(1), eval_fake = batch(-1), eval_mix = random_tensor({16, 1}, DType::f64, 0, 1);
  Losses before = critic_loss(eval_real, eval_fake, eval_mix);
  for (int step = 0; step < 200; ++step) {
    Tensor loss = critic_loss(batch(1), batch(-1), random_tensor({16, 1}, DType::f64, 0, 1)).total;
    loss.backward();
    NoGradGuard no_grad;
    for (Tensor& p : critic.params) {
      p -= p.grad() * lr;
      p.set_grad(Tensor());
    }
  }
  Losses after = critic_loss(eval_real, eval_fake, eval_mix);
  EXPECT_LT(after.total.item<double>(), before.total.item<double>() - 0.5)
      << "before " << before.total.item<double>() << ", after " << after.total.item<double>();
  // The critic tells the clouds apart, its slope held near 1 by the penalty.
  EXPECT_LT(after.wasserstein.item<double>(), -1.0);
  EXPECT_LT(after.penalty.item<double>(), 0.1);
}

}  // namespace
}  // namespace ember::testing
