// Gradient of cross-entropy (forward: core/ops/loss.cpp): one fused kernel
// over the saved input, target and per-row log-sum-exp (max and log-sum). The gradient flows to
// the input only. Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/loss.h"
#include "core/ops/loss_kernels.h"

namespace ember::autograd {

void register_loss_functions() {
  // cross_entropy: loss_i = sum_c a_c (lse_i - x_ic), a_c from the target, weight and smoothing
  //   ->  dx_ic = g_i (A_i p_ic - a_c), A_i = sum_c a_c, p = softmax(x), g_i = g / total_weight for the mean
  cross_entropy_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<CrossEntropyParams>(r);
    CrossEntropyOptions options = p.options;
    record_formula(r, "CrossEntropyBackward", {input(r, 0), p.target, p.row_max, p.log_sum, p.total_weight},
                   [options](const std::vector<Tensor>& s, const Tensor& g) {
                     refuse_double_backward("CrossEntropyBackward", {&g, &s[0]});
                     return std::vector<Tensor>{cross_entropy_backward(g, s[0], s[1], options, s[2], s[3], s[4])};
                   });
  });
}

}  // namespace ember::autograd
