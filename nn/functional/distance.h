// nn::functional distances between vectors, torch.nn.functional's names and
// semantics: composites of core's ops (nn/functional/distance.cpp).
// Tests: tests/nn/test_activations.cpp.
#pragma once

#include "core/tensor.h"

namespace ember::nn::functional {

// sum(x1 x2) / (max(|x1|, eps) max(|x2|, eps)) along dim, after broadcasting x1 and x2.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// |x1 - x2 + eps|_p along the last dim, after broadcasting.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6,
                         bool keepdim = false);

}  // namespace ember::nn::functional
