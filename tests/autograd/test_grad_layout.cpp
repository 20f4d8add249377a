// Where gradients land: a gradient nothing else holds becomes the leaf's
// .grad without a copy, one a hook or the user holds is copied, later
// backwards add in place; matrix products give a transposed operand (a
// Linear weight used as weight.t()) a gradient in its own layout, and skip
// the operands that need none.
#include "support/test_support.h"

namespace ember::testing {
namespace {

Tensor leaf_of(const Shape& shape) {
  Tensor t = random_tensor(shape, DType::f64);
  t.requires_grad_(true);
  return t;
}

TEST(GradLayout, LinearWeightGradientIsContiguousAndCorrect) {
  Tensor x = random_tensor({6, 4}, DType::f64), weight = leaf_of({5, 4}), bias = leaf_of({5});
  Tensor g = random_tensor({6, 5}, DType::f64);
  sum(addmm(bias, x, weight.t()) * g).backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_TRUE(weight.grad().is_contiguous());
  EXPECT_TRUE(all_close(weight.grad(), matmul(g.t(), x)));  // dW = g^T x
  EXPECT_TRUE(all_close(bias.grad(), sum(g, {0})));
  EXPECT_FALSE(x.grad().defined());
}

TEST(GradLayout, OnlyTheOperandsThatRequireGradGetOne) {
  Tensor a = leaf_of({3, 4}), b = random_tensor({4, 2}, DType::f64);
  Tensor g = random_tensor({3, 2}, DType::f64);
  sum(mm(a, b) * g).backward();
  EXPECT_TRUE(all_close(a.grad(), matmul(g, b.t())));
  EXPECT_FALSE(b.grad().defined());
  Tensor c = random_tensor({3, 4}, DType::f64), d = leaf_of({4, 2});
  sum(matmul(c, d) * g).backward();
  EXPECT_TRUE(all_close(d.grad(), matmul(c.t(), g)));
}

TEST(GradLayout, AFreshGradientIsTakenOverAndLaterOnesAddInPlace) {
  Tensor x = leaf_of({8});
  sum(x * 3.0).backward();
  const void* first = x.grad().data_ptr();
  sum(x * 2.0).backward();
  EXPECT_EQ(x.grad().data_ptr(), first);  // accumulated into the same buffer
  EXPECT_TRUE(all_close(x.grad(), full({8}, 5.0, {.dtype = DType::f64})));
}

// A Linear's gradients reach their accumulators as views of the formulas'
// temporaries (the weight's as the transpose of (g^T x)^T, the bias's as a
// reshaped sum), each view the only holder of its base: they are taken over
// too, and .grad is then no view. A view whose base someone holds is copied.
// Mutations caught (each run once, failed as expected): stealable()
// requiring the storage's use count to be 1, as before, which no view meets
// (every gradient of a Linear was cloned, and DDP then copied the clone
// again); sole_owner() not asking whether anyone else holds the base (y's
// .grad then aliased `held`).
TEST(GradLayout, AViewOfAFormulasTemporaryIsTakenOver) {
  Tensor x = random_tensor({6, 4}, DType::f64), weight = leaf_of({5, 4}), bias = leaf_of({5});
  const void* arrived[2] = {nullptr, nullptr};
  weight.register_hook([&arrived](const Tensor& g) { arrived[0] = g.data_ptr(); return Tensor(); });
  bias.register_hook([&arrived](const Tensor& g) { arrived[1] = g.data_ptr(); return Tensor(); });
  sum(addmm(bias, x, weight.t()) * random_tensor({6, 5}, DType::f64)).backward();
  EXPECT_EQ(weight.grad().data_ptr(), arrived[0]);
  EXPECT_EQ(bias.grad().data_ptr(), arrived[1]);
  EXPECT_EQ(weight.grad().impl()->view_base, nullptr);
  EXPECT_EQ(weight.grad().storage().use_count(), 1);  // only .grad holds the memory

  Tensor y = leaf_of({2, 3});
  Tensor held = full({6}, 7.0, {.dtype = DType::f64});
  y.register_hook([held](const Tensor&) { return held.view({2, 3}); });  // a dense view of a tensor the test holds
  sum(y * 2.0).backward();
  EXPECT_NE(y.grad().data_ptr(), held.data_ptr());
  held.fill_(0.0);
  EXPECT_TRUE(all_close(y.grad(), full({2, 3}, 7.0, {.dtype = DType::f64})));
}

TEST(GradLayout, AGradientSomeoneHoldsIsCopied) {
  Tensor x = leaf_of({4});
  Tensor held = full({4}, 7.0, {.dtype = DType::f64});
  x.register_hook([held](const Tensor&) { return held; });
  sum(x * 2.0).backward();
  held.fill_(0.0);
  EXPECT_TRUE(all_close(x.grad(), full({4}, 7.0, {.dtype = DType::f64})));

  Tensor y = leaf_of({4});
  Tensor seed = full({4}, 2.0, {.dtype = DType::f64});
  y.backward(seed);
  seed.fill_(0.0);
  EXPECT_TRUE(all_close(y.grad(), full({4}, 2.0, {.dtype = DType::f64})));
}

}  // namespace
}  // namespace ember::testing
