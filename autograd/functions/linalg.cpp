// Gradients of the matrix products (forward: core/ops/linalg.cpp).
// Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/elementwise.h"
#include "core/ops/linalg.h"
#include "core/ops/linalg_kernels.h"
#include "core/ops/views.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

// x @ y, computed as (y^T @ x^T)^T when `like` (the operand whose gradient
// this is) is a transposed matrix, so the gradient comes out in like's own
// layout: a Linear weight (used as weight.t()) then gets a gradient that
// reaches its accumulator contiguous and is taken over rather than copied.
// The GEMM reads the transposed operands by their strides.
Tensor product_like(const Tensor& x, const Tensor& y, const Tensor& like) {
  bool transposed = like.dim() == 2 && x.dim() == 2 && y.dim() == 2 && like.size(0) > 1 && like.size(1) > 1 &&
                    like.stride(0) == 1 && like.stride(1) == like.size(0);
  return transposed ? matmul(y.t(), x.t()).t() : matmul(x, y);
}

// d(a @ b) for NumPy matmul. With a as [..., n, k] and b as [..., k, m]
// (1-d operands made a row or a column, as the forward did):
//   da = g @ b^T   [..., n, m] x [..., m, k] -> [..., n, k]
//   db = a^T @ g   [..., k, n] x [..., n, m] -> [..., k, m]
// Broadcast batch dims come back summed by the engine. An operand that needs
// no gradient (need_a / need_b false) gets none, and its product is skipped.
Grads matmul_backward(const Tensor& a, const Tensor& b, const Tensor& g, bool need_a, bool need_b) {
  if (a.dim() == 1 && b.dim() == 1)  // a dot product: out is 0-d
    return {need_a ? g * b : Tensor(), need_b ? g * a : Tensor()};
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor g2 = a.dim() == 1 ? g.unsqueeze(-2) : g;
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  Tensor da, db;
  if (need_a) {
    da = product_like(g2, b2.transpose(-1, -2), a2);
    if (a.dim() == 1) da = da.squeeze(-2);
  }
  if (need_b) {
    db = product_like(a2.transpose(-1, -2), g2, b2);
    if (b.dim() == 1) db = db.squeeze(-1);
  }
  return {da, db};
}

}  // namespace

void register_linalg_functions() {
  // matmul / mm / bmm: out = a @ b  ->  da = g @ b^T, db = a^T @ g
  matmul_grad.set_recorder([](const GradRecord& r) {
    bool need_a = needs_grad(r, 0), need_b = needs_grad(r, 1);
    record_formula(r, "MatmulBackward", {input(r, 0), input(r, 1)}, [=](const Saved& s, const Tensor& g) {
      return matmul_backward(s[0], s[1], g, need_a, need_b);
    });
  });
  // addmm: out = input + a @ b  ->  dinput = g, da = g @ b^T, db = a^T @ g
  addmm_grad.set_recorder([](const GradRecord& r) {
    bool need_a = needs_grad(r, 1), need_b = needs_grad(r, 2);
    record_formula(r, "AddmmBackward", {input(r, 1), input(r, 2)}, [=](const Saved& s, const Tensor& g) {
      Grads product = matmul_backward(s[0], s[1], g, need_a, need_b);
      return Grads{g, product[0], product[1]};
    });
  });
}

}  // namespace ember::autograd
