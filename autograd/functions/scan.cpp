// Gradients of the scan family (forward: core/ops/scan.cpp). Both formulas
// are composites of differentiable ops. Tests: tests/autograd/test_scan_grads.cpp
// and the gradcheck table (tests/autograd/test_gradcheck.cpp).
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/indexing.h"
#include "core/ops/reduction.h"
#include "core/ops/reorder.h"
#include "core/ops/scan.h"
#include "core/ops/scan_kernels.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// out[k] = t[k] + t[k + 1] + ... along dim.
Tensor reversed_cumsum(const Tensor& t, int64_t dim) { return flip(cumsum(flip(t, {dim}), dim), {dim}); }

// cumprod's gradient as the definition writes it, O(n^2) along dim: for each
// k, the cumprod of x with x_k set to 1, times g, summed from k on. The case
// analysis below is right in value but not in its own derivative (past the
// first zero it is the constant 0, whose derivative by that zero is not 0), so
// a double backward through a zero takes this one, as PyTorch's
// cumprod_backward under grad mode. Its [..., n, n] intermediates are why it
// is kept to that case.
Tensor cumprod_grad_by_definition(const Tensor& x, const Tensor& g, int64_t dim) {
  const Tensor xt = transpose(x, dim, -1), gt = transpose(g, dim, -1);  // [..., n]
  const int64_t n = xt.size(-1);
  Shape square = xt.shape();
  square.insert(square.ndim() - 1, n);  // [..., n (k), n (i)]
  const Tensor diagonal = eye(n, n, {.dtype = DType::boolean, .device = x.device()});
  const Tensor without_k = where(diagonal, ones_like(xt).unsqueeze(-2).expand(square), xt.unsqueeze(-2).expand(square));
  const Tensor from_k_on = triu(ones({n, n}, {.dtype = x.dtype(), .device = x.device()}));  // [k, j]: j >= k
  const Tensor dx = sum(cumprod(without_k, -1) * gt.unsqueeze(-2) * from_k_on, {-1});
  return transpose(dx, dim, -1);
}

}  // namespace

void register_scan_functions() {
  // cumsum: y_j = x_0 + ... + x_j  ->  dx_k = g_k + g_{k+1} + ... (the cumsum of g from the end)
  cumsum_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    record_formula(r, "CumsumBackward", {}, [dim](const Saved&, const Tensor& g) {
      return Grads{reversed_cumsum(g, dim)};
    });
  });
  // cumprod: y_j = x_0 ... x_j  ->  dx_k = sum over j >= k of g_j * (product of x_i, i <= j, i != k).
  // With z the first zero of x's slice (PyTorch's case analysis, cumprod_backward):
  //   k < z:  the product is y_j / x_k (and y_j = 0 from z on), so dx_k = (sum_{j>=k} g_j y_j) / x_k;
  //   k == z: the product is the cumprod of x with x_z set to 1, so dx_z = sum_{j>=z} g_j cumprod(x, x_z = 1)_j;
  //   k > z:  every product holds x_z = 0, so dx_k = 0.
  // One path for every input: no device-to-host read to ask whether x has zeros.
  cumprod_grad.set_recorder([](const GradRecord& r) {
    int64_t dim = params<int64_t>(r);
    record_formula(r, "CumprodBackward", {input(r, 0), output(r, 0)}, [dim](const Saved& s, const Tensor& g) {
      const Tensor &x = s[0], &y = s[1];
      if (grad_mode_enabled() && x.dim() > 0 && sum(eq(x, 0)).item<int64_t>() > 0)
        return Grads{cumprod_grad_by_definition(x, g, dim)};
      Tensor is_zero = eq(x, 0);
      Tensor zeros_so_far = cumsum(is_zero, dim);  // i64: zeros among x_0..x_k
      Tensor before_first_zero = eq(zeros_so_far, 0);
      Tensor first_zero = logical_and(is_zero, eq(zeros_so_far, 1));
      Tensor before = reversed_cumsum(g * y, dim) / where(before_first_zero, x, 1.0);
      Tensor others = cumprod(where(first_zero, ones_like(x), x), dim);
      Tensor at_first_zero = sum(where(ge(zeros_so_far, 1), g * others, 0.0), {dim}, true);
      return Grads{where(before_first_zero, before, where(first_zero, at_first_zero, 0.0))};
    });
  });
}

}  // namespace ember::autograd
