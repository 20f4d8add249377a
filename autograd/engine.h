// The backward engine: the reverse walk over the recorded graph.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

// Computes gradients of `roots` (seeded with `grad_roots`; ones for a scalar
// root when omitted) and accumulates them into the leaves' `.grad`.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false);

// Returns d(outputs)/d(inputs) without touching any `.grad`. An input the
// outputs do not depend on gets an undefined tensor if allow_unused, else an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

}  // namespace ember::autograd
