// Gradients of layer_norm, rms_norm and batch_norm (forward:
// core/ops/normalization.cpp). Each backward is one fused kernel
// (kernels/{reference,cpu}/normalization.cpp) over the saved input and
// statistics. Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/normalization.h"
#include "core/ops/normalization_kernels.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

Grads as_grads(const NormalizationGrads& grads) { return Grads{grads.input, grads.weight, grads.bias}; }

}  // namespace

void register_normalization_functions() {
  // layer_norm: y = (x - mean) rstd w + b, rstd = 1 / sqrt(var + eps), per row over normalized_shape
  //   ->  xhat = (x - mean) rstd, dxhat = g w:
  //       dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dw = sum_rows g xhat, db = sum_rows g
  layer_norm_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<NormalizationParams>(r);
    Shape normalized_shape = p.normalized_shape;
    bool has_bias = input(r, 2).defined();
    record_formula(r, "LayerNormBackward", {input(r, 0), input(r, 1), p.mean, p.rstd},
                   [normalized_shape, has_bias](const Saved& s, const Tensor& g) {
                     refuse_double_backward("LayerNormBackward", {&g, &s[0], &s[1]});
                     return as_grads(layer_norm_backward(g, s[0], normalized_shape, s[1], s[2], s[3], has_bias));
                   });
  });
  // rms_norm: y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps)
  //   ->  dx = rstd (g w - xhat mean(g w xhat)) with xhat = x rstd, dw = sum_rows g xhat
  rms_norm_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<NormalizationParams>(r);
    Shape normalized_shape = p.normalized_shape;
    record_formula(r, "RmsNormBackward", {input(r, 0), input(r, 1), p.rstd},
                   [normalized_shape](const Saved& s, const Tensor& g) {
                     refuse_double_backward("RmsNormBackward", {&g, &s[0], &s[1]});
                     NormalizationGrads grads = rms_norm_backward(g, s[0], normalized_shape, s[1], s[2]);
                     return Grads{grads.input, grads.weight};
                   });
  });
  // batch_norm: y = (x - mean_c) rstd_c w_c + b_c, per channel over batch and spatial dims
  //   ->  training (batch statistics): dx = w rstd (g - mean(g) - xhat mean(g xhat));
  //       eval (running statistics, constants): dx = w rstd g;  dw = sum g xhat, db = sum g
  batch_norm_grad.set_recorder([](const GradRecord& r) {
    const auto& p = params<NormalizationParams>(r);
    bool training = p.training, has_bias = input(r, 2).defined();
    record_formula(r, "BatchNormBackward", {input(r, 0), input(r, 1), p.mean, p.rstd},
                   [training, has_bias](const Saved& s, const Tensor& g) {
                     refuse_double_backward("BatchNormBackward", {&g, &s[0], &s[1]});
                     return as_grads(batch_norm_backward(g, s[0], s[1], s[2], s[3], training, has_bias));
                   });
  });
}

}  // namespace ember::autograd
