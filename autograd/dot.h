// Teaching aid: the recorded graph behind a tensor as Graphviz DOT, one node
// per op (its backward node's name) with the shapes and dtypes of its inputs,
// and a box per leaf. Render with `dot -Tpng graph.dot -o graph.png`.
#pragma once

#include <string>

#include "core/tensor.h"

namespace ember::autograd {

std::string to_dot(const Tensor& root);

}  // namespace ember::autograd
