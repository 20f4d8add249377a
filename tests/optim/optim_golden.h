// Shared by the optim tests: the golden values of tests/data/golden_optim.json
// (written by tests/data/make_golden_optim.py with PyTorch), the fixed
// parameters and gradients they start from, and a factory that builds an
// ember optimizer from a case's PyTorch-style options.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "support/test_support.h"

namespace ember::testing {

const nlohmann::json& golden_optim();

// The golden cases' initial parameters (fresh leaves that require grad) in `dtype`.
std::vector<Tensor> golden_initial_params(DType dtype);
// Sets each parameter's .grad to the golden gradients of `step` (none where the file says null).
void set_golden_grads(const std::vector<Tensor>& params, size_t step, DType dtype);
// The golden values as a tensor of `like`'s shape and dtype.
Tensor golden_tensor(const nlohmann::json& values, const Tensor& like);

// The optimizer of an optimizer case ("optimizer", "groups": [{"params", "options"}]).
std::unique_ptr<optim::Optimizer> make_golden_optimizer(const nlohmann::json& spec, const std::vector<Tensor>& params);

// Tolerances for comparing with PyTorch: both round every f32 operation, but
// not always in the same order (PyTorch's vector kernels fuse multiply-adds).
inline double golden_tolerance(DType dtype) { return dtype == DType::f64 ? 1e-12 : 1e-6; }

}  // namespace ember::testing
