// An ordered list of (name, tensor) pairs: what a state dict is (PyTorch's
// OrderedDict) and what a safetensors file holds. The order is the
// registration order of a module's parameters and buffers.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace ember {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

}  // namespace ember
