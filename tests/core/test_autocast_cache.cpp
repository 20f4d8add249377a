// Autocast's cast cache (core/autocast.cpp, Note [Autocast cast cache] in
// core/README.md): a parameter's lower-precision cast is made once per
// outermost AutocastGuard and reused, an in-place write to the weight makes it
// cast again, gradients equal the uncached ones, and the outermost guard's end
// empties the cache. Casts are counted as bf16 "copy" kernel calls.
#include "core/autocast_ops.h"
#include "support/test_support.h"

namespace ember::testing {
namespace {

int64_t bf16_casts(const KernelCallCounter& counter) { return counter.calls("copy", DeviceType::cpu, DType::bf16); }

Tensor parameter(const Shape& shape) { return random_tensor(shape, DType::f32).requires_grad_(); }

// Two products with the same weight (transposed, as nn::Linear uses it) and
// their summed loss, under a guard with or without the cache; returns the
// number of bf16 casts in the forward and leaves the gradient in w.grad().
int64_t two_uses_and_backward(const Tensor& w, const Tensor& x1, const Tensor& x2, bool cache_enabled) {
  AutocastGuard guard(DeviceType::cpu, DType::bf16, true, cache_enabled);
  KernelCallCounter counter;
  Tensor loss = sum(mm(x1, t(w)).to(DType::f32)) + sum(pow(mm(x2, t(w)).to(DType::f32), 2.0));
  const int64_t casts = bf16_casts(counter);  // of the forward: backward converts gradients to bf16 too
  loss.backward();
  return casts;
}

// Catches a cache that never hits (3 casts) or one that hands out the cast
// without its copy node (the weight's gradient would miss both uses'
// contributions) or with one node shared by both uses counted twice.
TEST(AutocastCache, AParameterIsCastOnceAndGetsTheUncachedGradient) {
  Tensor w = parameter({6, 5}), x1 = random_tensor({4, 5}, DType::f32), x2 = random_tensor({3, 5}, DType::f32);
  EXPECT_EQ(two_uses_and_backward(w, x1, x2, true), 3);  // x1, x2 and w once
  Tensor cached_grad = w.grad().clone();
  w.set_grad(Tensor());
  EXPECT_EQ(two_uses_and_backward(w, x1, x2, false), 4);  // w once per use
  EXPECT_TRUE(all_close(cached_grad, w.grad(), 0, 0));
  // The gradient by hand from the same bf16 operands: d/dw [sum(x1 w^T) + sum((x2 w^T)^2)].
  Tensor wb = w.detach().to(DType::bf16).to(DType::f32);
  Tensor x1b = x1.to(DType::bf16).to(DType::f32), x2b = x2.to(DType::bf16).to(DType::f32);
  Tensor y2 = mm(x2b, t(wb)).to(DType::bf16).to(DType::f32);
  Tensor expected = mm(t(ones({4, 6})), x1b) + mm(t(y2 * 2.0), x2b);
  EXPECT_TRUE(all_close(cached_grad, expected, 0.05, 0.05));
}

// The cached cast of a transposed weight has the uncached one's graph: cast
// in the weight's own layout, then permuted, so the gradient reaches the
// weight without a transposing copy. Catches casting the transposed view
// itself through the cache (its gradient would be converted to f32 and
// accumulated through two transposing copies per use).
TEST(AutocastCache, ATransposedWeightKeepsTheUncachedGraph) {
  Tensor w = parameter({6, 5});
  for (bool cache_enabled : {true, false}) {
    AutocastGuard guard(DeviceType::cpu, DType::bf16, true, cache_enabled);
    Tensor cast = autocast_input(t(w), AutocastKind::lower_precision);
    EXPECT_EQ(cast.strides(), t(w).strides());
    ASSERT_TRUE(cast.grad_fn());
    EXPECT_EQ(cast.grad_fn()->name(), "PermuteBackward") << "cache enabled: " << cache_enabled;
  }
}

// Catches a cache that ignores the weight's version: the second product would
// use the weight's old values.
TEST(AutocastCache, AnInPlaceWriteToTheWeightMakesItCastAgain) {
  Tensor w = parameter({6, 5}), x = random_tensor({4, 5}, DType::f32);
  KernelCallCounter counter;
  AutocastGuard guard(DeviceType::cpu, DType::bf16);
  Tensor before = mm(x, t(w));
  {
    NoGradGuard no_grad;
    w += 1.0;  // as an optimizer step inside the scope
  }
  Tensor after = mm(x, t(w));
  EXPECT_EQ(bf16_casts(counter), 4);  // x and w, twice
  Tensor expected = reference([&] { return mm(x.to(DType::bf16), t(w.detach().to(DType::bf16))); });
  EXPECT_TRUE(all_close(after, expected, 0, 0));
  EXPECT_FALSE(all_close(before, after, 0, 0));
}

// ZeRO-3 frees a parameter's memory between uses and gathers the updated
// values back through an alias of its own, leaving the version alone (for
// autograd's saved-tensor checks). Catches: the cache keyed by the version
// only (the stale cast came back, and under ZeRO-3 a loop inside one guard
// trained on the first step's weights with a frozen loss).
TEST(AutocastCache, MemoryReleasedAndRefilledIsCastAgain) {
  Tensor w = parameter({6, 5}), x = random_tensor({4, 5}, DType::f32);
  AutocastGuard guard(DeviceType::cpu, DType::bf16);
  mm(x, t(w));
  const uint64_t version = w.version();
  w.storage()->release();
  w.storage()->reallocate();
  auto alias = std::make_shared<Storage>(w.data_ptr(), w.nbytes(), w.device(), [](void*) {});
  copy_(Tensor::make(alias, DType::f32, w.shape(), w.strides(), 0), full(w.shape(), 0.5));
  EXPECT_EQ(w.version(), version);
  KernelCallCounter counter;
  Tensor after = mm(x, t(w));
  EXPECT_EQ(bf16_casts(counter), 2);  // x and w
  Tensor expected = reference([&] { return mm(x.to(DType::bf16), t(full(w.shape(), 0.5).to(DType::bf16))); });
  EXPECT_TRUE(all_close(after, expected, 0, 0));
}

// A guard that does not say keeps the enclosing guard's choice, as
// torch.autocast(cache_enabled=None). Catches: the default turning the cache
// on (the Accelerator's guard around each forward cached inside a loop guard
// that had turned it off).
TEST(AutocastCache, ANestedGuardKeepsTheEnclosingChoice) {
  Tensor w = parameter({6, 5}), x = random_tensor({4, 5}, DType::f32);
  KernelCallCounter counter;
  AutocastGuard off(DeviceType::cpu, DType::bf16, true, false);
  {
    AutocastGuard inner(DeviceType::cpu, DType::bf16);
    mm(x, t(w));
    mm(x, t(w));
  }
  EXPECT_EQ(bf16_casts(counter), 4);  // nothing cached: x and w, twice
  {
    AutocastGuard on(DeviceType::cpu, DType::bf16, true, true);
    mm(x, t(w));
    mm(x, t(w));
  }
  EXPECT_EQ(bf16_casts(counter), 7);  // x twice, w once
}

// Catches a cache emptied by an inner guard (the third use would cast) or not
// emptied by the outermost one (the last use would not).
TEST(AutocastCache, TheOutermostGuardEmptiesIt) {
  Tensor w = parameter({6, 5}), x = random_tensor({4, 5}, DType::f32);
  KernelCallCounter counter;
  {
    AutocastGuard outer(DeviceType::cpu, DType::bf16);
    {
      AutocastGuard inner(DeviceType::cpu, DType::bf16);
      mm(x, t(w));
    }
    mm(x, t(w));
  }
  EXPECT_EQ(bf16_casts(counter), 3);  // x twice, w once
  {
    AutocastGuard again(DeviceType::cpu, DType::bf16);
    mm(x, t(w));
  }
  EXPECT_EQ(bf16_casts(counter), 5);  // x and w cast again in the new scope
}

// Catches a cache that keeps activations (non-leaves) or tensors that do not
// require grad.
TEST(AutocastCache, OnlyParametersAreKept) {
  Tensor w = parameter({6, 5}), frozen = random_tensor({6, 5}, DType::f32), x = random_tensor({4, 5}, DType::f32);
  KernelCallCounter counter;
  AutocastGuard guard(DeviceType::cpu, DType::bf16);
  Tensor activation = w * 2.0;
  mm(x, t(activation)), mm(x, t(activation));
  mm(x, t(frozen)), mm(x, t(frozen));
  EXPECT_EQ(bf16_casts(counter), 8);  // every operand of the four products
}

// Gradient accumulation inside one scope: the second backward runs through a
// cached cast again. Catches a cache that hands out one shared copy node (the
// first backward released it: the second would throw) and keying on grad
// mode (a cast first made under NoGradGuard must still carry the gradient).
TEST(AutocastCache, TwoBackwardsInOneScopeAndANoGradFirstUse) {
  Tensor w = parameter({6, 5}), x = random_tensor({4, 5}, DType::f32);
  AutocastGuard guard(DeviceType::cpu, DType::bf16);
  {
    NoGradGuard no_grad;
    mm(x, t(w));
  }
  sum(mm(x, t(w)).to(DType::f32)).backward();
  Tensor once = w.grad().clone();
  EXPECT_GT(sum(abs(once)).item<double>(), 0);
  sum(mm(x, t(w)).to(DType::f32)).backward();
  EXPECT_TRUE(all_close(w.grad(), once * 2.0, 0, 0));
}

// An in-place write into one use of the cached cast must not leak into the next use.
TEST(AutocastCache, AWriteIntoAUseIsNotSeenByTheNext) {
  Tensor w = parameter({6, 5}), x = random_tensor({4, 5}, DType::f32);
  AutocastGuard guard(DeviceType::cpu, DType::bf16);
  NoGradGuard no_grad;
  Tensor first = autocast_input(w, AutocastKind::lower_precision);
  first.fill_(0.0);
  Tensor second = autocast_input(w, AutocastKind::lower_precision);
  EXPECT_TRUE(all_close(second, w.to(DType::bf16), 0, 0));
}

}  // namespace
}  // namespace ember::testing
