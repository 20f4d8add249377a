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
  linear.register_forward_pre_hook([&](nn::Module& module, const Tensor&) {
    EXPECT_EQ(&module, &linear);
    calls.push_back("pre 1");
    return Tensor();  // keep the input
  });
  linear.register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    calls.push_back("pre 2");
    return Tensor();
  });
  linear.register_forward_hook([&](nn::Module&, const Tensor& input, Tensor& output) {
    calls.push_back("post");
    EXPECT_EQ(input.shape(), (Shape{4, 3}));
    EXPECT_EQ(output.shape(), (Shape{4, 2}));
  });
  Tensor x = ones({4, 3});
  Tensor y = linear(x);
  EXPECT_EQ(calls, (std::vector<std::string>{"pre 1", "pre 2", "post"}));
  EXPECT_TRUE(all_close(y, linear.forward(x)));  // forward() itself runs no hook
  EXPECT_EQ(calls.size(), 3u);
}

TEST(ForwardHooks, PreHookReplacesTheInputAndHookTheOutput) {
  nn::Linear linear(3, 2);
  linear.register_forward_pre_hook([](nn::Module&, const Tensor& input) { return input * 2; });
  linear.register_forward_hook([](nn::Module&, const Tensor& input, Tensor& output) {
    EXPECT_TRUE(all_close(input, full({1, 3}, 2.0)));  // the hook sees the replaced input
    output = output + 1;
  });
  Tensor x = ones({1, 3});
  EXPECT_TRUE(all_close(linear(x), linear.forward(x * 2) + 1));
}

TEST(ForwardHooks, RemovedByIdEvenFromInsideAHook) {
  nn::Linear linear(2, 2);
  int pre = 0, post = 0;
  nn::ForwardHookId pre_id = linear.register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    ++pre;
    return Tensor();
  });
  nn::ForwardHookId post_id = 0;
  post_id = linear.register_forward_hook([&](nn::Module& module, const Tensor&, Tensor&) {
    ++post;
    module.remove_forward_hook(post_id);  // a one-shot hook
  });
  EXPECT_NE(pre_id, post_id);
  Tensor x = ones({1, 2});
  linear(x);
  linear(x);
  EXPECT_EQ(pre, 2);
  EXPECT_EQ(post, 1);
  linear.remove_forward_hook(pre_id);
  linear(x);
  EXPECT_EQ(pre, 2);
  EXPECT_THROW(linear.remove_forward_hook(pre_id), Error);  // already removed
}

TEST(ForwardHooks, GradientsFlowThroughAReplacedOutput) {
  nn::Linear linear(2, 1);
  linear.register_forward_hook([](nn::Module&, const Tensor&, Tensor& output) { output = output * 3; });
  sum(linear(ones({1, 2}))).backward();
  EXPECT_TRUE(all_close(linear.weight.grad(), full({1, 2}, 3.0)));
}

TEST(ForwardHooks, EmptyHooksAreRejected) {
  nn::Linear linear(2, 1);
  EXPECT_THROW(linear.register_forward_pre_hook(nullptr), Error);
  EXPECT_THROW(linear.register_forward_hook(nullptr), Error);
  EXPECT_THROW(linear.register_forward_wrapper(nullptr), Error);
}

TEST(ForwardWrappers, EncloseTheHooksFirstRegisteredOutermost) {
  nn::Linear linear(3, 2);
  std::vector<std::string> calls;
  linear.register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    calls.push_back("pre");
    return Tensor();
  });
  linear.register_forward_hook([&](nn::Module&, const Tensor&, Tensor&) { calls.push_back("post"); });
  auto wrapper = [&](std::string name) {
    return [&calls, name](nn::Module&, const Tensor& input, const std::function<Tensor(const Tensor&)>& call) {
      calls.push_back(name + " in");
      Tensor output = call(input);
      calls.push_back(name + " out");
      return output;
    };
  };
  linear.register_forward_wrapper(wrapper("outer"));
  nn::ForwardHookId inner = linear.register_forward_wrapper(wrapper("inner"));
  linear(ones({1, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"outer in", "inner in", "pre", "post", "inner out", "outer out"}));
  linear.remove_forward_hook(inner);
  calls.clear();
  linear(ones({1, 3}));
  EXPECT_EQ(calls, (std::vector<std::string>{"outer in", "pre", "post", "outer out"}));
}

TEST(ForwardWrappers, ReplaceInputAndOutputWithGradientsFlowing) {
  nn::Linear linear(2, 1);
  linear.register_forward_wrapper(
      [](nn::Module&, const Tensor& input, const std::function<Tensor(const Tensor&)>& call) {
        return call(input * 2) * 3;
      });
  sum(linear(ones({1, 2}))).backward();
  EXPECT_TRUE(all_close(linear.weight.grad(), full({1, 2}, 6.0)));
}

// What the Accelerator relies on: state set with RAII around `call` is
// restored when forward throws; a pre-hook/hook pair would leave it set.
TEST(ForwardWrappers, StateSetAroundTheCallIsRestoredWhenForwardThrows) {
  nn::Linear linear(3, 2);
  int depth = 0;
  linear.register_forward_wrapper(
      [&](nn::Module&, const Tensor& input, const std::function<Tensor(const Tensor&)>& call) {
        struct Enter {
          int& depth;
          explicit Enter(int& d) : depth(d) { ++depth; }
          ~Enter() { --depth; }
        } enter(depth);
        return call(input);
      });
  EXPECT_EMBER_ERROR(linear(ones({1, 4})), "does not end in in_features");
  EXPECT_EQ(depth, 0);
}

}  // namespace
}  // namespace ember
