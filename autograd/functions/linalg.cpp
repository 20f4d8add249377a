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

// d(a @ b) for NumPy matmul. With a as [..., n, k] and b as [..., k, m]
// (1-d operands made a row or a column, as the forward did):
//   da = g @ b^T   [..., n, m] x [..., m, k] -> [..., n, k]
//   db = a^T @ g   [..., k, n] x [..., n, m] -> [..., k, m]
// Broadcast batch dims come back summed by the engine.
Grads matmul_backward(const Tensor& a, const Tensor& b, const Tensor& g) {
  if (a.dim() == 1 && b.dim() == 1) return {g * b, g * a};  // a dot product: out is 0-d
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor g2 = a.dim() == 1 ? g.unsqueeze(-2) : g;
  if (b.dim() == 1) g2 = g2.unsqueeze(-1);
  Tensor da = matmul(g2, b2.transpose(-1, -2));
  Tensor db = matmul(a2.transpose(-1, -2), g2);
  if (a.dim() == 1) da = da.squeeze(-2);
  if (b.dim() == 1) db = db.squeeze(-1);
  return {da, db};
}

}  // namespace

void register_linalg_functions() {
  // matmul / mm / bmm: out = a @ b  ->  da = g @ b^T, db = a^T @ g
  matmul_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "MatmulBackward", {input(r, 0), input(r, 1)},
                   [](const Saved& s, const Tensor& g) { return matmul_backward(s[0], s[1], g); });
  });
  // addmm: out = input + a @ b  ->  dinput = g, da = g @ b^T, db = a^T @ g
  addmm_grad.set_recorder([](const GradRecord& r) {
    record_formula(r, "AddmmBackward", {input(r, 1), input(r, 2)}, [](const Saved& s, const Tensor& g) {
      Grads product = matmul_backward(s[0], s[1], g);
      return Grads{g, product[0], product[1]};
    });
  });
}

}  // namespace ember::autograd
