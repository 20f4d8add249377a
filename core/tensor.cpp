// Tensor metadata queries, element access and make_tensor.
#include "core/tensor.h"

#include <algorithm>
#include <ostream>
#include <type_traits>

#include "core/device_runtime.h"
#include "core/ops/views.h"
#include "core/scalar_fits.h"

namespace ember {

Tensor Tensor::make(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, const Strides& strides,
                    int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->numel = shape.numel();
  impl->contiguous = dense(shape, strides);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_tensor(const Shape& shape, DType dtype, Device device, std::string_view op) {
  for (int64_t d : shape) EMBER_CHECK(d >= 0, "{}: negative dimension in shape {}", op, shape);
  Strides strides = contiguous_strides(shape, op);
  // The bytes, multiplied with overflow checks unless a zero makes them 0
  // (the strides check bounded every dim but the first).
  const bool no_elements = std::find(shape.begin(), shape.end(), 0) != shape.end();
  int64_t nbytes = no_elements ? 0 : element_size(dtype);
  for (int64_t d : shape)
    EMBER_CHECK(no_elements || !__builtin_mul_overflow(nbytes, d, &nbytes),
                "{}: shape {} of {} is more bytes than 64 bits hold", op, shape, dtype);
  auto storage = std::make_shared<Storage>(size_t(nbytes), device);
  return Tensor::make(std::move(storage), dtype, shape, strides, 0);
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

int64_t Tensor::size(int64_t dim) const { return shape()[int(wrap_dim(dim, this->dim(), "size"))]; }
int64_t Tensor::stride(int64_t dim) const { return strides()[int(wrap_dim(dim, this->dim(), "stride"))]; }

bool Tensor::dense(const Shape& shape, const Strides& strides) {
  // Empty first: the sizes after a zero may multiply past int64 ([0, 7, 2^63 - 1],
  // Note [Views of empty tensors]); without a zero, tensors are made only with
  // shapes whose product fits.
  if (shape.numel() == 0) return true;
  int64_t expected = 1;
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    int64_t size = shape[d];
    if (size != 1 && strides[d] != expected) return false;
    expected *= size;
  }
  return true;
}

void Tensor::check_dtype(DType expected, const char* what) const {
  EMBER_CHECK(defined(), "{}: the tensor is undefined", what);
  EMBER_CHECK(dtype() == expected, "{}: the tensor has dtype {}, but {} was requested", what, dtype(), expected);
}

template <class T>
T Tensor::item() const {
  EMBER_CHECK(defined(), "item: the tensor is undefined");
  EMBER_CHECK(numel() == 1, "item: a tensor with {} elements (shape {}) cannot be converted to a scalar", numel(),
              shape());
  if (!device().is_cpu()) check_implicit_device_copy("item", device());
  Tensor host = to(kCPU);
  if constexpr (!std::is_same_v<T, bool> && !std::is_same_v<T, double>) {
    // Checked, as libtorch's item<T>(): the saturating cast gave 0 for NaN
    // and INT32_MAX for 3e9, wrapped 5e9 from int64 into int32, and turned
    // an f64 1e300 into an f32 inf (inf and NaN themselves convert).
    const bool floating = is_floating(dtype());
    const Scalar value = floating ? Scalar(host.item<double>()) : Scalar(*host.to(DType::i64).data_ptr<int64_t>());
    check_scalar_fits("item", value, dtype_of<T>);
  }
  host = host.to(dtype_of<T>);
  return *static_cast<const T*>(host.data_ptr());
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  EMBER_CHECK(defined(), "to_vector: the tensor is undefined");
  if (!device().is_cpu()) check_implicit_device_copy("to_vector", device());
  Tensor host = to(kCPU).to(dtype_of<T>).contiguous();
  const T* data = static_cast<const T*>(host.data_ptr());
  return std::vector<T>(data, data + host.numel());
}

#define EMBER_INSTANTIATE(T)                     \
  template T Tensor::item<T>() const;            \
  template std::vector<T> Tensor::to_vector<T>() const;
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
EMBER_INSTANTIATE(Half)
EMBER_INSTANTIATE(BFloat16)
EMBER_INSTANTIATE(int32_t)
EMBER_INSTANTIATE(int64_t)
EMBER_INSTANTIATE(bool)
#undef EMBER_INSTANTIATE

}  // namespace ember
