// Gradients of the element-wise family (forward: core/ops/elementwise.cpp).
// Each block: the forward formula, then d(input) in terms of the incoming
// gradient g. Formulas return gradients in the output's shape; the engine
// sums broadcast dims back to each input's shape (Note [Broadcast undone once]).
// Tests: tests/autograd/test_gradcheck.cpp.
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/elementwise_kernels.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// A saved tensor only when the other input needs it: a*b keeps b for da and
// a for db, so an in-place change of a tensor whose value is never needed
// cannot fail the backward.
Tensor if_needed(const GradRecord& r, size_t i, const Tensor& t) {
  return input(r, i).requires_grad() ? t : Tensor();
}

// The output, saved without its history and given it back under
// create_graph (SavedTensor in autograd/node.h).
Tensor saved_output(const GradRecord& r) { return output(r, 0); }

Tensor mask(const Tensor& condition, const Tensor& like) { return condition.to(like.dtype()); }

// A piecewise-constant op's node: a zero gradient for each input.
void record_zero_gradients(const GradRecord& r, std::string name) {
  const size_t inputs = r.inputs.size();
  record_formula(r, std::move(name), {}, [inputs](const Saved&, const Tensor& g) {
    Grads grads;
    for (size_t i = 0; i < inputs; ++i) grads.push_back(zeros_like(g));  // one each: the engine may add into them
    return grads;
  });
}

}  // namespace

void register_elementwise_functions() {
  // add: out = a + b  ->  da = g, db = g
  add_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "AddBackward", {}, [](const Saved&, const Tensor& g) { return Grads{g, g}; });
  });
  // sub: out = a - b  ->  da = g, db = -g
  sub_grad.set_recorder([](const GradRecord& r) {
    bool need_b = needs_grad(r, 1);
    record_formula(r, "SubBackward", {}, [need_b](const Saved&, const Tensor& g) {
      return Grads{g, need_b ? neg(g) : Tensor()};
    });
  });
  // mul: out = a * b  ->  da = g * b, db = g * a
  mul_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "MulBackward", {if_needed(r, 0, input(r, 1)), if_needed(r, 1, input(r, 0))},
                   [](const Saved& s, const Tensor& g) {
                     return Grads{s[0].defined() ? g * s[0] : Tensor(), s[1].defined() ? g * s[1] : Tensor()};
                   });
  });
  // div: out = a / b  ->  da = g / b, db = -g * a / b^2
  div_grad.set_recorder([](const GradRecord& r) {
    bool need_a = needs_grad(r, 0);
    record_formula(r, "DivBackward", {input(r, 1), if_needed(r, 1, input(r, 0))},
                   [need_a](const Saved& s, const Tensor& g) {
                     return Grads{need_a ? g / s[0] : Tensor(), s[1].defined() ? neg(g) * s[1] / (s[0] * s[0]) : Tensor()};
                   });
  });
  // neg: out = -a  ->  da = -g
  neg_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "NegBackward", {}, [](const Saved&, const Tensor& g) { return Grads{neg(g)}; });
  });
  // abs: out = |a|  ->  da = g * sign(a)
  abs_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "AbsBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) {
      Tensor grad = g * (mask(gt(s[0], 0), g) - mask(lt(s[0], 0), g));
      if (should_record({&s[0]})) grad = grad + zero_through(s[0]);  // a mask alone ties it to a
      return Grads{grad};
    });
  });
  // floor, ceil, round, trunc, sign: piecewise constant  ->  da = 0, as
  // PyTorch's (a zero gradient, not a refusal); floor_divide too (PyTorch
  // refuses its backward; floor(a / b), the same function, gives these zeros)
  floor_grad.set_recorder([](const GradRecord& r) { record_zero_gradients(r, "FloorBackward"); });
  ceil_grad.set_recorder([](const GradRecord& r) { record_zero_gradients(r, "CeilBackward"); });
  round_grad.set_recorder([](const GradRecord& r) { record_zero_gradients(r, "RoundBackward"); });
  trunc_grad.set_recorder([](const GradRecord& r) { record_zero_gradients(r, "TruncBackward"); });
  sign_grad.set_recorder([](const GradRecord& r) { record_zero_gradients(r, "SignBackward"); });
  floor_divide_grad.set_recorder([](const GradRecord& r) { record_zero_gradients(r, "FloorDivideBackward"); });
  // remainder: out = a - b floor(a / b)  ->  da = g, db = -g floor_divide(a, b)
  remainder_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "RemainderBackward", {if_needed(r, 1, input(r, 0)), if_needed(r, 1, input(r, 1))},
                   [](const Saved& s, const Tensor& g) {
                     return Grads{g, s[0].defined() ? neg(g) * floor_divide(s[0], s[1]) : Tensor()};
                   });
  });
  // fmod: out = a - b trunc(a / b)  ->  da = g, db = -g trunc(a / b)
  fmod_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "FmodBackward", {if_needed(r, 1, input(r, 0)), if_needed(r, 1, input(r, 1))},
                   [](const Saved& s, const Tensor& g) {
                     return Grads{g, s[0].defined() ? neg(g) * trunc(s[0] / s[1]) : Tensor()};
                   });
  });
  // exp: out = e^a  ->  da = g * out
  exp_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "ExpBackward", {saved_output(r)}, [](const Saved& s, const Tensor& g) { return Grads{g * s[0]}; });
  });
  // log: out = ln a  ->  da = g / a
  log_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "LogBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) { return Grads{g / s[0]}; });
  });
  // log1p: out = ln(1 + a)  ->  da = g / (1 + a)
  log1p_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "Log1pBackward", {input(r, 0)},
                   [](const Saved& s, const Tensor& g) { return Grads{g / (s[0] + 1)}; });
  });
  // sqrt: out = a^(1/2)  ->  da = g / (2 out)
  sqrt_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "SqrtBackward", {saved_output(r)},
                   [](const Saved& s, const Tensor& g) { return Grads{g / (s[0] * 2)}; });
  });
  // rsqrt: out = a^(-1/2)  ->  da = -g out^3 / 2
  rsqrt_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "RsqrtBackward", {saved_output(r)},
                   [](const Saved& s, const Tensor& g) { return Grads{g * s[0] * s[0] * s[0] * -0.5}; });
  });
  // sin: out = sin a  ->  da = g cos a;  cos: out = cos a  ->  da = -g sin a
  sin_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "SinBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) { return Grads{g * cos(s[0])}; });
  });
  cos_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "CosBackward", {input(r, 0)},
                   [](const Saved& s, const Tensor& g) { return Grads{neg(g) * sin(s[0])}; });
  });
  // tanh: out = tanh a  ->  da = g (1 - out^2)
  tanh_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "TanhBackward", {saved_output(r)},
                   [](const Saved& s, const Tensor& g) { return Grads{g * rsub(s[0] * s[0], 1)}; });
  });
  // erf: out = erf a  ->  da = g 2/sqrt(pi) e^(-a^2)
  erf_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "ErfBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) {
      return Grads{g * exp(neg(s[0] * s[0])) * (2 / std::sqrt(std::numbers::pi))};
    });
  });
  // sigmoid: out = 1 / (1 + e^-a)  ->  da = g out (1 - out)
  sigmoid_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "SigmoidBackward", {saved_output(r)},
                   [](const Saved& s, const Tensor& g) { return Grads{g * s[0] * rsub(s[0], 1)}; });
  });
  // relu: out = max(a, 0)  ->  da = g where a > 0 (out > 0 likewise), in one pass
  // (Under create_graph each activation below takes its composite form, whose
  // ops are recorded: the fused kernel has no gradient of its own.)
  relu_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "ReluBackward", {saved_output(r)}, [](const Saved& s, const Tensor& g) {
      // not(out <= 0), not out > 0: a NaN passes g, as threshold_backward's does.
      if (should_record({&g, &s[0]})) {
        Tensor grad = g * mask(logical_not(le(s[0], 0)), g);
        if (s[0].requires_grad()) grad = grad + zero_through(s[0]);
        return Grads{grad};
      }
      return Grads{threshold_backward(g, s[0])};
    });
  });
  // gelu: out = a Phi(a)  ->  da = g (Phi(a) + a phi(a)), Phi the normal CDF, phi its density
  gelu_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "GeluBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) {
      if (!should_record({&g, &s[0]})) return Grads{gelu_backward(g, s[0])};
      return composite_in_f32(s[0], {g, s[0]}, [](const Saved& o) {
        const Tensor& a = o[1];
        Tensor cdf = (erf(a * std::numbers::sqrt2 / 2) + 1) * 0.5;
        Tensor density = exp(a * a * -0.5) * (std::numbers::inv_sqrtpi / std::numbers::sqrt2);
        return Grads{o[0] * (cdf + a * density)};
      });
    });
  });
  // gelu (tanh form): out = a/2 (1 + tanh u), u = k (a + c a^3)
  //   ->  da = g (1/2 (1 + tanh u) + a/2 (1 - tanh^2 u) k (1 + 3 c a^2))
  gelu_tanh_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "GeluTanhBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) {
      if (!should_record({&g, &s[0]})) return Grads{gelu_backward(g, s[0], GeluApproximation::tanh)};
      return composite_in_f32(s[0], {g, s[0]}, [](const Saved& o) {
        const Tensor& a = o[1];
        const double k = std::numbers::sqrt2 * std::numbers::inv_sqrtpi, c = 0.044715;
        Tensor t = tanh((a + a * a * a * c) * k);
        Tensor du = (a * a * (3 * c) + 1) * k;
        return Grads{o[0] * ((t + 1) * 0.5 + a * 0.5 * rsub(t * t, 1) * du)};
      });
    });
  });
  // silu: out = a sigmoid(a)  ->  da = g s (1 + a (1 - s)), s = sigmoid(a)
  silu_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "SiluBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) {
      if (!should_record({&g, &s[0]})) return Grads{silu_backward(g, s[0])};
      Tensor sig = sigmoid(s[0]);
      return Grads{g * sig * (s[0] * rsub(sig, 1) + 1)};
    });
  });
  // pow: out = a^p (p a number)  ->  da = g p a^(p-1)  (0 when p = 0)
  pow_scalar_grad.set_recorder([](const GradRecord& r) {
    double p = params<Scalar>(r).to_double();
    record_formula(r, "PowBackward", {input(r, 0)}, [p](const Saved& s, const Tensor& g) {
      return Grads{p == 0 ? zeros_like(g) : g * pow(s[0], p - 1) * p};
    });
  });
  // pow: out = a^b  ->  da = g b a^(b-1) (0 where b = 0: not 0 * 0^-1 = nan at a = 0),
  //                     db = g out ln a (0 where a = 0 and b >= 0), both as PyTorch
  pow_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "PowBackward", {input(r, 0), input(r, 1), saved_output(r)}, [](const Saved& s, const Tensor& g) {
      const Tensor &a = s[0], &b = s[1], &out = s[2];
      Tensor da = where(eq(b, 0), zeros_like(g), g * b * pow(a, b - 1));
      Tensor db = where(logical_and(eq(a, 0), ge(b, 0)), zeros_like(g), g * out * log(a));
      return Grads{da, db};
    });
  });
  // maximum / minimum: the gradient goes to the larger (smaller) input, split
  // evenly on ties; where a NaN is compared no comparison holds, so both get g,
  // as PyTorch's (where(a == b, g / 2, g) masked where the other one wins;
  // masks of a > b and a < b gave both inputs 0 there).
  maximum_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "MaximumBackward", {input(r, 0), input(r, 1)}, [](const Saved& s, const Tensor& g) {
      Tensor share = where(eq(s[0], s[1]), g * 0.5, g);
      return Grads{where(logical_not(lt(s[0], s[1])), share, 0.0), where(logical_not(gt(s[0], s[1])), share, 0.0)};
    });
  });
  minimum_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "MinimumBackward", {input(r, 0), input(r, 1)}, [](const Saved& s, const Tensor& g) {
      Tensor share = where(eq(s[0], s[1]), g * 0.5, g);
      return Grads{where(logical_not(gt(s[0], s[1])), share, 0.0), where(logical_not(lt(s[0], s[1])), share, 0.0)};
    });
  });
  // clamp: out = min(max(a, low), high)  ->  da = g where low <= a <= high
  clamp_grad.set_recorder([](const GradRecord& r) {
    const ClampParams& p = params<ClampParams>(r);
    Tensor a = input(r, 0);
    Tensor inside = ones_like(a).to(DType::boolean);
    if (p.low) inside = logical_and(inside, ge(a, *p.low));
    if (p.high) inside = logical_and(inside, le(a, *p.high));
    record_formula(r, "ClampBackward", {inside}, [](const Saved& s, const Tensor& g) { return Grads{g * mask(s[0], g)}; });
  });
  // where: out = c ? a : b  ->  da = g where c, db = g where not c (c gets none)
  where_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "WhereBackward", {input(r, 0)}, [](const Saved& s, const Tensor& g) {
      Tensor zero = zeros({}, {.dtype = g.dtype(), .device = g.device()});
      return Grads{Tensor(), where(s[0], g, zero), where(s[0], zero, g)};
    });
  });
  // addcmul: out = input + value t1 t2  ->  d input = g, d t1 = g value t2, d t2 = g value t1
  addcmul_grad.set_recorder([](const GradRecord& r) {
    Scalar value = params<Scalar>(r);
    record_formula(r, "AddcmulBackward", {if_needed(r, 1, input(r, 2)), if_needed(r, 2, input(r, 1))},
                   [value](const Saved& s, const Tensor& g) {
                     Tensor scaled = g * value;
                     return Grads{g, s[0].defined() ? scaled * s[0] : Tensor(), s[1].defined() ? scaled * s[1] : Tensor()};
                   });
  });
  // to / clone: out = a in another dtype  ->  da = g (the engine converts it back to a's dtype)
  to_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "ToCopyBackward", {}, [](const Saved&, const Tensor& g) { return Grads{g}; });
  });
}

}  // namespace ember::autograd
