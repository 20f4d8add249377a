// Tensor: a cheap handle (one shared_ptr) to a TensorImpl, which holds the
// metadata of a strided view into shared Storage. Copying a Tensor shares it,
// as in PyTorch; clone() copies the data.
//
// The methods below are conveniences that forward to the free functions in
// core/ops/*.h, where each op is documented; their definitions live with them.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"

namespace ember {

struct AutogradMeta;  // grad_fn and hooks; defined by the autograd layer
namespace autograd {
class Node;
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;  // in elements
  int64_t offset = 0;  // in elements, into storage
  int64_t numel = 0;
  bool contiguous = true;  // row-major dense; computed once when the view is made
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<AutogradMeta> autograd;
  // A view made by core/ops/views.cpp: the tensor it views, the first of a
  // chain of views. An in-place write into the view gives this base its
  // history too (Note [In-place ops and autograd] in autograd/README.md).
  std::shared_ptr<TensorImpl> view_base;
  // A view made under NoGradGuard of a tensor that requires grad (or a view
  // of one): a plain alias, which in-place ops refuse while grad mode is on.
  bool no_grad_view = false;
  // A view made in grad mode of a leaf that required grad then (or a view of
  // one): in-place ops through it are refused while grad mode is on, even
  // once the leaf is frozen (PyTorch's CreationMeta), since its history
  // leads to the leaf's own gradient.
  bool view_of_grad_leaf = false;
  // Registered as a module's parameter, or made by nn::Parameter: a module's
  // parameter slot refuses any other tensor (Note [Parameter slots]).
  bool is_parameter = false;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  Tensor(const Tensor&) = default;
  Tensor(Tensor&&) noexcept = default;
  // Assignment re-points a handle, so only a named one can be assigned: a
  // handle returned by value (`t.grad() = g`, `t.detach() = x`) would be
  // re-pointed and dropped, changing nothing, so it does not compile.
  Tensor& operator=(const Tensor&) & = default;
  Tensor& operator=(Tensor&&) & noexcept = default;
  // A view of `storage` with the given geometry.
  static Tensor make(std::shared_ptr<Storage> storage, DType dtype, const Shape& shape, const Strides& strides,
                     int64_t offset);
  // Whether (shape, strides) is row-major dense (size-1 dims may have any stride).
  static bool dense(const Shape& shape, const Strides& strides);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  const Shape& shape() const { return impl_->shape; }
  const Shape& sizes() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int dim() const { return impl_->shape.ndim(); }
  int64_t numel() const { return impl_->numel; }
  int64_t offset() const { return impl_->offset; }
  int64_t element_size() const { return ember::element_size(dtype()); }
  int64_t nbytes() const { return numel() * element_size(); }
  bool is_contiguous() const { return impl_->contiguous; }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  uint64_t version() const { return impl_->storage->version(); }
  void bump_version() const { impl_->storage->bump_version(); }

  // Raw pointer to the first element (storage + offset).
  void* data_ptr() const {
    return static_cast<char*>(impl_->storage->data()) + impl_->offset * ember::element_size(impl_->dtype);
  }
  template <class T>
  T* data_ptr() const {
    check_dtype(dtype_of<T>, "data_ptr");
    return static_cast<T*>(data_ptr());
  }
  // The value of a one-element tensor, converted to T.
  template <class T>
  T item() const;
  // All elements in row-major order, converted to T.
  template <class T>
  std::vector<T> to_vector() const;

  std::string str() const;  // PyTorch-like printing

  // Autograd. The fields live here; the methods below are defined by the
  // autograd layer (autograd/tensor_autograd.cpp), which core never calls.
  // A view requires grad when its base does, even if the base took a history
  // only after the view was made (an in-place write through another view).
  bool requires_grad() const {
    return impl_->requires_grad || (impl_->view_base && impl_->view_base->requires_grad);
  }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& grad) const { impl_->grad = grad.impl_; }
  Tensor& requires_grad_(bool requires_grad = true);
  bool is_leaf() const;
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor detach() const;  // same storage, no history
  // autograd::backward of this tensor (autograd/engine.h): retain_graph
  // defaults to create_graph, which records the backward pass itself.
  void backward(const Tensor& gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false) const;
  // `hook(grad)` runs when this tensor's gradient is computed; a defined result
  // replaces it. Returns an id for remove_hook (PyTorch's handle.remove()).
  uint64_t register_hook(std::function<Tensor(const Tensor&)> hook) const;
  bool remove_hook(uint64_t id) const;  // whether a hook with that id was there
  // Leaves only: `hook(leaf)` runs right after the leaf's .grad was written.
  // Returns an id for remove_post_accumulate_grad_hook (DDP removes its hooks when destroyed).
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  bool remove_post_accumulate_grad_hook(uint64_t id) const;  // whether a hook with that id was there
  void retain_grad() const;  // non-leaves keep their .grad too

  // Views (core/ops/views.h).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const Dims& dims) const;
  Tensor t() const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor expand(const Shape& shape) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor diagonal(int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1) const;
  Tensor contiguous() const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, bool non_blocking = false) const;

  // In-place arithmetic (core/ops/elementwise.h); each bumps the version.
  Tensor& operator+=(const Tensor& other);
  Tensor& operator-=(const Tensor& other);
  Tensor& operator*=(const Tensor& other);
  Tensor& operator/=(const Tensor& other);
  Tensor& operator+=(const Scalar& other);
  Tensor& operator-=(const Scalar& other);
  Tensor& operator*=(const Scalar& other);
  Tensor& operator/=(const Scalar& other);
  Tensor& fill_(const Scalar& value);
  Tensor& copy_(const Tensor& source);  // broadcasts and converts dtype

 private:
  void check_dtype(DType expected, const char* what) const;
  std::shared_ptr<TensorImpl> impl_;
};

// A fresh contiguous tensor on `device`; contents uninitialised. `op` names
// the creating op in the errors about the shape.
Tensor make_tensor(const Shape& shape, DType dtype, Device device = kCPU, std::string_view op = "empty");

// Prints str(), as `print(tensor)` does in PyTorch (and gtest's failures).
std::ostream& operator<<(std::ostream& out, const Tensor& t);

}  // namespace ember

template <>
struct fmt::formatter<ember::Tensor> : fmt::formatter<std::string_view> {
  auto format(const ember::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(t.str(), ctx);
  }
};
