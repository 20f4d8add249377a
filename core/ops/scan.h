// Cumulative sums and products along a dim, as torch.cumsum and torch.cumprod.
// Entry points: core/ops/scan.cpp; kernels: kernels/{reference,cpu}/scan.cpp,
// kernels/cuda/scan.cu. Tests: tests/core/test_scan.cpp, tests/autograd/test_scan_grads.cpp.
#pragma once

#include <optional>

#include "core/tensor.h"

namespace ember {

// out[..., i, ...] = sum of t[..., 0..i, ...] along dim. The result has
// `dtype` when given (t is converted first, as PyTorch does), else i64 for
// bool and integer inputs and t's dtype for floating ones.
Tensor cumsum(const Tensor& t, int64_t dim, std::optional<DType> dtype = std::nullopt);
// The same with products. Its gradient is right where t has zeros.
Tensor cumprod(const Tensor& t, int64_t dim, std::optional<DType> dtype = std::nullopt);

}  // namespace ember
