// Gradient of fused attention (forward: core/ops/attention.cpp). The backward
// recomputes the probabilities from the saved row logsumexp instead of saving
// them, flash-attention style. Tests: tests/core/test_attention.cpp,
// tests/cuda/test_cuda_attention.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/attention.h"
#include "core/ops/attention_kernels.h"

namespace ember::autograd {

void register_attention_functions() {
  // y = softmax(q k^T s + mask) v, P = the softmax, dO = g:
  //   dv = P^T dO, dP = dO v^T, dS = P (dP - rowsum(dO y)), dq = dS k s, dk = dS^T q s
  attention_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<AttentionParams>(r);
    AttentionOptions options = p.options;
    record_formula(r, "AttentionBackward", {input(r, 0), input(r, 1), input(r, 2), p.out, p.logsumexp},
                   [options](const std::vector<Tensor>& s, const Tensor& g) {
                     refuse_double_backward("AttentionBackward", {&g, &s[0], &s[1], &s[2]});
                     AttentionGrads grads = attention_backward(g, s[0], s[1], s[2], s[3], s[4], options);
                     return std::vector<Tensor>{grads.query, grads.key, grads.value};
                   });
  });
}

}  // namespace ember::autograd
