// Creating tensors. Kernels: kernels/{reference,cpu}/creation.cpp (fill, arange).
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ember {

class Generator;

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = kCPU;
  bool requires_grad = false;
};

Tensor empty(const Shape& shape, TensorOptions options = {});
Tensor zeros(const Shape& shape, TensorOptions options = {});
Tensor ones(const Shape& shape, TensorOptions options = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions options = {});
// [start, end) in steps of `step`; the dtype is i64 when all three are integers
// (unless options say otherwise), as in PyTorch.
Tensor arange(const Scalar& end);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions options);
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
Tensor eye(int64_t n, int64_t m = -1, TensorOptions options = {});

// Random tensors from `generator` (the default generator when null).
Tensor rand(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& shape, TensorOptions options = {}, Generator* generator = nullptr);
// randint's options default to int64, as torch.randint's: written `{}` to
// reach the generator argument, TensorOptions meant float32, whose integers
// past 2^24 are not all there (randint(0, 5, {4}, {}, &generator)).
struct RandintOptions {
  DType dtype = DType::i64;
  Device device = kCPU;
  bool requires_grad = false;
};
Tensor randint(int64_t low, int64_t high, const Shape& shape, RandintOptions options = {},
               Generator* generator = nullptr);

// Wraps memory owned by the caller (no copy); the caller keeps it alive.
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = kCPU);
Tensor from_blob(void* data, const Shape& shape, const Strides& strides, DType dtype, Device device = kCPU);
// Copies `values` into a new tensor of `shape` (1-d of values.size() when shape is empty;
// scalar_tensor makes a 0-d one).
template <class T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape = {});
// A 0-d tensor holding `value`.
Tensor scalar_tensor(const Scalar& value, TensorOptions options);

Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
Tensor rand_like(const Tensor& t, Generator* generator = nullptr);
Tensor randn_like(const Tensor& t, Generator* generator = nullptr);

}  // namespace ember
