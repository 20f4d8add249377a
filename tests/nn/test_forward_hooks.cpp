// Module forward hooks and wrappers: order around forward(), replacing the
// input and the output, state restored when forward throws, removal by id
// (also from inside a hook), and errors.
#include "support/test_support.h"

namespace ember {
namespace {

using testing::all_close;

TEST(ForwardHooks, RunAroundForwardInRegistrationOrder) {
  nn::Linear linear(3, 2);
  std::vector<std::string> calls;
  linear.register_forward_pre_hook([&](nn::ForwardCall& call) {
    EXPECT_EQ(&call.module, &linear);
    EXPECT_TRUE(call.outputs.empty());
    calls.push_back("pre 1");
  });
  linear.register_forward_pre_hook([&](nn::ForwardCall&) { calls.push_back("pre 2"); });
  linear.register_forward_hook([&](nn::ForwardCall& call) {
    calls.push_back("post");
    ASSERT_EQ(call.inputs.size(), 1u);
    ASSERT_EQ(call.outputs.size(), 1u);
    EXPECT_EQ(call.inputs[0]->shape(), (Shape{4, 3}));
    EXPECT_EQ(call.outputs[0]->shape(), (Shape{4, 2}));
  });
  Tensor x = ones({4, 3});
  Tensor y = linear(x);
  EXPECT_EQ(calls, (std::vector<std::string>{"pre 1", "pre 2", "post"}));
  EXPECT_TRUE(all_close(y, linear.forward(x)));  // forward() itself runs no hook
  EXPECT_EQ(calls.size(), 3u);
}

TEST(ForwardHooks, PreHookReplacesTheInputAndHookTheOutput) {
  nn::Linear linear(3, 2);
  linear.register_forward_pre_hook([](nn::ForwardCall& call) { *call.inputs[0] = *call.inputs[0] * 2; });
  linear.register_forward_hook([](nn::ForwardCall& call) {
    EXPECT_TRUE(all_close(*call.inputs[0], full({1, 3}, 2.0)));  // the hook sees the replaced input
    *call.outputs[0] = *call.outputs[0] + 1;
  });
  Tensor x = ones({1, 3});
  EXPECT_TRUE(all_close(linear(x), linear.forward(x * 2) + 1));
  EXPECT_TRUE(all_close(x, ones({1, 3})));  // the caller's tensor is untouched
}

TEST(ForwardHooks, RemovedByIdEvenFromInsideAHook) {
  nn::Linear linear(2, 2);
  int pre = 0, post = 0;
  nn::ModuleHookId pre_id = linear.register_forward_pre_hook([&](nn::ForwardCall&) { ++pre; });
  nn::ModuleHookId post_id = 0;
  post_id = linear.register_forward_hook([&](nn::ForwardCall& call) {
    ++post;
    call.module.remove_hook(post_id);  // a one-shot hook
  });
  EXPECT_NE(pre_id, post_id);
  Tensor x = ones({1, 2});
  linear(x);
  linear(x);
  EXPECT_EQ(pre, 2);
  EXPECT_EQ(post, 1);
  linear.remove_hook(pre_id);
  linear(x);
  EXPECT_EQ(pre, 2);
  EXPECT_THROW(linear.remove_hook(pre_id), Error);  // already removed
}

TEST(ForwardHooks, GradientsFlowThroughAReplacedOutput) {
  nn::Linear linear(2, 1);
  linear.register_forward_hook([](nn::ForwardCall& call) { *call.outputs[0] = *call.outputs[0] * 3; });
  sum(linear(ones({1, 2}))).backward();
  EXPECT_TRUE(all_close(linear.weight.grad(), full({1, 2}, 3.0)));
}

TEST(ForwardHooks, EmptyHooksAreRejected) {
  nn::Linear linear(2, 1);
  EXPECT_THROW(linear.register_forward_pre_hook(nullptr), Error);
  EXPECT_THROW(linear.register_forward_hook(nullptr), Error);
  EXPECT_THROW(linear.register_forward_wrapper(nullptr), Error);
  EXPECT_THROW(linear.register_backward_pre_hook(nullptr), Error);
  EXPECT_THROW(linear.register_backward_hook(nullptr), Error);
}

TEST(ForwardWrappers, EncloseTheHooksFirstRegisteredOutermost) {
  nn::Linear linear(3, 2);
  std::vector<std::string> calls;
  linear.register_forward_pre_hook([&](nn::ForwardCall&) { calls.push_back("pre"); });
  linear.register_forward_hook([&](nn::ForwardCall&) { calls.push_back("post"); });
  auto wrapper = [&](std::string name) {
    return [&calls, name](nn::ForwardCall& call, const std::function<void()>& proceed) {
      calls.push_back(name + " in");
      proceed();
      EXPECT_EQ(call.outputs.size(), 1u);  // the result's tensors are there once proceed returns
      calls.push_back(name + " out");
    };
  };
  linear.register_forward_wrapper(wrapper("outer"));
  nn::ModuleHookId inner = linear.register_forward_wrapper(wrapper("inner"));
  linear(ones({1, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"outer in", "inner in", "pre", "post", "inner out", "outer out"}));
  linear.remove_hook(inner);
  calls.clear();
  linear(ones({1, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"outer in", "pre", "post", "outer out"}));
}

// Catches: forward-scoped wrappers run around the hooks (as call-scoped
// ones), or left out of remove_hook.
TEST(ForwardWrappers, ForwardScopeRunsBetweenThePreHooksAndTheHooks) {
  nn::Linear linear(3, 2);
  std::vector<std::string> calls;
  linear.register_forward_pre_hook([&](nn::ForwardCall&) { calls.push_back("pre"); });
  linear.register_forward_hook([&](nn::ForwardCall& call) {
    calls.push_back("post");
    EXPECT_EQ(call.outputs.size(), 1u);
  });
  auto wrapper = [&](std::string name) {
    return [&calls, name](nn::ForwardCall&, const std::function<void()>& proceed) {
      calls.push_back(name + " in");
      proceed();
      calls.push_back(name + " out");
    };
  };
  linear.register_forward_wrapper(wrapper("call"));
  nn::ModuleHookId outer = linear.register_forward_wrapper(wrapper("forward 1"), nn::WrapperScope::forward);
  linear.register_forward_wrapper(wrapper("forward 2"), nn::WrapperScope::forward);
  linear(ones({1, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"call in", "pre", "forward 1 in", "forward 2 in", "forward 2 out",
                                             "forward 1 out", "post", "call out"}));
  linear.remove_hook(outer);
  calls.clear();
  linear(ones({1, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"call in", "pre", "forward 2 in", "forward 2 out", "post", "call out"}));
}

TEST(ForwardWrappers, ReplaceInputAndOutputWithGradientsFlowing) {
  nn::Linear linear(2, 1);
  linear.register_forward_wrapper([](nn::ForwardCall& call, const std::function<void()>& proceed) {
    *call.inputs[0] = *call.inputs[0] * 2;
    proceed();
    *call.outputs[0] = *call.outputs[0] * 3;
  });
  sum(linear(ones({1, 2}))).backward();
  EXPECT_TRUE(all_close(linear.weight.grad(), full({1, 2}, 6.0)));
}

// What the Accelerator relies on: state set with RAII around `call` is
// restored when forward throws; a pre-hook/hook pair would leave it set.
// The call's result comes from the forward that proceed() runs. Catches: a
// wrapper skipping proceed() (the call read an empty std::optional and
// returned an undefined tensor), or calling it twice (forward and its hooks
// ran twice, the outputs listed twice).
TEST(ForwardWrappers, MustProceedExactlyOnce) {
  nn::Linear skipping(2, 2);
  skipping.register_forward_wrapper([](nn::ForwardCall&, const std::function<void()>&) {});
  EXPECT_EMBER_ERROR(skipping(ones({1, 2})), "Linear: forward wrapper 0 returned without calling proceed()");
  nn::Linear twice(2, 2);
  int forwards = 0;
  twice.register_forward_hook([&](nn::ForwardCall&) { ++forwards; });
  twice.register_forward_wrapper([](nn::ForwardCall&, const std::function<void()>& proceed) {
    proceed();
    proceed();
  });
  EXPECT_EMBER_ERROR(twice(ones({1, 2})), "Linear: forward wrapper 0 called proceed() a second time");
  EXPECT_EQ(forwards, 1);
}

TEST(ForwardWrappers, StateSetAroundTheCallIsRestoredWhenForwardThrows) {
  nn::Linear linear(3, 2);
  int depth = 0;
  linear.register_forward_wrapper([&](nn::ForwardCall&, const std::function<void()>& proceed) {
    struct Enter {
      int& depth;
      explicit Enter(int& d) : depth(d) { ++depth; }
      ~Enter() { --depth; }
    } enter(depth);
    proceed();
  });
  EXPECT_EMBER_ERROR(linear(ones({1, 4})), "does not end in in_features");
  EXPECT_EQ(depth, 0);
}

// A profiled call that throws still has its module span around the kernels
// it ran, as PyTorch's record_function. Catches: the span recorded after the
// call returned (the throwing call's kernels had no module around them).
TEST(ForwardHooks, AProfiledCallThatThrowsKeepsItsModuleSpan) {
  nn::Linear linear(3, 2);
  profiler::Profile profile;
  linear(ones({1, 3}));
  EXPECT_THROW(linear(ones({1, 4})), Error);
  profile.stop();
  int64_t spans = 0;
  for (const profiler::Event& event : profile.events())
    spans += event.category == profiler::Category::module && event.name == "Linear";
  EXPECT_EQ(spans, 2);
}

// A forward writing through a non-const reference (a KV cache, a counter):
// with any hook registered, call() copied the arguments and the writes were
// lost. Mutation caught: CallArgument decaying every argument -> the cache
// holds 1 tensor and the counter 1 after two calls.
TEST(ForwardHooks, WritesThroughReferenceArgumentsReachTheCaller) {
  struct CacheNet : nn::Module {
    using nn::Module::forward;
    Tensor forward(const Tensor& x, std::vector<Tensor>& cache, int& steps) {
      cache.push_back(x * 2.0);
      ++steps;
      return x + 1.0;
    }
    auto operator()(const Tensor& x, std::vector<Tensor>& cache, int& steps) { return call(*this, x, cache, steps); }
  } net;
  std::vector<Tensor> cache;
  int steps = 0;
  net(ones({2}), cache, steps);
  int seen = 0;
  net.register_forward_hook([&](nn::ForwardCall& call) { seen = int(call.inputs.size()); });
  Tensor x = ones({2});
  net(x, cache, steps);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(seen, 2);  // x and the cache's one tensor before the forward appended
  // A Tensor argument is still a copy: a pre-hook replacing it leaves the caller's.
  net.register_forward_pre_hook([](nn::ForwardCall& call) { *call.inputs[0] = zeros({2}); });
  net(x, cache, steps);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 1}));
}

// A wrapper that caught the forward's exception left call() reading an empty
// result (undefined tensors, or an assertion with _GLIBCXX_ASSERTIONS).
// Mutation caught: the result check removed from Module::call -> no error.
TEST(ForwardWrappers, AWrapperThatSwallowsTheForwardsErrorIsAnError) {
  nn::Linear linear(3, 2);
  linear.register_forward_wrapper([](nn::ForwardCall&, const std::function<void()>& proceed) {
    try {
      proceed();
    } catch (const Error&) {
    }
  });
  EXPECT_EMBER_ERROR(linear(ones({4, 5})), "Linear: the call ended without the forward's result");
}

// An undefined input (a pre-hook's Tensor()) crashed Linear's forward.
TEST(ForwardHooks, AnUndefinedInputToLinearIsAnError) {
  nn::Linear linear(3, 2);
  EXPECT_EMBER_ERROR(linear.forward(Tensor()), "linear: the input is undefined");
}

// A module whose output is a leaf (its own parameter) registered a backward
// hook on that same tensor at every call: pass k ran the pre-hooks k times.
// Mutation caught: the view for leaf outputs removed from arm_backward_hooks
// -> 1, 2, 3 pre-hook runs.
TEST(BackwardHooks, ALeafOutputRunsThePreHooksOncePerPass) {
  struct Queries : nn::Module {
    Tensor& q;
    Queries() : q(register_parameter("q", ones({2, 3}))) {}
    Tensor forward(const Tensor&) override { return q; }
  } module;
  int runs = 0;
  module.register_backward_pre_hook([&](nn::Module&) { ++runs; });
  for (int pass = 1; pass <= 3; ++pass) {
    runs = 0;
    sum(module(ones({1})) * 3.0).backward();
    EXPECT_EQ(runs, 1) << "pass " << pass;
  }
  EXPECT_EQ(module.q.grad().to_vector<float>(), std::vector<float>(6, 9.0f));
}

}  // namespace
}  // namespace ember
