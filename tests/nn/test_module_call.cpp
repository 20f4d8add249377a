// Module calls with any forward signature (Note [Module calls]): the hooks see
// the tensors among the arguments and the result whether forward takes
// (input, mask) or returns (logits, loss); backward pre-hooks and hooks run
// once per backward in order; handles that cannot be assigned do not compile.
#include <type_traits>

#include "support/test_support.h"

namespace ember {
namespace {

namespace F = nn::functional;
using testing::all_close;

// forward(input, mask): the mask zeroes hidden features.
struct MaskedNet : nn::Module {
  using nn::Module::forward;  // the single-tensor form stays the base's (it throws)
  MaskedNet() {
    first = register_module("first", nn::Linear(4, 6));
    last = register_module("last", nn::Linear(6, 3));
  }
  Tensor forward(const Tensor& input, const std::optional<Tensor>& mask) {
    Tensor hidden = tanh((*first)(input));
    return (*last)(mask ? hidden * *mask : hidden);
  }
  auto operator()(const Tensor& input, const std::optional<Tensor>& mask) { return call(*this, input, mask); }
  std::shared_ptr<nn::Linear> first, last;
};

// forward(idx, targets) -> (logits, loss), as a language model writes it.
struct LossNet : nn::Module {
  using nn::Module::forward;
  LossNet() { head = register_module("head", nn::Linear(4, 3)); }
  std::pair<Tensor, Tensor> forward(const Tensor& input, const Tensor& targets) {
    Tensor logits = (*head)(input);
    return {logits, F::cross_entropy(logits, targets)};
  }
  auto operator()(const Tensor& input, const Tensor& targets) { return call(*this, input, targets); }
  std::shared_ptr<nn::Linear> head;
};

TEST(ModuleCall, HooksSeeEveryTensorArgumentAndResult) {
  MaskedNet net;
  std::vector<size_t> seen_inputs, seen_outputs;
  net.register_forward_hook([&](nn::ForwardCall& call) {
    seen_inputs.push_back(call.inputs.size());
    seen_outputs.push_back(call.outputs.size());
  });
  Tensor x = randn({2, 4});
  Tensor mask = ones({2, 6});
  Tensor with_mask = net(x, mask);
  Tensor without_mask = net(x, std::nullopt);
  EXPECT_EQ(seen_inputs, (std::vector<size_t>{2, 1}));  // the absent optional holds no tensor
  EXPECT_EQ(seen_outputs, (std::vector<size_t>{1, 1}));
  EXPECT_TRUE(all_close(with_mask, net.forward(x, mask)));
  EXPECT_TRUE(all_close(with_mask, without_mask));  // a mask of ones changes nothing
}

TEST(ModuleCall, PreHookReplacesASecondArgumentWithoutTouchingTheCallers) {
  MaskedNet net;
  net.register_forward_pre_hook([](nn::ForwardCall& call) { *call.inputs[1] = zeros({2, 6}); });
  Tensor x = randn({2, 4});
  Tensor mask = ones({2, 6});
  Tensor y = net(x, mask);
  EXPECT_TRUE(all_close(y, net.forward(x, zeros({2, 6}))));
  EXPECT_TRUE(all_close(mask, ones({2, 6})));
}

TEST(ModuleCall, HookReplacesOneTensorOfAPairResultWithGradientsFlowing) {
  LossNet net;
  net.register_forward_hook([](nn::ForwardCall& call) {
    ASSERT_EQ(call.outputs.size(), 2u);
    *call.outputs[1] = *call.outputs[1] * 2;  // the loss
  });
  Tensor x = randn({5, 4});
  Tensor targets = randint(0, 3, {5});
  auto [logits, loss] = net(x, targets);
  auto [plain_logits, plain_loss] = net.forward(x, targets);
  EXPECT_TRUE(all_close(logits, plain_logits));
  EXPECT_NEAR(loss.item<double>(), 2 * plain_loss.item<double>(), 1e-6);
  loss.backward();
  Tensor doubled = net.head->weight.grad().clone();
  net.zero_grad();
  plain_loss.backward();
  EXPECT_TRUE(all_close(doubled, net.head->weight.grad() * 2));
}

TEST(ModuleCall, WrapperRunsAroundAnyForward) {
  LossNet net;
  int depth = 0, calls = 0;
  net.register_forward_wrapper([&](nn::ForwardCall& call, const std::function<void()>& proceed) {
    ++depth;
    proceed();
    --depth;
    ++calls;
    EXPECT_EQ(call.outputs.size(), 2u);
  });
  net.register_forward_pre_hook([&](nn::ForwardCall&) { EXPECT_EQ(depth, 1); });
  net(randn({3, 4}), randint(0, 3, {3}));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(depth, 0);
}

// What sharding relies on: a unit's backward pre-hook runs before any
// gradient flows inside it (so its parameters can be gathered first), its
// backward hook after every one of its parameters has its gradient (so they
// can be reduced and freed), once per backward even when it is called twice.
TEST(ModuleCall, BackwardHooksBracketTheModulesGradients) {
  auto outer = std::make_shared<nn::Sequential>(nn::Linear(4, 4), nn::Tanh(), nn::Linear(4, 2));
  auto& inner = *(*outer)[2];
  std::vector<std::string> events;
  inner.register_backward_pre_hook([&](nn::Module& module) {
    EXPECT_EQ(&module, &inner);
    events.push_back("pre");
    for (const Tensor& parameter : module.parameters()) EXPECT_FALSE(parameter.grad().defined());
  });
  inner.register_backward_hook([&](nn::Module& module) {
    events.push_back("post");
    for (const Tensor& parameter : module.parameters()) EXPECT_TRUE(parameter.grad().defined());
  });
  Tensor x = randn({3, 4});
  sum((*outer)(x)).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre", "post"}));

  events.clear();
  outer->zero_grad();
  Tensor twice = (*outer)(x) + inner(tanh(x));  // the unit called twice in one forward
  sum(twice).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"pre", "pre", "post"}));  // pre per call, post per backward
}

// A parameter the forward does not use never accumulates: the end of the
// backward pass fires the hook all the same (mutation: no queued callback ->
// the hook never runs and a sharded unit would never reduce).
TEST(ModuleCall, BackwardHookFiresAtTheEndWhenAParameterIsUnused) {
  struct HalfUsed : nn::Module {
    HalfUsed() {
      used = register_module("used", nn::Linear(3, 3));
      unused = register_module("unused", nn::Linear(3, 3));
    }
    Tensor forward(const Tensor& x) override { return (*used)(x); }
    std::shared_ptr<nn::Linear> used, unused;
  } net;
  int posts = 0;
  net.register_backward_hook([&](nn::Module&) { ++posts; });
  sum(net(randn({2, 3}))).backward();
  EXPECT_EQ(posts, 1);
  sum(net(randn({2, 3}))).backward();
  EXPECT_EQ(posts, 2);
}

// Gradual unfreezing: a parameter that starts requiring grad after the hooks
// first armed is waited for from the module's next call. Catches: the watched
// parameters fixed at the first call (the hook fired before the unfrozen
// layer's gradient existed, silently).
TEST(ModuleCall, BackwardHookWaitsForParametersUnfrozenLater) {
  nn::Sequential model(nn::Linear(3, 3), nn::Linear(3, 1));
  auto first = model.at<nn::Linear>(0);
  first->weight.requires_grad_(false);
  first->bias.requires_grad_(false);
  std::vector<bool> seen;
  model.register_backward_hook([&](nn::Module&) { seen.push_back(first->weight.grad().defined()); });
  Tensor x = randn({4, 3});
  sum(model(x)).backward();
  first->weight.requires_grad_(true);
  first->bias.requires_grad_(true);
  sum(model(x)).backward();
  EXPECT_EQ(seen, (std::vector<bool>{false, true}));
}

// PyTorch's full backward hooks run on every pass through a retained graph.
// Catches: the per-call "reached" flag never cleared (the second pass ran no
// module hook at all).
TEST(ModuleCall, BackwardHooksRunOnEveryPassThroughARetainedGraph) {
  nn::Linear linear(3, 2);
  int pres = 0, posts = 0;
  linear.register_backward_pre_hook([&](nn::Module&) { ++pres; });
  linear.register_backward_hook([&](nn::Module&) { ++posts; });
  Tensor loss = sum(linear(randn({4, 3})));
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(pres, 1);
  EXPECT_EQ(posts, 1);
  loss.backward();
  EXPECT_EQ(pres, 2);
  EXPECT_EQ(posts, 2);
}

TEST(ModuleCall, NoHooksOutsideGradMode) {
  nn::Linear linear(2, 2);
  int pres = 0;
  linear.register_backward_pre_hook([&](nn::Module&) { ++pres; });
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(linear(ones({1, 2})).requires_grad());
  }
  sum(linear(ones({1, 2}))).backward();
  EXPECT_EQ(pres, 1);
}

TEST(ModuleCall, QueueCallbackOutsideBackwardIsAnError) {
  EXPECT_EMBER_ERROR(autograd::queue_callback([] {}), "outside a backward pass");
}

// Handles returned by value cannot be assigned: `p.grad() = g` used to
// compile and change nothing.
static_assert(!std::is_assignable_v<Tensor, Tensor>);
static_assert(!std::is_assignable_v<Tensor&&, const Tensor&>);
static_assert(std::is_assignable_v<Tensor&, Tensor>);
static_assert(!std::is_assignable_v<decltype(std::declval<nn::Module&>().child("x")), std::shared_ptr<nn::Module>>);

}  // namespace
}  // namespace ember
