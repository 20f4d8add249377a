// Gradients of layer_norm, rms_norm and batch_norm (forward:
// core/ops/normalization.cpp). Each backward is one fused kernel
// (kernels/{reference,cpu}/normalization.cpp) over the saved input and
// statistics. Tests: tests/autograd/test_gradcheck.cpp.
#include "autograd/function.h"
#include "autograd/functions/families.h"
#include "core/ops/elementwise.h"
#include "core/ops/normalization.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "core/ops/normalization_kernels.h"

namespace ember::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Saved = std::vector<Tensor>;

Grads as_grads(const NormalizationGrads& grads) { return Grads{grads.input, grads.weight, grads.bias}; }

// Under create_graph the norms' gradients are written in ops, so that they
// are recorded (the fused kernels have no gradient of their own). The
// statistics are recomputed from x, since their dependence on x is part of
// the second derivative.

// The dims a layer or RMS norm normalises over: x's last ones.
Dims normalized_dims(const Tensor& x, const Shape& normalized_shape) {
  Dims dims;
  for (int d = x.dim() - normalized_shape.ndim(); d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

// A saved per-row or per-channel statistic, shaped like `like` (a reduction
// kept to size-1 dims) and in its dtype.
Tensor kept_statistic(const Tensor& saved, const Tensor& like) { return saved.reshape(like.shape()).to(like.dtype()); }

// 1 / sqrt(m + eps) as a function of m, equal to the saved rstd. eps is not
// saved: it is recovered from the rstd as a constant, so the derivative,
// -rstd^3 / 2 dm, is exact whatever rounding the recovered eps carries.
Tensor differentiable_rstd(const Tensor& m, const Tensor& saved_rstd) {
  Tensor eps;
  {
    NoGradGuard no_grad;
    Tensor rstd = kept_statistic(saved_rstd, m);
    eps = rdiv(rstd * rstd, 1.0) - m;
  }
  return rsqrt(m + eps);
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dw = g xhat, db = g (the engine sums the rows)
Grads layer_norm_composite(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& saved_rstd,
                           const Shape& normalized_shape, bool has_bias) {
  Dims dims = normalized_dims(x, normalized_shape);
  Tensor centered = x - mean(x, dims, true);
  Tensor rstd = differentiable_rstd(mean(centered * centered, dims, true), saved_rstd);
  Tensor xhat = centered * rstd;
  Tensor dxhat = weight.defined() ? g * weight : g;
  Tensor dx = rstd * (dxhat - mean(dxhat, dims, true) - xhat * mean(dxhat * xhat, dims, true));
  return Grads{dx, weight.defined() ? g * xhat : Tensor(), has_bias ? g : Tensor()};
}

// dx = rstd (dxhat - xhat mean(dxhat xhat)), dw = g xhat
Grads rms_norm_composite(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& saved_rstd,
                         const Shape& normalized_shape) {
  Dims dims = normalized_dims(x, normalized_shape);
  Tensor rstd = differentiable_rstd(mean(x * x, dims, true), saved_rstd);
  Tensor xhat = x * rstd;
  Tensor dxhat = weight.defined() ? g * weight : g;
  Tensor dx = rstd * (dxhat - xhat * mean(dxhat * xhat, dims, true));
  return Grads{dx, weight.defined() ? g * xhat : Tensor()};
}

// Per channel (dim 1) over the batch and spatial dims; training normalises by
// the batch statistics (recomputed from x), eval by the running ones
// (constants): dx = w rstd g. dw = sum g xhat, db = sum g over those dims.
Grads batch_norm_composite(const Tensor& g, const Tensor& x, const Tensor& weight, const Tensor& saved_mean,
                           const Tensor& saved_rstd, bool training, bool has_bias) {
  Dims dims;
  for (int d = 0; d < x.dim(); ++d)
    if (d != 1) dims.push_back(d);
  Shape kept = Shape::filled(x.dim(), 1);
  kept[1] = x.shape()[1];
  Tensor w = weight.defined() ? weight.reshape(kept) : Tensor();
  Tensor dxhat = w.defined() ? g * w : g;
  Tensor xhat, dx;
  if (training) {
    Tensor centered = x - mean(x, dims, true);
    Tensor rstd = differentiable_rstd(mean(centered * centered, dims, true), saved_rstd);
    xhat = centered * rstd;
    dx = rstd * (dxhat - mean(dxhat, dims, true) - xhat * mean(dxhat * xhat, dims, true));
  } else {
    Tensor rstd = saved_rstd.reshape(kept).to(x.dtype());
    xhat = (x - saved_mean.reshape(kept).to(x.dtype())) * rstd;
    dx = dxhat * rstd;
  }
  return Grads{dx, w.defined() ? sum(g * xhat, dims) : Tensor(), has_bias ? sum(g, dims) : Tensor()};
}

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
                     if (should_record({&g, &s[0], &s[1]}))
                       return composite_in_f32(s[0], {g, s[0], s[1]}, [&](const Saved& o) {
                         return layer_norm_composite(o[0], o[1], o[2], s[3], normalized_shape, has_bias);
                       });
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
                     if (should_record({&g, &s[0], &s[1]}))
                       return composite_in_f32(s[0], {g, s[0], s[1]}, [&](const Saved& o) {
                         return rms_norm_composite(o[0], o[1], o[2], s[2], normalized_shape);
                       });
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
                     if (should_record({&g, &s[0], &s[1]}))
                       return composite_in_f32(s[0], {g, s[0], s[1]}, [&](const Saved& o) {
                         return batch_norm_composite(o[0], o[1], o[2], s[2], s[3], training, has_bias);
                       });
                     return as_grads(batch_norm_backward(g, s[0], s[1], s[2], s[3], training, has_bias));
                   });
  });
}

}  // namespace ember::autograd
