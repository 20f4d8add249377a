// The composites of nn::functional's normalisation header (see normalization.h).
#include "nn/functional/normalization.h"

#include "core/ops/creation.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"

namespace ember::nn::functional {

Tensor normalize(const Tensor& input, double p, int64_t dim, double eps) {
  EMBER_CHECK(input.defined(), "normalize: undefined input");
  EMBER_CHECK(is_floating(input.dtype()), "normalize: expected a floating point input, got {}", input.dtype());
  const int64_t d = wrap_dim(dim, input.dim(), "normalize");
  // Under autocast the norm is f32; the result keeps the input's dtype, as PyTorch's.
  return (input / clamp_min(norm(input, p, {d}, true), eps)).to(input.dtype());
}

// A mask of shape [N, C, 1, 1] from dropout itself (so its zeros and scale
// are dropout's, from the same Philox stream), broadcast over each channel.
Tensor dropout2d(const Tensor& input, double p, bool training, Generator* generator) {
  EMBER_CHECK(input.defined(), "dropout2d: undefined input");
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout2d: probability has to be between 0 and 1, but got {}", p);
  EMBER_CHECK(input.dim() == 4,
              "dropout2d: expected a 4-d input [N, C, H, W], got {}; add the batch dim to one sample with "
              "unsqueeze(0) (PyTorch reads a 3-d input as [N, C, L] and drops 1-d channels, with a warning)",
              input.shape());
  if (!training || p == 0.0) return input;
  Tensor keep = ones({input.size(0), input.size(1), 1, 1}, {.dtype = input.dtype(), .device = input.device()});
  return input * dropout(keep, p, true, generator);
}

}  // namespace ember::nn::functional
