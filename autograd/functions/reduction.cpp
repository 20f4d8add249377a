// Gradients of the reduction family (forward: core/ops/reduction.cpp).
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include <algorithm>
#include <cmath>

#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "core/ops/reduction_kernels.h"
#include "core/ops/reorder.h"
#include "core/ops/scan.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// The reduced dims of a reduction over `dims` of an input of `ndim` dims,
// wrapped and sorted (all dims when the list is empty).
std::vector<int64_t> reduced_dims(const Dims& dims, int ndim) {
  std::vector<int64_t> out;
  if (ndim == 0) return out;  // a 0-d input has no dim to restore
  if (dims.empty()) {
    for (int d = 0; d < ndim; ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, "reduction"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// g of the reduced shape, viewed with the reduced dims back as size 1 and
// expanded to the input's shape: the gradient of every input element.
Tensor expand_reduced(const Tensor& g, const std::vector<int64_t>& dims, bool keepdim, const Shape& input_shape) {
  Tensor out = g;
  if (!keepdim)
    for (int64_t d : dims) out = out.unsqueeze(d);
  return out.expand(input_shape);
}

// What a reduction recorder captures: the reduced dims and the input's shape,
// so g (and the output) can be expanded back over the input.
struct Reduced {
  std::vector<int64_t> dims;
  bool keepdim;
  Shape shape;
  int64_t count;  // elements per reduced group
  Tensor expand(const Tensor& t) const { return expand_reduced(t, dims, keepdim, shape); }
};

Reduced reduced_of(const GradRecord& r, const Dims& dims, bool keepdim) {
  Shape shape = input(r, 0).shape();
  Reduced out{reduced_dims(dims, shape.ndim()), keepdim, shape, 1};
  for (int64_t d : out.dims) out.count *= shape[int(d)];
  return out;
}

Tensor as(const Tensor& condition, const Tensor& like) { return condition.to(like.dtype()); }

// The product of x_0 .. x_{n-1} along the last dim, x_k itself left out, for
// every k: the products before k times those after it, differentiable
// everywhere (PyTorch's prod_safe_zeros_backward).
Tensor exclusive_cumprod(const Tensor& x) {
  const int64_t n = x.size(-1);
  return pad(cumprod(x.narrow(-1, 0, n - 1), -1), {1, 0}, 1.0);
}

// For each element of a, the product of the other elements of its reduced
// group, as a differentiable function of a: the reduced dims moved last and
// flattened into one.
Tensor products_of_the_others(const Tensor& a, const Reduced& red) {
  Dims order;
  for (int d = 0; d < a.dim(); ++d)
    if (std::find(red.dims.begin(), red.dims.end(), d) == red.dims.end()) order.push_back(d);
  Shape flat_shape;
  for (int64_t d : order) flat_shape.push_back(a.shape()[int(d)]);
  flat_shape.push_back(red.count);
  for (int64_t d : red.dims) order.push_back(d);
  Tensor moved = a.permute(order);
  Tensor flat = moved.reshape(flat_shape);
  Tensor others = exclusive_cumprod(flat) * flip(exclusive_cumprod(flip(flat, {-1})), {-1});
  Dims inverse = Dims::filled(a.dim(), 0);
  for (int d = 0; d < a.dim(); ++d) inverse[int(order[d])] = d;
  return others.reshape(moved.shape()).permute(inverse);
}

// The mean of x over the reduced dims, kept as size-1 dims.
Tensor kept_mean(const Tensor& x, const Reduced& red) {
  Dims dims;
  for (int64_t d : red.dims) dims.push_back(d);
  return mean(x, dims, true);
}

}  // namespace

void register_reduction_functions() {
  // sum: out = sum over dims of a  ->  da = g expanded back over the reduced dims
  sum_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    Shape shape = input(r, 0).shape();
    auto dims = reduced_dims(p.dims, shape.ndim());
    record_formula(r, "SumBackward", {}, [dims, keepdim = p.keepdim, shape](const Saved&, const Tensor& g) {
      return Grads{expand_reduced(g, dims, keepdim, shape)};
    });
  });
  // mean: out = sum / n  ->  da = g / n expanded back
  mean_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    Shape shape = input(r, 0).shape();
    auto dims = reduced_dims(p.dims, shape.ndim());
    int64_t count = 1;
    for (int64_t d : dims) count *= shape[int(d)];
    record_formula(r, "MeanBackward", {}, [dims, keepdim = p.keepdim, shape, count](const Saved&, const Tensor& g) {
      return Grads{expand_reduced(g / double(count), dims, keepdim, shape)};
    });
  });
  // prod: out = prod of a  ->  da = g * (product of the other elements): out / a where
  // a != 0; at a group's single zero, the product of its non-zeros; 0 elsewhere.
  // Those pieces are right in value but constant where a group holds a zero,
  // so a double backward there takes the products by definition.
  prod_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    record_formula(r, "ProdBackward", {input(r, 0), output(r, 0)},
                   [red = reduced_of(r, p.dims, p.keepdim)](const Saved& s, const Tensor& g) {
                     const Tensor& a = s[0];
                     if (grad_mode_enabled() && a.dim() > 0 && sum(eq(a, 0)).item<int64_t>() > 0)
                       return Grads{red.expand(g) * products_of_the_others(a, red)};
                     Dims dims;
                     for (int64_t d : red.dims) dims.push_back(d);
                     Tensor is_zero = eq(a, 0);
                     Tensor zeros_in_group = red.expand(sum(is_zero.to(DType::i64), dims, red.keepdim));
                     Tensor nonzero_product = red.expand(prod(where(is_zero, ones_like(a), a), dims, red.keepdim));
                     Tensor out = red.expand(s[1]);
                     Tensor others = where(eq(zeros_in_group, 0), out / where(is_zero, ones_like(a), a),
                                           where(logical_and(is_zero, eq(zeros_in_group, 1)), nonzero_product,
                                                 zeros_like(a)));
                     return Grads{red.expand(g) * others};
                   });
  });
  // amax / amin: out = the extreme  ->  da = g split evenly among the elements equal to it
  extreme_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    record_formula(r, "AmaxBackward", {input(r, 0), output(r, 0)},
                   [red = reduced_of(r, p.dims, p.keepdim)](const Saved& s, const Tensor& g) {
                     Tensor hit = as(eq(s[0], red.expand(s[1])), s[0]);
                     Dims dims;
                     for (int64_t d : red.dims) dims.push_back(d);
                     Tensor ties = red.expand(sum(hit, dims, red.keepdim));
                     return Grads{red.expand(g) * hit / ties};
                   });
  });
  // max / min over all: the same, except that a NaN result (a NaN element)
  // sends g to the NaN elements, as PyTorch's evenly_distribute_backward;
  // amax's ties above find no NaN equal to it and give NaN, as PyTorch's do.
  extreme_all_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "MaxBackward", {input(r, 0), output(r, 0)}, [](const Saved& s, const Tensor& g) {
      const Tensor& a = s[0];
      Tensor hit = as(logical_or(eq(a, s[1]), logical_and(isnan(a), isnan(s[1]))), a);
      return Grads{g * hit / sum(hit)};
    });
  });
  // max / min along a dim: out = a at the returned index  ->  da = g scattered to that index
  indexed_extreme_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<DimParams>(r);
    Shape shape = input(r, 0).shape();
    int64_t dim = wrap_dim(p.dim, shape.ndim(), "max");
    record_formula(r, "MaxBackward", {output(r, 1)}, [=, keepdim = p.keepdim](const Saved& s, const Tensor& g) {
      if (shape.ndim() == 0) return Grads{g};
      Tensor index = keepdim ? s[0] : s[0].unsqueeze(dim);
      Tensor grad = keepdim ? g : g.unsqueeze(dim);
      return Grads{scatter_add(zeros(shape, {.dtype = g.dtype(), .device = g.device()}), dim, index, grad)};
    });
  });
  // var: out = sum (a - mean)^2 / (n - unbiased)  ->  da = g * 2 (a - mean) / (n - unbiased)
  var_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<MomentParams>(r);
    record_formula(r, "VarBackward", {input(r, 0)},
                   [red = reduced_of(r, p.dims, p.keepdim), unbiased = p.unbiased](const Saved& s, const Tensor& g) {
                     double divisor = double(red.count - (unbiased ? 1 : 0));
                     return Grads{red.expand(g) * (s[0] - kept_mean(s[0], red)) * (2 / divisor)};
                   });
  });
  // std: out = sqrt(var)  ->  da = g * (a - mean) / ((n - unbiased) std)  (0 for a constant group, where
  // a - mean is 0 too: dividing by 1 there keeps the 0 instead of 0/0)
  std_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<MomentParams>(r);
    record_formula(r, "StdBackward", {input(r, 0), output(r, 0)},
                   [red = reduced_of(r, p.dims, p.keepdim), unbiased = p.unbiased](const Saved& s, const Tensor& g) {
                     double divisor = double(red.count - (unbiased ? 1 : 0));
                     Tensor is_constant = eq(s[1], 0);
                     Tensor safe_std = where(is_constant, ones_like(s[1]), s[1]);
                     // The where, not just the 0 of a - mean: the product's own
                     // derivative is not 0 there (a double backward).
                     return Grads{where(red.expand(logical_not(is_constant)),
                                        red.expand(g / safe_std) * (s[0] - kept_mean(s[0], red)) / divisor, 0.0)};
                   });
  });
  // logsumexp: out = log sum e^a  ->  da = g e^(a - out)
  logsumexp_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<ReduceParams>(r);
    record_formula(r, "LogsumexpBackward", {input(r, 0), output(r, 0)},
                   [red = reduced_of(r, p.dims, p.keepdim)](const Saved& s, const Tensor& g) {
                     return Grads{red.expand(g) * exp(s[0] - red.expand(s[1]))};
                   });
  });
  // norm: out = (sum |a|^p)^(1/p)  ->  da = g sign(a) |a|^(p-1) / out^(p-1)  (0 where out = 0);
  // p = inf: like amax on |a|; p = 0 (a count): no gradient
  norm_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<NormParams>(r);
    record_formula(r, "NormBackward", {input(r, 0), output(r, 0)},
                   [red = reduced_of(r, p.dims, p.keepdim), order = p.p](const Saved& s, const Tensor& g) {
                     const Tensor& a = s[0];
                     Tensor out = red.expand(s[1]), grad = red.expand(g);
                     Tensor sign = as(gt(a, 0), a) - as(lt(a, 0), a);
                     if (order == 0) return Grads{zeros_like(a)};
                     if (std::isinf(order)) {
                       Tensor hit = as(eq(abs(a), out), a);
                       Dims dims;
                       for (int64_t d : red.dims) dims.push_back(d);
                       return Grads{grad * sign * hit / red.expand(sum(hit, dims, red.keepdim))};
                     }
                     Tensor safe_out = where(eq(out, 0), ones_like(out), out);
                     // p >= 2: a |a|^(p-2) in place of sign |a|^(p-1), as PyTorch's, so that
                     // the derivative along a zero element is not lost (d(a / out)/da is
                     // 1 / out there; a double backward).
                     if (order == 2) return Grads{where(eq(out, 0), zeros_like(a), grad * a / safe_out)};
                     if (order > 2)
                       return Grads{where(eq(out, 0), zeros_like(a),
                                          grad * a * pow(abs(a), order - 2) / pow(safe_out, order - 1))};
                     Tensor scale = pow(abs(a), order - 1) / pow(safe_out, order - 1);
                     // A zero element's gradient is 0 (PyTorch's), where p < 1 makes its
                     // |a|^(p-1) infinite and sign * scale 0 * inf.
                     return Grads{where(logical_or(eq(out, 0), eq(a, 0)), zeros_like(a), grad * sign * scale)};
                   });
  });
  // softmax: y = e^a / sum e^a  ->  da = y (g - sum(g y))
  softmax_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    record_formula(r, "SoftmaxBackward", {output(r, 0)}, [dim](const Saved& s, const Tensor& g) {
      const Tensor& y = s[0];
      return Grads{y * (g - sum(g * y, {dim}, true))};
    });
  });
  // log_softmax: y = a - logsumexp(a)  ->  da = g - e^y sum(g)
  log_softmax_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    record_formula(r, "LogSoftmaxBackward", {output(r, 0)}, [dim](const Saved& s, const Tensor& g) {
      return Grads{g - exp(s[0]) * sum(g, {dim}, true)};
    });
  });
}

}  // namespace ember::autograd
