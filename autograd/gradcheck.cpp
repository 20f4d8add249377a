// gradcheck (see gradcheck.h). For a random weighting v of the output, the
// analytic side is one backward of sum(v * fn(x)); the numeric side perturbs
// each input element by +-eps and differentiates sum(v * fn(x)) centrally.
#include "autograd/gradcheck.h"

#include <cmath>
#include <limits>

#include "autograd/engine.h"
#include "core/grad_hook.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

// A contiguous f64 copy of `t` that requires grad.
Tensor f64_leaf_like(const Tensor& t) {
  Tensor leaf = empty(t.shape(), {.dtype = DType::f64});
  leaf.copy_(t.detach());  // the input's values, not its history
  leaf.requires_grad_(true);
  return leaf;
}

double weighted_output(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                       const Tensor& weights) {
  Tensor out = fn(inputs);
  return sum(out.to(DType::f64) * weights).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  std::vector<Tensor> leaves;
  std::vector<size_t> differentiable;
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool floating = inputs[i].defined() && is_floating(inputs[i].dtype());
    leaves.push_back(floating ? f64_leaf_like(inputs[i]) : inputs[i]);
    if (floating) differentiable.push_back(i);
  }

  Tensor out = fn(leaves);
  EMBER_CHECK(out.defined() && out.requires_grad(), "gradcheck: the function's output does not require grad");
  Tensor weights = randn(out.shape(), {.dtype = DType::f64});
  std::vector<Tensor> wrt;
  for (size_t i : differentiable) wrt.push_back(leaves[i]);
  std::vector<Tensor> analytic = grad({sum(out.to(DType::f64) * weights)}, wrt, {}, false, false, true);

  GradcheckResult result;
  result.worst_error = -INFINITY;
  // fn runs in the caller's grad mode (a gradient penalty takes a gradient inside it);
  // only the writes into the leaves are hidden from autograd.
  auto set = [](const Tensor& element, double value) {
    NoGradGuard no_grad;
    element.detach().fill_(value);
  };
  for (size_t k = 0; k < differentiable.size(); ++k) {
    Tensor leaf = leaves[differentiable[k]];
    Tensor flat_analytic = analytic[k].defined() ? analytic[k].contiguous().reshape({-1}) : zeros({leaf.numel()}, {.dtype = DType::f64});
    std::vector<double> got = flat_analytic.to_vector<double>();
    Tensor values = leaf.detach().reshape({-1});  // a view: the leaf is contiguous
    for (int64_t e = 0; e < leaf.numel(); ++e) {
      Tensor element = values.select(0, e);
      double original = element.item<double>();
      set(element, original + options.eps);
      double plus = weighted_output(fn, leaves, weights);
      set(element, original - options.eps);
      double minus = weighted_output(fn, leaves, weights);
      set(element, original);
      double numeric = (plus - minus) / (2 * options.eps);
      double error = std::abs(got[size_t(e)] - numeric) - (options.atol + options.rtol * std::abs(numeric));
      // A NaN on either side is the worst mismatch (torch.allclose's rule),
      // never a pass: a NaN compares false against the worst error so far.
      if (std::isnan(error)) error = std::numeric_limits<double>::infinity();
      if (error > result.worst_error) {
        result.worst_error = error;
        result.report = fmt::format("input {} element {}: analytic {:.10g}, numeric {:.10g}", differentiable[k], e,
                                    got[size_t(e)], numeric);
      }
    }
  }
  result.ok = result.worst_error <= 0;
  return result;
}

GradcheckResult gradgradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                              const std::vector<Tensor>& inputs, GradcheckOptions options) {
  Shape output_shape;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> values;
    for (const Tensor& t : inputs) values.push_back(t.defined() && is_floating(t.dtype()) ? t.to(DType::f64) : t);
    output_shape = fn(values).shape();
  }
  // (x..., v) -> the gradients of sum(v * fn(x)) with respect to the floating x, flattened and joined.
  auto first_derivative = [&fn](const std::vector<Tensor>& x_and_v) {
    std::vector<Tensor> x(x_and_v.begin(), x_and_v.end() - 1);
    const Tensor& v = x_and_v.back();
    std::vector<Tensor> wrt;
    for (const Tensor& t : x)
      if (t.defined() && t.requires_grad()) wrt.push_back(t);
    Tensor out = fn(x).to(DType::f64);
    std::vector<Tensor> grads = grad({out}, wrt, {v}, true, true, true);
    std::vector<Tensor> flat;
    for (const Tensor& g : grads)
      if (g.defined()) flat.push_back(g.reshape({-1}));
    EMBER_CHECK(!flat.empty(), "gradgradcheck: the function's output depends on none of its inputs");
    return cat(flat, 0);
  };
  std::vector<Tensor> x_and_v = inputs;
  x_and_v.push_back(randn(output_shape, {.dtype = DType::f64}));
  return gradcheck(first_derivative, x_and_v, options);
}

}  // namespace ember::autograd
