// Custom autograd functions (autograd/custom_function.h): gradients against
// finite differences and against the same formula built from ops, saved
// tensors and their version check, several inputs and outputs, non-tensor
// arguments, non-differentiable outputs, and the errors for a backward that
// returns the wrong gradients.
#include "support/test_support.h"

namespace ember::testing {
namespace {

using V = const std::vector<Tensor>&;

Tensor leaf(const Shape& shape) { return randn(shape, {.dtype = DType::f64, .requires_grad = true}); }

// y = silu(a) * b, by hand: dy/da = b * s * (1 + a (1 - s)) with s = sigmoid(a), dy/db = silu(a).
struct SwiGLU : autograd::Function<SwiGLU> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a, const Tensor& b) {
    ctx.save_for_backward({a, b});
    return silu(a) * b;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
    std::vector<Tensor> saved = ctx.saved_tensors();
    const Tensor &a = saved[0], &b = saved[1];
    Tensor s = sigmoid(a);
    Tensor grad_a = ctx.needs_input_grad(0) ? grads[0] * b * s * (1.0 + a * (1.0 - s)) : Tensor();
    Tensor grad_b = ctx.needs_input_grad(1) ? grads[0] * a * s : Tensor();
    return {grad_a, grad_b};
  }
};

TEST(CustomFunction, MatchesTheCompositeAndItsGradient) {
  Tensor a = leaf({3, 5}), b = leaf({3, 5}), g = randn({3, 5}, {.dtype = DType::f64});
  Tensor y = SwiGLU::apply(a, b);
  EXPECT_EQ(y.grad_fn()->name(), "SwiGLUBackward");
  EXPECT_TRUE(all_close(y, silu(a) * b));
  std::vector<Tensor> custom = autograd::grad({y}, {a, b}, {g});
  std::vector<Tensor> composite = autograd::grad({silu(a) * b}, {a, b}, {g});
  EXPECT_TRUE(all_close(custom[0], composite[0]));
  EXPECT_TRUE(all_close(custom[1], composite[1]));
}

TEST(CustomFunction, PassesGradcheck) {
  auto result = autograd::gradcheck([](V x) { return SwiGLU::apply(x[0], x[1].t()); },
                                    {randn({4, 3}), randn({3, 4})});
  EXPECT_TRUE(result.ok) << result.report;
}

TEST(CustomFunction, NeedsInputGradFollowsRequiresGradAndGradMode) {
  struct Probe : autograd::Function<Probe> {
    static std::vector<bool>& seen() {
      static std::vector<bool> needs;
      return needs;
    }
    static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a, double scale, const Tensor& b) {
      seen() = {ctx.needs_input_grad(0), ctx.needs_input_grad(1), ctx.needs_input_grad(2)};
      return a * b * scale;
    }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) { return {grads[0], Tensor(), grads[0]}; }
  };
  Tensor a = leaf({2}), b = randn({2}, {.dtype = DType::f64});
  EXPECT_TRUE(Probe::apply(a, 2.0, b).requires_grad());
  EXPECT_EQ(Probe::seen(), (std::vector<bool>{true, false, false}));
  {
    NoGradGuard no_grad;
    Tensor y = Probe::apply(a, 2.0, b);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_EQ(Probe::seen(), (std::vector<bool>{false, false, false}));
  }
  Tensor c = Probe::apply(b, 2.0, b);  // nothing requires grad: no node
  EXPECT_EQ(c.grad_fn(), nullptr);
}

// Two outputs, a non-tensor argument and state for backward:
// (a * k, a + b), with k a double saved by name.
struct ScaleAndAdd : autograd::Function<ScaleAndAdd> {
  static std::tuple<Tensor, Tensor> forward(autograd::FunctionCtx& ctx, const Tensor& a, const Tensor& b, double k) {
    ctx.save_data("k", k);
    return {a * k, a + b};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
    double k = ctx.saved_data<double>("k");
    return {grads[0] * k + grads[1], grads[1], Tensor()};
  }
};

TEST(CustomFunction, SeveralOutputsAndANonTensorArgument) {
  auto result = autograd::gradcheck(
      [](V x) {
        auto [scaled, added] = ScaleAndAdd::apply(x[0], x[1], 3.0);
        return scaled * added;
      },
      {randn({2, 3}), randn({3})});  // b broadcasts: its gradient is summed back by the engine
  EXPECT_TRUE(result.ok) << result.report;

  // Only one output used: backward gets zeros for the other.
  Tensor a = leaf({2}), b = leaf({2});
  auto [scaled, added] = ScaleAndAdd::apply(a, b, 3.0);
  sum(scaled).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0, 0}));
}

TEST(CustomFunction, SavedDataOfTheWrongTypeOrNameIsAnError) {
  struct Typed : autograd::Function<Typed> {
    static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a) {
      ctx.save_data("k", 2);  // an int
      return a * 2.0;
    }
    static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
      return {grads[0] * ctx.saved_data<double>("k")};
    }
  };
  EXPECT_EMBER_ERROR(sum(Typed::apply(leaf({2}))).backward(), "Typed: saved_data(\"k\") holds a int, not a double");
  struct Missing : autograd::Function<Missing> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a) { return a * 2.0; }
    static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
      return {grads[0] * ctx.saved_data<double>("scale")};
    }
  };
  EXPECT_EMBER_ERROR(sum(Missing::apply(leaf({2}))).backward(), "Missing: saved_data(\"scale\"): nothing was saved");
}

// (sign(a) as a mask, a * 2): the mask is not differentiable.
struct MaskAndDouble : autograd::Function<MaskAndDouble> {
  static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const Tensor& a) {
    Tensor mask = gt(a, 0.0).to(a.dtype());
    ctx.mark_non_differentiable({mask});
    return {mask, a * 2.0};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) {
    EXPECT_EQ(max(abs(grads[0])).item<double>(), 0.0);  // zeros for the non-differentiable output
    return {grads[1] * 2.0};
  }
};

TEST(CustomFunction, NonDifferentiableOutputsDoNotRequireGrad) {
  Tensor a = leaf({4});
  std::vector<Tensor> outputs = MaskAndDouble::apply(a);
  EXPECT_FALSE(outputs[0].requires_grad());
  EXPECT_EQ(outputs[0].grad_fn(), nullptr);
  EXPECT_TRUE(outputs[1].requires_grad());
  sum(outputs[1] * outputs[0]).backward();  // the mask is a constant here
  EXPECT_TRUE(all_close(a.grad(), outputs[0] * 2.0));
}

TEST(CustomFunction, AnInputReturnedAndMarkedNonDifferentiableStaysSo) {
  struct PassThrough : autograd::Function<PassThrough> {
    static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const Tensor& a) {
      ctx.mark_non_differentiable({a});
      return {a, a * 2.0};
    }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) { return {grads[1] * 2.0}; }
  };
  Tensor a = leaf({2});
  std::vector<Tensor> outputs = PassThrough::apply(a);
  EXPECT_FALSE(outputs[0].requires_grad());
  EXPECT_TRUE(a.requires_grad() && a.is_leaf());
  sum(outputs[1] + outputs[0]).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{2, 2}));
}

// exp, saving its output: the saved output must not keep the graph alive.
struct Exp : autograd::Function<Exp> {
  static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& a) {
    Tensor y = exp(a);
    ctx.save_for_backward({y});
    return y;
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) { return {grads[0] * ctx.saved_tensors()[0]}; }
};

TEST(CustomFunction, SavingAnOutputPassesGradcheckAndLeaksNothing) {
  auto result = autograd::gradcheck([](V x) { return Exp::apply(x[0]); }, {randn({3, 2})});
  EXPECT_TRUE(result.ok) << result.report;
  Tensor a = randn({256}, {.requires_grad = true});
  auto step = [&](bool run_backward) {
    Tensor y = sum(Exp::apply(a * 1.0));
    if (run_backward) y.backward();
    a.set_grad(Tensor());
  };
  step(true);
  int64_t baseline = memory_allocated();
  for (int i = 0; i < 100; ++i) step(i % 2 == 0);  // graphs dropped with and without backward
  EXPECT_EQ(memory_allocated(), baseline);
}

TEST(CustomFunction, ModifyingASavedTensorInPlaceMakesBackwardRaise) {
  Tensor a = leaf({3}), b = leaf({3});
  Tensor a2 = a * 1.0;
  Tensor y = SwiGLU::apply(a2, b);
  mul_(a2, 2.0);
  EXPECT_EMBER_ERROR(sum(y).backward(), "SwiGLUBackward: a tensor saved for the gradient (shape [3], dtype float64) "
                                        "was modified by an in-place operation");
  Tensor z = Exp::apply(a * 1.0);
  z += 1.0;
  EXPECT_EMBER_ERROR(sum(z).backward(), "ExpBackward: a tensor saved for the gradient");
}

TEST(CustomFunction, SecondBackwardNeedsRetainGraph) {
  Tensor a = leaf({3}), b = leaf({3});
  Tensor y = sum(SwiGLU::apply(a, b));
  y.backward({}, /*retain_graph=*/true);
  Tensor first = a.grad().clone();
  y.backward();
  EXPECT_TRUE(all_close(a.grad(), first * 2.0));
  EXPECT_EMBER_ERROR(y.backward(), "backward through the graph a second time");
}

TEST(CustomFunction, AnInputReturnedAsItIsKeepsItsOwnHistory) {
  struct Identity : autograd::Function<Identity> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a) { return a; }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) { return {grads[0] * 3.0}; }
  };
  Tensor a = leaf({2});
  Tensor h = a * 1.0;
  Tensor y = Identity::apply(h);
  EXPECT_FALSE(y.is_same(h));
  EXPECT_EQ(h.grad_fn()->name(), "MulBackward");
  EXPECT_EQ(y.grad_fn()->name(), "IdentityBackward");
  sum(y).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{3, 3}));
  Tensor direct = Identity::apply(a);  // a leaf that requires grad: it stays a leaf
  EXPECT_TRUE(a.is_leaf());
  EXPECT_FALSE(direct.is_leaf());
}

// An input that needs no gradient (a mask), returned as it is beside a
// differentiable output, stays the caller's leaf. Catches: only outputs with
// a history detached (the mask became a non-leaf of the call, and the next
// call with it failed on the first call's freed graph).
TEST(CustomFunction, AnInputWithoutGradientReturnedAsItIsStaysALeaf) {
  struct ScaleByMask : autograd::Function<ScaleByMask> {
    static std::tuple<Tensor, Tensor> forward(autograd::FunctionCtx& ctx, const Tensor& a, const Tensor& mask) {
      ctx.save_for_backward({mask});
      return {a * mask, mask};
    }
    static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
      return {grads[0] * ctx.saved_tensors()[0], Tensor()};
    }
  };
  Tensor a = leaf({3});
  Tensor mask = from_vector<double>({1, 0, 1});
  for (int step = 0; step < 2; ++step) {
    a.set_grad(Tensor());
    auto [y, returned] = ScaleByMask::apply(a, mask);
    sum(y).backward();
    EXPECT_TRUE(mask.is_leaf());
    EXPECT_FALSE(mask.requires_grad());
    EXPECT_FALSE(returned.is_same(mask));
    EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 0, 1}));
  }
}

TEST(CustomFunction, InPlaceOnAnOutputThatViewsAnInputIsRefused) {
  struct FirstRow : autograd::Function<FirstRow> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a) { return a.select(0, 0); }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) {
      Tensor grad = zeros({2, 3}, {.dtype = grads[0].dtype()});
      grad.select(0, 0).copy_(grads[0]);
      return {grad};
    }
  };
  Tensor a = leaf({2, 3});
  Tensor h = a * 1.0;
  Tensor row = FirstRow::apply(h);
  EXPECT_EMBER_ERROR(row += 1.0, "in-place operation on a view (FirstRowBackward) of a tensor that requires grad");
  sum(row).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{1, 1, 1, 0, 0, 0}));
}

TEST(CustomFunction, WrongGradientsFromBackwardAreErrors) {
  struct TooFew : autograd::Function<TooFew> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a, const Tensor& b) { return a * b; }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) { return {grads[0]}; }
  };
  EXPECT_EMBER_ERROR(sum(TooFew::apply(leaf({2}), leaf({2}))).backward(),
                     "TooFewBackward: backward returned 1 gradients, but forward took 2 arguments");
  struct WrongShape : autograd::Function<WrongShape> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a) { return a * 2.0; }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) { return {grads[0].reshape({-1})}; }
  };
  EXPECT_EMBER_ERROR(sum(WrongShape::apply(leaf({2, 3}))).backward(),
                     "WrongShapeBackward: backward returned a gradient of shape [6] for argument 0, whose shape is "
                     "[2, 3]");
  struct GradForANumber : autograd::Function<GradForANumber> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a, double k) { return a * k; }
    static std::vector<Tensor> backward(autograd::FunctionCtx&, V grads) { return {grads[0], grads[0]}; }
  };
  EXPECT_EMBER_ERROR(sum(GradForANumber::apply(leaf({2}), 2.0)).backward(),
                     "GradForANumberBackward: backward returned a gradient for argument 1, which is not a tensor");
  struct SavedTooLate : autograd::Function<SavedTooLate> {
    static Tensor forward(autograd::FunctionCtx&, const Tensor& a) { return a * 2.0; }
    static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, V grads) {
      ctx.save_for_backward({grads[0]});
      return {grads[0]};
    }
  };
  EXPECT_EMBER_ERROR(sum(SavedTooLate::apply(leaf({2}))).backward(),
                     "SavedTooLate: save_for_backward must be called in forward");
}

}  // namespace
}  // namespace ember::testing
