// Gradient of fused causal attention (forward: core/ops/attention.cpp). The
// backward recomputes the probabilities from the saved row logsumexp instead
// of saving them, flash-attention style. Tests: tests/cuda/test_cuda_attention.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/attention.h"
#include "core/ops/attention_kernels.h"

namespace ember::autograd {

void register_attention_functions() {
  // y = softmax(q k^T s + causal mask) v, P = the softmax, dO = g:
  //   dv = P^T dO, dP = dO v^T, dS = P (dP - rowsum(dO y)), dq = dS k s, dk = dS^T q s
  causal_attention_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<CausalAttentionParams>(r);
    const double scale = p.scale;
    record_formula(r, "CausalAttentionBackward", {input(r, 0), input(r, 1), input(r, 2), p.out, p.logsumexp},
                   [scale](const std::vector<Tensor>& s, const Tensor& g) {
                     refuse_double_backward("CausalAttentionBackward", {&g, &s[0], &s[1], &s[2]});
                     CausalAttentionGrads grads = causal_attention_backward(g, s[0], s[1], s[2], s[3], s[4], scale);
                     return std::vector<Tensor>{grads.query, grads.key, grads.value};
                   });
  });
}

}  // namespace ember::autograd
