// Sampling indices from tensors of weights: multinomial, torch.multinomial's
// semantics. (rand, randn and randint are in core/ops/creation.h.) Entry
// point: core/ops/random.cpp; kernels: core/ops/random_kernels.h.
// Tests: tests/core/test_multinomial.cpp.
#pragma once

#include "core/tensor.h"

namespace ember {

class Generator;

// Draws `num_samples` category indices (i64) per row of `weights`, a 1-d
// [categories] or 2-d [rows, categories] floating tensor of non-negative,
// finite, unnormalised weights: a category is drawn with probability
// weight / row sum; without replacement each draw renormalises over the
// categories not yet drawn. Errors for a negative, inf or nan weight, a row
// summing to 0, num_samples < 1, and, without replacement, num_samples above
// the number of categories with a nonzero weight (PyTorch would fill the rest
// with zero-weight categories). The same seed gives the same samples on the
// CPU and the GPU; on a GPU the checks read the weights back to the host.
// Result: [num_samples] or [rows, num_samples].
Tensor multinomial(const Tensor& weights, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);

}  // namespace ember
