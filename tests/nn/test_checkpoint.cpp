// Activation checkpointing (nn/checkpoint.h): gradients bit for bit equal to
// the unchecked run's, the hooks that run again and those that do not, the
// memory it saves, and each error. Why the equality is exact: backward
// differentiates the forward's own graph, and the recomputation that fills
// its saved tensors runs the same CPU kernels on the same values with the same
// random stream, so every saved tensor is bitwise the one the unchecked run
// kept (Note [Activation checkpointing] in nn/README.md).
#include <cstdio>
#include <cstring>
#include <map>

#include "support/test_support.h"

namespace ember {
namespace {

using testing::all_close;
using testing::bitwise_equal;

// The gradients of `parameters` and of `inputs` after one backward of `loss`, cloned.
std::vector<Tensor> gradients_of(const Tensor& loss, const std::vector<Tensor>& tensors) {
  loss.backward();
  std::vector<Tensor> grads;
  for (const Tensor& t : tensors) grads.push_back(t.grad().defined() ? t.grad().clone() : Tensor());
  return grads;
}

void clear_grads(const std::vector<Tensor>& tensors) {
  for (Tensor t : tensors) t.set_grad(Tensor());
}

void expect_all_bitwise_equal(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(actual[i].defined()) << "gradient " << i;
    EXPECT_TRUE(bitwise_equal(actual[i], expected[i])) << "gradient " << i;
  }
}

std::vector<Tensor> with(std::vector<Tensor> tensors, const Tensor& extra) {
  tensors.push_back(extra);
  return tensors;
}

nn::Sequential mlp_with_dropout() {
  manual_seed(1);
  return nn::Sequential(nn::Linear(16, 32), nn::GELU(), nn::Dropout(0.3), nn::Linear(32, 16), nn::Dropout(0.2));
}

// Catches: not restoring the random stream before the recomputation (the
// dropout masks then differ, and so do the saved inputs of the second Linear);
// also checks that the caller's stream continues as if nothing had been
// recomputed (not putting it back afterwards shifts every later draw).
TEST(Checkpoint, MlpWithDropoutFunctionGradientsAreBitExact) {
  nn::Sequential mlp = mlp_with_dropout();
  std::vector<Tensor> tensors = with(mlp.parameters(), testing::random_tensor({8, 16}, DType::f32).requires_grad_());
  Tensor x = tensors.back();
  auto function = [&mlp](const Tensor& input) { return mlp(input); };

  manual_seed(7);
  Tensor y_plain = function(x);
  std::vector<Tensor> plain = gradients_of(sum(y_plain * y_plain), tensors);
  GeneratorState after_plain = default_generator().state();
  clear_grads(tensors);

  manual_seed(7);
  Tensor y_checked = nn::checkpoint(function, x);
  EXPECT_TRUE(bitwise_equal(y_checked, y_plain));
  std::vector<Tensor> checked = gradients_of(sum(y_checked * y_checked), tensors);
  expect_all_bitwise_equal(checked, plain);
  EXPECT_EQ(default_generator().state().offset, after_plain.offset);
}

// The module form calls the module through its hooks, so they run again in backward.
TEST(Checkpoint, ModuleFormRunsTheModulesHooksAgain) {
  nn::Sequential mlp = mlp_with_dropout();
  int pre_hooks = 0;
  mlp.register_forward_pre_hook([&](nn::ForwardCall&) { ++pre_hooks; });
  std::vector<Tensor> tensors = with(mlp.parameters(), testing::random_tensor({8, 16}, DType::f32).requires_grad_());
  Tensor x = tensors.back();
  manual_seed(3);
  std::vector<Tensor> plain = gradients_of(sum(mlp(x)), tensors);
  clear_grads(tensors);
  manual_seed(3);
  std::vector<Tensor> checked = gradients_of(sum(nn::checkpoint(mlp, x)), tensors);
  expect_all_bitwise_equal(checked, plain);
  EXPECT_EQ(pre_hooks, 3);  // plain, checkpointed forward, recomputation
}

// Catches: restoring only the default generator (this block's dropout draws
// from a generator of its own), or losing the attention's saved tensors; the
// block has dropout in attention and MLP, layer norms and causal attention.
TEST(Checkpoint, TransformerBlockOptionGradientsAreBitExact) {
  Generator generator(2);
  nn::TransformerBlock block(
      {.embed_dim = 32, .num_heads = 4, .dropout = 0.1, .num_layers = 2, .generator = &generator});
  std::vector<Tensor> tensors =
      with(block.parameters(), testing::random_tensor({2, 6, 32}, DType::f32).requires_grad_());
  Tensor x = tensors.back();

  generator.manual_seed(11);
  Tensor y_plain = block(x);
  std::vector<Tensor> plain = gradients_of(mean(y_plain * y_plain), tensors);
  GeneratorState after_plain = generator.state();
  clear_grads(tensors);

  nn::set_activation_checkpointing(block, true);
  EXPECT_TRUE(block.activation_checkpointing());
  generator.manual_seed(11);
  Tensor y_checked = block(x);
  EXPECT_TRUE(bitwise_equal(y_checked, y_plain));
  std::vector<Tensor> checked = gradients_of(mean(y_checked * y_checked), tensors);
  expect_all_bitwise_equal(checked, plain);
  EXPECT_EQ(generator.state().offset, after_plain.offset);
}

// A forward of another signature: two tensors and a number in, a pair out.
struct TwoInputs : nn::Module {
  using nn::Module::forward;
  TwoInputs() : weight(register_parameter("weight", testing::random_tensor({4, 4}, DType::f32))) {}
  std::pair<Tensor, Tensor> forward(const Tensor& a, const Tensor& b, double scale) {
    Tensor h = gelu(matmul(a, weight)) * b;
    return {h * scale, tanh(h)};
  }
  auto operator()(const Tensor& a, const Tensor& b, double scale) { return call(*this, a, b, scale); }
  Tensor& weight;
};

TEST(Checkpoint, TwoInputModuleAndPairOutputsAreBitExact) {
  TwoInputs module;
  Tensor a = testing::random_tensor({3, 4}, DType::f32).requires_grad_();
  Tensor b = testing::random_tensor({3, 4}, DType::f32).requires_grad_();
  std::vector<Tensor> tensors{module.weight, a, b};
  auto loss_of = [](const std::pair<Tensor, Tensor>& out) { return sum(out.first * out.second); };

  std::vector<Tensor> plain = gradients_of(loss_of(module(a, b, 0.5)), tensors);
  clear_grads(tensors);
  module.set_activation_checkpointing(true);
  std::vector<Tensor> by_option = gradients_of(loss_of(module(a, b, 0.5)), tensors);
  expect_all_bitwise_equal(by_option, plain);
  clear_grads(tensors);
  module.set_activation_checkpointing(false);
  std::vector<Tensor> by_function = gradients_of(
      loss_of(nn::checkpoint([&module](const Tensor& p, const Tensor& q, double s) { return module.forward(p, q, s); },
                             a, b, 0.5)),
      tensors);
  expect_all_bitwise_equal(by_function, plain);
}

// Catches: a recomputation that returns wrong values for some saved tensor
// (finite differences see any error in the gradient of the whole function).
TEST(Checkpoint, GradcheckThroughACheckpointedFunction) {
  auto inner = [](const Tensor& a, const Tensor& b) { return tanh(matmul(a, b)) * sum(sigmoid(a)); };
  auto fn = [&](const std::vector<Tensor>& in) { return nn::checkpoint(inner, in[0], in[1]); };
  std::vector<Tensor> inputs{testing::random_tensor({3, 4}, DType::f64), testing::random_tensor({4, 2}, DType::f64)};
  autograd::GradcheckResult result = autograd::gradcheck(fn, inputs);
  EXPECT_TRUE(result.ok) << result.report;
  // Double backward works too: the graph differentiated is the forward's own.
  autograd::GradcheckResult second = autograd::gradgradcheck(fn, inputs);
  EXPECT_TRUE(second.ok) << second.report;
}

// PyTorch's non-reentrant checkpoint does this; the reentrant one warns and
// leaves the weights without gradients.
TEST(Checkpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  manual_seed(4);
  nn::Linear linear(5, 3);
  Tensor x = testing::random_tensor({2, 5}, DType::f32);
  std::vector<Tensor> tensors = linear.parameters();
  std::vector<Tensor> plain = gradients_of(sum(gelu(linear(x))), tensors);
  clear_grads(tensors);
  Tensor y = nn::checkpoint([&](const Tensor& input) { return gelu(linear(input)); }, x);
  EXPECT_TRUE(y.requires_grad());
  expect_all_bitwise_equal(gradients_of(sum(y), tensors), plain);
}

// Any argument and result type: numbers and an options-like string pass
// through; an output without gradient (an integer tensor, a detached one)
// stays one; a tuple of results comes back whole.
TEST(Checkpoint, NonTensorArgumentsAndOutputsWithoutGradient) {
  Tensor x = testing::random_tensor({4, 3}, DType::f32).requires_grad_();
  auto function = [](const Tensor& input, int power, const std::string& label) {
    Tensor y = pow(input, double(power));
    return std::make_tuple(y, argmax(y, 1), y.detach() * 2, label);
  };
  auto [y, indices, constant, label] = nn::checkpoint(function, x, 3, std::string("cube"));
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(indices.requires_grad());
  EXPECT_FALSE(constant.requires_grad());
  EXPECT_EQ(label, "cube");
  sum(y).backward();
  EXPECT_TRUE(all_close(x.grad(), 3 * x.detach() * x.detach()));
}

TEST(Checkpoint, UnderNoGradItIsAPlainCall) {
  Tensor x = testing::random_tensor({4, 3}, DType::f32).requires_grad_();
  NoGradGuard no_grad;
  int calls = 0;
  Tensor y = nn::checkpoint(
      [&](const Tensor& input) {
        ++calls;
        return exp(input);
      },
      x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(bitwise_equal(y, exp(x)));
  EXPECT_EQ(calls, 1);
}

// Catches: not checking the arguments' versions before recomputing. The
// function saves nothing of x itself (x + 1 is what gelu saves), so no saved
// tensor's own check would notice, and backward would use the new values.
TEST(Checkpoint, ArgumentModifiedInPlaceBeforeBackwardIsAnError) {
  Tensor w = testing::random_tensor({3}, DType::f32).requires_grad_();
  Tensor x = testing::random_tensor({4, 3}, DType::f32);
  Tensor y = nn::checkpoint([&](const Tensor& input) { return gelu(input + 1) * w; }, x);
  x *= 2;
  EXPECT_EMBER_ERROR(sum(y).backward(), "nn::checkpoint: argument tensor 0 (shape [4, 3]) was modified in place");
}

TEST(Checkpoint, FunctionModifyingItsArgumentIsRefused) {
  Tensor w = testing::random_tensor({3}, DType::f32).requires_grad_();
  Tensor x = testing::random_tensor({4, 3}, DType::f32);
  EXPECT_EMBER_ERROR(nn::checkpoint([&](Tensor input) { return (input += 1) * w; }, x),
                     "nn::checkpoint: the function modified its argument tensor 0");
}

// Catches: trusting the recomputation blindly (a saved tensor of another
// shape, or one too few, would be handed to the wrong formula).
TEST(Checkpoint, RecomputationThatDiffersIsAnError) {
  Tensor x = testing::random_tensor({4, 3}, DType::f32).requires_grad_();
  int calls = 0;
  auto more_ops_second_time = [&](const Tensor& input) {
    Tensor y = exp(input);
    if (calls++ > 0) y = exp(y) - exp(y).detach() + y;  // the same value, more saved tensors
    return y;
  };
  Tensor y = nn::checkpoint(more_ops_second_time, x);
  EXPECT_EMBER_ERROR(sum(y).backward(), "nn::checkpoint: running the function again in backward saved 3 tensors");
  calls = 0;
  auto other_shape_second_time = [&](const Tensor& input) {
    return calls++ == 0 ? sum(exp(input)) : sum(exp(input.narrow(0, 0, 2)));
  };
  Tensor z = nn::checkpoint(other_shape_second_time, x);
  EXPECT_EMBER_ERROR(z.backward(), "saved, as tensor 0, one of shape [2, 3]");
}

// A checkpoint inside a checkpoint: the inner frame keeps its own copy of its
// arguments (an activation of the outer region) and recomputes from it; the
// outer recomputation runs the inner checkpoint once more, whose saved
// tensors go to a fresh inner frame and are dropped. Gradients stay exact.
TEST(Checkpoint, NestedCheckpointsAreBitExact) {
  nn::Sequential mlp = mlp_with_dropout();
  nn::Linear head(16, 16);
  std::vector<Tensor> tensors = with(mlp.parameters(), testing::random_tensor({8, 16}, DType::f32).requires_grad_());
  for (const Tensor& p : head.parameters()) tensors.push_back(p);
  Tensor x = tensors[mlp.parameters().size()];
  auto inner = [&](const Tensor& h) { return gelu(head(h)); };
  manual_seed(5);
  std::vector<Tensor> plain = gradients_of(sum(inner(mlp(x))), tensors);
  clear_grads(tensors);
  manual_seed(5);
  Tensor y = nn::checkpoint([&](const Tensor& input) { return nn::checkpoint(inner, mlp(input)); }, x);
  expect_all_bitwise_equal(gradients_of(sum(y), tensors), plain);
}

// Region B takes a gradient through region A's output (A recomputes inside
// B's forward) before B's own first draw: B's recorder took A's restored
// generator state for its own, and B's recomputation drew A's dropout mask.
// Mutation caught: Frame::recompute without GeneratorUsesHidden (l2's
// weight gradient differs).
TEST(Checkpoint, ARecomputationInsideAnotherRegionLeavesItsRandomNumbers) {
  manual_seed(1);
  nn::Linear l1(16, 32), l2(32, 16);
  Tensor x = testing::random_tensor({8, 16}, DType::f32).requires_grad_();
  std::vector<Tensor> tensors = with(l1.parameters(), x);
  for (const Tensor& p : l2.parameters()) tensors.push_back(p);
  auto region_a = [&](const Tensor& in) { return l2(dropout(gelu(l1(in)), 0.5)); };
  std::vector<std::vector<Tensor>> grads;
  for (bool checkpointed : {false, true}) {
    clear_grads(tensors);
    manual_seed(21);
    Tensor a = checkpointed ? nn::checkpoint(region_a, x) : region_a(x);
    Tensor s = sum(a * a);
    auto region_b = [&](const Tensor& h) {
      Tensor saliency = autograd::grad({s}, {x}, {}, /*retain_graph=*/true)[0];
      return sum(l2(dropout(gelu(l1(h)), 0.5))) * mean(saliency).item<double>();
    };
    Tensor b = checkpointed ? nn::checkpoint(region_b, x * 1.0) : region_b(x * 1.0);
    grads.push_back(gradients_of(b + sum(a), tensors));
  }
  expect_all_bitwise_equal(grads[1], grads[0]);
}

// A backward inside the region through its own saved tensors (a gradient
// penalty: the gradient of the region's output with respect to its input,
// with create_graph) recomputed the region from its partly run forward and
// failed, blaming control flow. PyTorch 2 reads the saved tensors there;
// so does ember now. Mutation caught: pack without the placeholder's fill.
TEST(Checkpoint, AGradientTakenInsideTheRegionWorks) {
  manual_seed(2);
  nn::Linear l1(4, 8);
  Tensor x = testing::random_tensor({3, 4}, DType::f32).requires_grad_();
  std::vector<Tensor> tensors = with(l1.parameters(), x);
  auto penalty = [&](const Tensor& h) {
    Tensor y = sum(tanh(l1(h)));
    Tensor g = autograd::grad({y}, {h}, {}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    return sum(g * g);
  };
  std::vector<Tensor> plain = gradients_of(penalty(x), tensors);
  clear_grads(tensors);
  expect_all_bitwise_equal(gradients_of(nn::checkpoint(penalty, x), tensors), plain);
}

// Which hooks run again (nn/checkpoint.h): the module's own forward
// wrappers, pre-hooks and hooks once; a submodule's forward hook twice;
// backward pre-hooks and backward hooks once. The pre-hook "frees" the
// weight's memory after forward and the backward pre-hook brings it back, as
// ZeRO-3 does: the recomputation must run after the latter, or it would read
// released memory (an error).
TEST(Checkpoint, ModuleOptionRunsItsOwnHooksOnceAndSubmoduleHooksAgain) {
  manual_seed(6);
  nn::Sequential model(nn::Linear(4, 8), nn::GELU(), nn::Linear(8, 4));
  std::map<std::string, int> count;
  model.register_forward_wrapper([&](nn::ForwardCall&, const std::function<void()>& proceed) {
    ++count["wrapper"];
    proceed();
  });
  model.register_forward_pre_hook([&](nn::ForwardCall&) { ++count["pre"]; });
  model.register_backward_pre_hook([&](nn::Module&) { ++count["backward pre"]; });
  model.register_backward_hook([&](nn::Module&) { ++count["backward"]; });
  auto first = model.at<nn::Linear>(0);
  first->register_forward_hook([&](nn::ForwardCall&) { ++count["child hook"]; });
  // ZeRO-3's shape: free the weight after forward, bring it back before backward.
  Tensor kept;
  model.register_forward_hook([&](nn::ForwardCall&) {
    ++count["hook"];
    kept = first->weight.detach().clone();
    first->weight.impl()->storage->release();
  });
  model.register_backward_pre_hook([&](nn::Module&) {  // written as a collective writes, without a version bump
    first->weight.impl()->storage->reallocate();
    std::memcpy(first->weight.data_ptr(), kept.data_ptr(), size_t(kept.nbytes()));
  });
  std::vector<Tensor> tensors = with(model.parameters(), testing::random_tensor({3, 4}, DType::f32).requires_grad_());
  Tensor x = tensors.back();
  std::vector<Tensor> plain = gradients_of(sum(model(x)), tensors);
  clear_grads(tensors);
  count.clear();

  nn::set_activation_checkpointing(model, true);
  std::vector<Tensor> checked = gradients_of(sum(model(x)), tensors);
  expect_all_bitwise_equal(checked, plain);
  EXPECT_EQ(count, (std::map<std::string, int>{{"wrapper", 1}, {"pre", 1}, {"hook", 1}, {"child hook", 2},
                                               {"backward pre", 1}, {"backward", 1}}));

  // Off again: the child's hook runs once per call.
  nn::set_activation_checkpointing(model, false);
  count.clear();
  clear_grads(tensors);
  expect_all_bitwise_equal(gradients_of(sum(model(x)), tensors), plain);
  EXPECT_EQ(count["child hook"], 1);
}

// The bytes held between forward and backward (allocator's counter) for 8
// Linear+GELU layers, [64, 512] activations: each layer keeps its input and
// the GELU's input unchecked; checkpointing the whole stack keeps its input
// only, checkpointing each layer keeps each layer's input.
TEST(Checkpoint, StoresFewerActivations) {
  manual_seed(8);
  nn::Sequential stack;
  for (int i = 0; i < 8; ++i) {
    auto layer = std::make_shared<nn::Sequential>(nn::Linear(512, 512), nn::GELU());
    stack.push_back(layer);
  }
  Tensor x = testing::random_tensor({64, 512}, DType::f32).requires_grad_();
  auto held_after_forward = [&](const std::function<Tensor()>& forward) {
    int64_t before = memory_allocated();
    Tensor y = forward();
    int64_t held = memory_allocated() - before - y.nbytes();
    sum(y).backward();
    return held;
  };
  int64_t plain = held_after_forward([&] { return stack(x); });
  int64_t whole = held_after_forward([&] { return nn::checkpoint(stack, x); });
  for (const std::shared_ptr<nn::Module>& layer : stack.children()) nn::set_activation_checkpointing(*layer, true);
  int64_t per_layer = held_after_forward([&] { return stack(x); });
  const int64_t activation = 64 * 512 * 4;
  std::printf("held between forward and backward: unchecked %lld B, per layer %lld B, whole stack %lld B "
              "(one activation is %lld B)\n",
              (long long)plain, (long long)per_layer, (long long)whole, (long long)activation);
  EXPECT_GE(plain, 15 * activation);    // 16 activations less the output's GELU input... at least 15
  EXPECT_LE(per_layer, 8 * activation);  // each layer's input (x itself was allocated before)
  EXPECT_LE(whole, activation);
}

}  // namespace
}  // namespace ember
