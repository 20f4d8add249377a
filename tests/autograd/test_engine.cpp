// The engine: backward and grad(), accumulation, retain_graph, grad mode,
// hooks and their order, in-place checks, and that the graph is freed.
#include "support/test_support.h"
#include "autograd/leaf.h"
#include "autograd/saved_tensor_hooks.h"

#include <thread>

namespace ember::testing {
namespace {

TEST(Engine, BackwardOfAScalarFillsLeafGradsAndAccumulates) {
  Tensor x = leaf({1, 2, 3}), w = leaf({0.5, -1, 2});
  Tensor loss = sum(x * w + x * x);
  EXPECT_FALSE(loss.is_leaf());
  EXPECT_EQ(loss.grad_fn()->name(), "SumBackward");
  loss.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2.5, 3, 8}));  // w + 2x
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{1, 2, 3}));
  sum(x * 2).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{4.5, 5, 10}));  // accumulated
}

TEST(Engine, BroadcastGradientsAreSummedBackToTheInputShape) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3}), b = leaf({10, 20, 30}, {3});
  sum(a * b).backward();
  EXPECT_EQ(b.grad().shape(), (Shape{3}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
}

TEST(Engine, GradientDtypeMatchesTheInput) {
  Tensor a = randn({4}, {.dtype = DType::bf16, .requires_grad = true});
  Tensor b = randn({4}, {.requires_grad = true});
  sum(a * b).backward();
  EXPECT_EQ(a.grad().dtype(), DType::bf16);
  EXPECT_EQ(b.grad().dtype(), DType::f32);
}

// pow(a, b)'s gradient for a is b a^(b-1): at a = 0 and b = 0 that is 0 * inf = nan,
// which trained on silently (x ** mask with a 0/1 mask). PyTorch gives 0 wherever
// b = 0; torch.pow(tensor([0., 3.]), tensor([0., 0.])) -> grads [0, 0] and
// [0 * 1 * log 0 -> 0, 1 * log 3]. Mutation caught: the where(eq(b, 0), ...) removed.
TEST(Engine, PowGradientIsZeroWhereTheExponentIsZero) {
  Tensor a = from_vector<double>({0, 3, 0, 2}).requires_grad_();
  Tensor b = from_vector<double>({0, 0, 2, 3}).requires_grad_();
  sum(pow(a, b)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 12}));
  std::vector<double> db = b.grad().to_vector<double>();
  EXPECT_EQ(db[0], 0.0);
  EXPECT_DOUBLE_EQ(db[1], std::log(3.0));
  EXPECT_EQ(db[2], 0.0);
  EXPECT_DOUBLE_EQ(db[3], 8 * std::log(2.0));
}

TEST(Engine, GradDoesNotTouchDotGrad) {
  Tensor x = leaf({1, 2});
  Tensor y = sum(x * x * x);
  std::vector<Tensor> g = autograd::grad({y}, {x});
  EXPECT_EQ(g[0].to_vector<double>(), (std::vector<double>{3, 12}));
  EXPECT_FALSE(x.grad().defined());
  Tensor unused = leaf({1});
  EXPECT_EMBER_ERROR(autograd::grad({sum(x * 2)}, {unused}), "was not used");
}

TEST(Engine, SecondBackwardOnAFreedGraphIsAnError) {
  Tensor x = leaf({1, 2});
  Tensor y = sum(exp(x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(x.grad().to_vector<double>()[0], 2 * std::exp(1.0), 1e-12);
  EXPECT_EMBER_ERROR(y.backward(), "backward through the graph a second time");
}

// A node that saved nothing runs again without retain_graph, as in PyTorch
// (AddBackward and SumBackward here); the second backward was refused.
// Mutation caught: the engine refusing any node it ran before (the `released`
// flag it checked before apply) -> "SumBackward: ... a second time".
TEST(Engine, SecondBackwardThroughNodesThatSavedNothingAccumulatesAgain) {
  Tensor x = leaf({1, 2});
  Tensor y = sum(x + 1.0);
  y.backward();
  y.backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 2}));
  Tensor z = sum(x * x + 1.0);  // MulBackward saved x: still refused
  z.backward();
  EXPECT_EMBER_ERROR(z.backward(), "MulBackward: trying to backward through the graph a second time");
}

// Empty lists are refused, as PyTorch (mutation: no check -> grad returned
// {} and backward({}) returned, differentiating nothing without a word).
TEST(Engine, EmptyListsAreRefused) {
  Tensor x = leaf({1, 2});
  EXPECT_EMBER_ERROR(autograd::grad({sum(x)}, {}), "grad: no inputs given");
  EXPECT_EMBER_ERROR(autograd::grad({}, {x}), "grad: no outputs given");
  EXPECT_EMBER_ERROR(autograd::backward({}), "backward: no tensors given");
}

TEST(Engine, NonScalarBackwardNeedsAGradient) {
  Tensor x = leaf({1, 2});
  EXPECT_EMBER_ERROR((x * 2).backward(), "only for scalar outputs");
  (x * 2).backward(from_vector<double>({1, 10}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 20}));
}

// The errors of a walk name the call that started it: grad() of a constant
// (a first derivative taken without create_graph) said "backward", and gave
// no hint of the usual cause. Mutation caught: the caller's name dropped.
TEST(Engine, RootErrorsNameTheirCallAndTheUsualCause) {
  Tensor x = leaf({1, 2});
  Tensor constant = autograd::grad({sum(x * x)}, {x})[0];
  EXPECT_EMBER_ERROR(autograd::grad({sum(constant)}, {x}),
                     "grad: tensor 0 of shape [] does not require grad and has no grad_fn (a gradient taken without "
                     "create_graph=true, or one that does not depend on the inputs, is a constant)");
  EXPECT_EMBER_ERROR(sum(constant).backward(), "backward: tensor 0 of shape [] does not require grad");
  EXPECT_EMBER_ERROR(autograd::grad({x * 2}, {x}), "grad: grad can be implicitly created only for scalar outputs");
  EXPECT_EMBER_ERROR(autograd::grad({x * 2}, {x}, {ones({3}, {.dtype = DType::f64})}),
                     "grad: gradient of shape [3] given for a tensor of shape [2]");
}

TEST(Engine, NoGradGuardAndDetachRecordNothing) {
  Tensor x = leaf({1, 2});
  {
    NoGradGuard no_grad;
    Tensor y = x * 2;
    EXPECT_FALSE(y.requires_grad());
    EnableGradGuard enable;
    EXPECT_TRUE((x * 2).requires_grad());
  }
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage().get(), x.storage().get());
  EXPECT_FALSE(gt(x, 0).requires_grad());  // comparisons are not differentiable
  EXPECT_FALSE(argmax(x).requires_grad());
  // A non-leaf requires grad already: asking again is allowed, as PyTorch
  // (a saliency map's habit); turning it off is not.
  Tensor y = x * 2.0;
  EXPECT_TRUE(y.requires_grad_(true).requires_grad());
  EXPECT_EMBER_ERROR(y.requires_grad_(false), "requires_grad_: only leaf tensors can change requires_grad");
}

TEST(Engine, InPlaceChecks) {
  Tensor x = leaf({1, 2});
  EXPECT_EMBER_ERROR(x += 1, "in-place operation on a leaf tensor that requires grad");
  Tensor y = exp(x);
  Tensor z = y * 1.0;
  z += 1;  // fine: z's history moves to the add
  mul_(y, 2);  // exp saved y (its output): backward must refuse
  EXPECT_EMBER_ERROR(sum(exp(x) + z).backward(), "modified by an in-place operation");
  Tensor w = leaf({3});
  {
    NoGradGuard no_grad;
    w += 1;  // allowed under NoGradGuard (parameter updates)
  }
  EXPECT_EQ(w.to_vector<double>()[0], 4);
}

// An in-place op whose floating result cannot go into a bool or integer
// output is refused under autograd too, before any graph is recorded (the op
// fuzzer found the recorded node and the bool tensor holding each other: a leak).
TEST(Engine, InPlaceOpIntoAnIntegralTensorIsRefusedBeforeRecording) {
  Tensor mask = zeros({5}, {.dtype = DType::boolean});
  Tensor counts = zeros({5}, {.dtype = DType::i64});
  Tensor x = leaf({1, 2, 3, 4, 5});
  EXPECT_EMBER_ERROR(div_(mask, x), "div_: result type float64 cannot be cast to the in-place output's dtype bool");
  EXPECT_EMBER_ERROR(mul_(counts, x), "mul_: result type float64 cannot be cast to the in-place output's dtype int64");
  EXPECT_FALSE(mask.requires_grad());
  EXPECT_FALSE(counts.requires_grad());
}

TEST(Engine, HooksCanReplaceGradientsAndPostAccumulateHooksFireInBackwardOrder) {
  Tensor a = leaf({1}), b = leaf({2}), c = leaf({3});
  std::vector<std::string> order;
  a.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("a"); });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("b"); });
  c.register_post_accumulate_grad_hook([&](const Tensor& t) {
    order.push_back("c");
    EXPECT_TRUE(t.grad().defined());
  });
  Tensor h = a * 2;                      // used first in the forward
  h.register_hook([](const Tensor& g) { return g * 10; });
  Tensor out = sum(tanh(h) * b * 1.0 + c);  // c used last
  out.backward();
  EXPECT_EQ(order, (std::vector<std::string>{"c", "b", "a"}));
  EXPECT_NEAR(a.grad().item<double>(), 10 * 2 * (1 - std::pow(std::tanh(2.0), 2)) * 2, 1e-9);
}

// A leaf frozen between the forward and the backward gets no gradient and
// runs none of its hooks, as in PyTorch (AccumulateGrad checks requires_grad).
// Catches: AccumulateGrad ignoring the flag (the frozen leaf got [2, 2] and
// its post-accumulate hook, DDP's, fired).
TEST(Engine, ALeafFrozenAfterTheForwardGetsNoGradient) {
  Tensor frozen = leaf({1, 2}), trained = leaf({3, 4});
  bool hook_ran = false;
  frozen.register_hook([&](const Tensor& g) {
    hook_ran = true;
    return g;
  });
  frozen.register_post_accumulate_grad_hook([&](const Tensor&) { hook_ran = true; });
  Tensor loss = sum(frozen * 2 + trained * 3);
  frozen.requires_grad_(false);
  loss.backward();
  EXPECT_FALSE(frozen.grad().defined());
  EXPECT_FALSE(hook_ran);
  EXPECT_EQ(trained.grad().to_vector<double>(), (std::vector<double>{3, 3}));
}

TEST(Engine, PostAccumulateHookCanBeRemoved) {
  Tensor w = randn({3}, {.requires_grad = true});
  int calls = 0;
  uint64_t first = w.register_post_accumulate_grad_hook([&](const Tensor&) { calls += 1; });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { calls += 10; });
  sum(w * 2).backward();
  EXPECT_EQ(calls, 11);
  EXPECT_TRUE(w.remove_post_accumulate_grad_hook(first));
  EXPECT_FALSE(w.remove_post_accumulate_grad_hook(first));  // already gone
  sum(w * 2).backward();
  EXPECT_EQ(calls, 21);  // only the second hook ran
  EXPECT_FALSE(randn({2}).remove_post_accumulate_grad_hook(1));  // no autograd state at all
}

// A tensor hook could not be removed: a hook registered for one step (a
// gradient probe, a debugging print) ran in every later backward, changing
// gradients for good. Mutation caught: remove_hook searching only the current
// history (the hook on y's history before mul_ keeps doubling).
TEST(Engine, TensorHooksCanBeRemoved) {
  Tensor x = leaf({1, 2});
  const uint64_t on_leaf = x.register_hook([](const Tensor& g) { return g * 10.0; });
  Tensor y = x * 1.0;
  const uint64_t on_y = y.register_hook([](const Tensor& g) { return g * 2.0; });
  y *= 3.0;  // y moves to a new history; its hook stays on the old one
  const uint64_t on_new_y = y.register_hook([](const Tensor& g) { return g * 5.0; });
  auto grad_of_x = [&] { return autograd::grad({sum(y)}, {x}, {}, /*retain_graph=*/true)[0].to_vector<double>(); };
  EXPECT_EQ(grad_of_x(), (std::vector<double>{300, 300}));
  EXPECT_TRUE(x.remove_hook(on_leaf));
  EXPECT_FALSE(x.remove_hook(on_leaf));  // already gone
  EXPECT_TRUE(y.remove_hook(on_y));
  EXPECT_EQ(grad_of_x(), (std::vector<double>{15, 15}));
  EXPECT_TRUE(y.remove_hook(on_new_y));
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_FALSE(y.remove_hook(on_leaf));  // another tensor's id
  EXPECT_FALSE(randn({2}).remove_hook(1));  // no autograd state at all
}

TEST(Engine, RetainGradKeepsNonLeafGradients) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 3;
  y.retain_grad();
  sum(y * y).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{6, 12}));
}

// PyTorch 2: retain_grad's hook runs after the tensor's other hooks, however
// they were registered, so .grad is the gradient that flows on. Catches: the
// retain hook among the pre-hooks in registration order (z.grad [1, 1, 1]
// while x.grad showed the hook's 10x).
TEST(Engine, RetainGradSeesTheGradientAfterTheHooks) {
  for (bool retain_first : {true, false}) {
    Tensor x = leaf({1, 2, 3});
    Tensor z = x * 2.0;
    if (retain_first) z.retain_grad();
    z.register_hook([](const Tensor& g) { return g * 10.0; });
    if (!retain_first) z.retain_grad();
    sum(z).backward();
    EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{10, 10, 10})) << retain_first;
    EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{20, 20, 20})) << retain_first;
  }
}

// PyTorch 2's autograd.grad runs a leaf input's tensor hooks before
// capturing its gradient, as backward runs them before accumulating.
// Catches: grad() capturing at the accumulator without the leaf's hooks
// ([2, 4, 6] from grad(), [20, 40, 60] from backward, for the same leaf).
TEST(Engine, GradOfALeafRunsItsHooksAsBackwardDoes) {
  Tensor x = leaf({1, 2, 3});
  x.register_hook([](const Tensor& g) { return g * 10.0; });
  for (bool create_graph : {false, true}) {
    std::vector<Tensor> grads = autograd::grad({sum(x * x)}, {x}, {}, std::nullopt, create_graph);
    EXPECT_EQ(grads.at(0).to_vector<double>(), (std::vector<double>{20, 40, 60})) << create_graph;
  }
  EXPECT_FALSE(x.grad().defined());  // grad() never writes .grad
  sum(x * x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{20, 40, 60}));
}

// PyTorch's numbers (1.13): y.grad is the gradient of y's latest version, and
// a view made before an in-place write to its base keeps its retained gradient.
// Catches: the retain hook left on the history the tensor had when
// retain_grad() was called ([3, 3], and no v.grad at all).
TEST(Engine, RetainGradFollowsInPlaceOpsAndFreshViewHistories) {
  Tensor x = leaf({1, 2});
  Tensor y = x * 2.0;
  y.retain_grad();
  y *= 3.0;
  sum(y).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{1, 1}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{6, 6}));

  Tensor z = leaf({1, 2, 3});
  Tensor b = z * 1.0;
  Tensor v = b.narrow(0, 0, 2);
  v.retain_grad();
  b *= 2.0;
  sum(v * 5.0).backward();
  ASSERT_TRUE(v.grad().defined());
  EXPECT_EQ(v.grad().to_vector<double>(), (std::vector<double>{5, 5}));
  EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{10, 10, 0}));

  // A write through a view gives the base a new history too (CopySlices):
  // its retained gradient is that of its latest version (PyTorch: ones).
  Tensor w = leaf({1, 2, 3});
  Tensor base = w * 1.0;
  base.retain_grad();
  base.narrow(0, 0, 2) *= 2.0;
  sum(base).backward();
  ASSERT_TRUE(base.grad().defined());
  EXPECT_EQ(base.grad().to_vector<double>(), (std::vector<double>{1, 1, 1}));
}

// Note [Only the paths to grad's inputs run]. PyTorch: c.grad is [1, 2] after
// the backward, and c's hook does not fire in grad().
// Catches: every reachable node run by grad(), which fired c's hooks and
// retained c's gradient twice ([2, 4]).
TEST(Engine, GradRunsOnlyThePathsToItsInputs) {
  Tensor x = leaf({1, 2}), z = leaf({3, 4});
  Tensor c = z * 3.0;
  c.retain_grad();
  int fired = 0;
  c.register_hook([&](const Tensor&) {
    ++fired;
    return Tensor();
  });
  Tensor loss = sum(x * c);
  std::vector<Tensor> gx = autograd::grad({loss}, {x}, {}, true);
  EXPECT_EQ(gx[0].to_vector<double>(), (std::vector<double>{9, 12}));
  EXPECT_EQ(fired, 0);
  EXPECT_FALSE(c.grad().defined());
  loss.backward();
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(c.grad().to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(z.grad().to_vector<double>(), (std::vector<double>{3, 6}));

  // A non-leaf input: its hook runs, its answer is the hooked gradient, and
  // nothing below it runs unless another input lies there.
  Tensor h = z * 2.0;
  h.register_hook([](const Tensor& g) { return g * 10.0; });
  std::vector<Tensor> both = autograd::grad({sum(h * h)}, {h, z});
  EXPECT_EQ(both[0].to_vector<double>(), (std::vector<double>{120, 160}));  // 10 * 2h
  EXPECT_EQ(both[1].to_vector<double>(), (std::vector<double>{240, 320}));  // 2 * 10 * 2h
}

// PyTorch: "hook has changed the size of value" / "the type of value".
// Catches: a hook's result taken as it is (a [2, 3] gradient for a [3] tensor
// was summed back to [12, 12, 12], a leaf's .grad became a 0-d tensor).
TEST(Engine, AHookMustReturnAGradientLikeItsOwn) {
  Tensor x = leaf({1, 2, 3});
  Tensor y = x * 2.0;
  y.register_hook([](const Tensor& g) { return g.expand({2, 3}); });
  EXPECT_EMBER_ERROR(sum(y * 3.0).backward(), "register_hook: a hook changed the gradient's shape, dtype or device: it "
                                              "was given [3] float64 on cpu and returned [2, 3] float64 on cpu");
  Tensor w = leaf({1, 2, 3});
  w.register_hook([](const Tensor& g) { return sum(g); });
  EXPECT_EMBER_ERROR(sum(w * 2.0).backward(), "returned [] float64");
  Tensor u = leaf({1, 2, 3});
  u.register_hook([](const Tensor& g) { return g.to(DType::f32); });
  EXPECT_EMBER_ERROR(sum(u * 2.0).backward(), "returned [3] float32");
  EXPECT_FALSE(u.grad().defined());
}

// PyTorch refuses `x.grad = torch.zeros(3)` for a [1] tensor; ember checks at
// the next accumulation. Catches: a [3] .grad broadcast into ([2, 2, 2]).
TEST(Engine, ASetGradUnlikeItsTensorIsRefusedAtAccumulation) {
  Tensor x = leaf({1});
  x.set_grad(zeros({3}, {.dtype = DType::f64}));
  EXPECT_EMBER_ERROR(sum(x * 2.0).backward(), "backward: the leaf's .grad is [3] float64 on cpu but the leaf is [1] "
                                              "float64 on cpu");
  x.set_grad(zeros({1}));
  EXPECT_EMBER_ERROR(sum(x * 2.0).backward(), "the leaf's .grad is [1] float32");
  x.set_grad(zeros({1}, {.dtype = DType::f64}));
  sum(x * 2.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2}));
}

// Catches: the accumulator made and .grad written without a lock (two
// threads' backward passes through one leaf aborted: "pure virtual method called").
TEST(Engine, BackwardOnTwoThreadsThroughOneLeaf) {
  Tensor w = zeros({64}, {.requires_grad = true});
  constexpr int kSteps = 2000;
  auto steps = [&] {
    for (int i = 0; i < kSteps; ++i) sum(w * 1.0).backward();
  };
  std::thread first(steps), second(steps);
  first.join();
  second.join();
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(64, float(2 * kSteps)));
}

// PyTorch: "Output of saved tensor unpack_hook expected to be a Tensor".
// Catches: the undefined tensor used (a segmentation fault).
TEST(Engine, AnUnpackThatReturnsNothingIsAnError) {
  struct Nothing : autograd::PackedTensor {
    Tensor unpack() override { return Tensor(); }
  };
  Tensor x = leaf({1, 2});
  Tensor y;
  {
    autograd::SavedTensorHooksGuard guard([](const Tensor&) { return std::make_shared<Nothing>(); });
    y = sum(x * x);
  }
  EXPECT_EMBER_ERROR(y.backward(), "a saved-tensor hook's unpack returned an undefined tensor");
}

// A seed of another dtype is taken as the root's, as PyTorch does (mutation:
// no conversion in the engine's seeding -> the f16 seed ran the formulas in
// f16, 1e5 * 1 overflowed to inf, and an f64 or int64 seed left a .grad of
// that dtype on an f32 leaf).
TEST(Engine, ASeedOfAnotherDtypeIsConvertedToTheRootsDtype) {
  Tensor x = from_vector<float>({1, 2}).requires_grad_(true);
  (x * 100000.0).backward(ones({2}, {.dtype = DType::f16}));
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{100000, 100000}));
  Tensor y = from_vector<float>({1, 2, 3}).requires_grad_(true);
  y.backward(from_vector<int64_t>({1, 2, 3}));
  EXPECT_EQ(y.grad().dtype(), DType::f32);
  std::vector<Tensor> grads = autograd::grad({y * 2.0}, {y}, {ones({3}, {.dtype = DType::f64})});
  EXPECT_EQ(grads[0].dtype(), DType::f32);
  EXPECT_EQ(grads[0].to_vector<float>(), (std::vector<float>{2, 2, 2}));
}

// A hook that removes itself (a one-shot hook) or registers another runs
// without breaking the pass: the hooks registered when the pass began run,
// less those removed meanwhile (mutation: iterating the live list -> an
// uncaught std::bad_function_call, or a read of freed memory on
// registration, which the sanitizer build reports).
TEST(Engine, HooksMayChangeTheirTensorsHookListsWhileRunning) {
  Tensor w = leaf({1, 2});
  std::vector<std::string> ran;
  uint64_t once = 0, second = 0;
  once = w.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ran.push_back("once");
    t.remove_post_accumulate_grad_hook(once);
    t.remove_post_accumulate_grad_hook(second);
  });
  second = w.register_post_accumulate_grad_hook([&](const Tensor&) { ran.push_back("second"); });
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ran.push_back("third"); });
  sum(w * 2.0).backward();
  sum(w * 2.0).backward();
  EXPECT_EQ(ran, (std::vector<std::string>{"once", "third", "third"}));

  Tensor h = leaf({3});
  Tensor y = h * 2.0;
  int added_runs = 0;
  for (Tensor* t : {&h, &y})
    for (int i = 0; i < 2; ++i)
      t->register_hook([&, t](const Tensor& g) {
        t->register_hook([&](const Tensor& g2) {
          ++added_runs;
          return g2;
        });
        return g;
      });
  sum(y).backward(Tensor(), true);
  EXPECT_EQ(added_runs, 0);  // registered during the pass: they run from the next
  EXPECT_EQ(h.grad().to_vector<double>(), (std::vector<double>{2}));
}

// A pack hook that keeps a copy: the copy's version counter is its own, so
// comparing it with the saved tensor's refused a backward with no in-place op
// in it (mutation: comparing unpack()'s version again -> "modified by an
// in-place operation: saved at version 0, now at version 1").
TEST(Engine, APackHookThatKeepsACopyPassesTheVersionCheck) {
  struct Kept : autograd::PackedTensor {
    explicit Kept(Tensor t) : copy(std::move(t)) {}
    Tensor unpack() override { return copy; }
    Tensor copy;
  };
  Tensor x = leaf({0.5, 1.5});
  Tensor y;
  {
    autograd::SavedTensorHooksGuard guard(
        [](const Tensor& t) { return std::make_shared<Kept>(t.to(DType::f32).to(t.dtype())); });
    y = sum(exp(x));
  }
  y.backward();
  EXPECT_NEAR(x.grad().to_vector<double>()[0], std::exp(0.5), 1e-6);
  EXPECT_NEAR(x.grad().to_vector<double>()[1], std::exp(1.5), 1e-6);
}

TEST(Engine, GraphMemoryReturnsToBaselineAfterManyIterations) {
  Tensor w = randn({64, 64}, {.requires_grad = true});
  Tensor x = randn({32, 64});
  auto step = [&] {
    Tensor loss = sum(tanh(matmul(x, w)) * 0.5);
    loss.backward();
    w.set_grad(Tensor());
  };
  step();
  int64_t baseline = memory_allocated();
  for (int i = 0; i < 1000; ++i) step();
  EXPECT_EQ(memory_allocated(), baseline);
}

}  // namespace
}  // namespace ember::testing

namespace ember::testing {
namespace {

TEST(Dot, WritesOneNodePerOpAndABoxPerLeaf) {
  Tensor x = randn({2, 3}, {.requires_grad = true}), w = randn({3}, {.requires_grad = true});
  Tensor y = sum(exp(x * w));
  std::string dot = autograd::to_dot(y);
  for (const char* expected : {"digraph autograd", "SumBackward", "ExpBackward", "MulBackward", "leaf [2, 3] float32",
                               "leaf [3] float32", "[2, 3] float32"})
    EXPECT_NE(dot.find(expected), std::string::npos) << expected << " missing from\n" << dot;
}

}  // namespace
}  // namespace ember::testing
