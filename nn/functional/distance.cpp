// Distances of nn::functional (see distance.h).
#include "nn/functional/distance.h"

#include "core/ops/elementwise.h"
#include "core/ops/reduction.h"
#include "core/ops/views.h"
#include "core/shape.h"

namespace ember::nn::functional {

namespace {

// Both inputs expanded to their broadcast shape, so that dim counts in it.
std::pair<Tensor, Tensor> broadcast_floating(const Tensor& x1, const Tensor& x2, std::string_view op) {
  EMBER_CHECK(x1.defined() && x2.defined(), "{}: undefined input", op);
  EMBER_CHECK(is_floating(x1.dtype()) && x1.dtype() == x2.dtype(),
              "{}: expected two floating point inputs of one dtype, got {} and {}", op, x1.dtype(), x2.dtype());
  const Shape shape = broadcast_shapes(x1.shape(), x2.shape(), op);
  return {x1.expand(shape), x2.expand(shape)};
}

}  // namespace

// PyTorch's form: each input divided by its own clamped norm, then the dot
// product. The zero vector's similarity is 0.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  auto [a, b] = broadcast_floating(x1, x2, "cosine_similarity");
  EMBER_CHECK(a.dim() > 0, "cosine_similarity: expected inputs with at least one dim, got 0-d tensors");
  const int64_t d = wrap_dim(dim, a.dim(), "cosine_similarity");
  Tensor a_unit = a / clamp_min(norm(a, 2.0, {d}, true), eps);
  Tensor b_unit = b / clamp_min(norm(b, 2.0, {d}, true), eps);
  return sum(a_unit * b_unit, {d}).to(a.dtype());  // autocast's f32 norm must not widen the result
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  auto [a, b] = broadcast_floating(x1, x2, "pairwise_distance");
  EMBER_CHECK(p >= 0, "pairwise_distance: p must be non-negative, got {}", p);
  EMBER_CHECK(a.dim() > 0, "pairwise_distance: expected inputs with at least one dim, got 0-d tensors");
  return norm(a - b + eps, p, {a.dim() - 1}, keepdim).to(a.dtype());  // autocast's norm runs in f32
}

}  // namespace ember::nn::functional
