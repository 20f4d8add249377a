// The thread-local autocast policy and its guards (core/autocast.h), and the
// casts the op entry points ask for (core/autocast_ops.h).
#include "core/autocast.h"

#include <algorithm>

#include "core/autocast_ops.h"
#include "core/ops/views.h"

namespace ember {
namespace detail {
constinit thread_local AutocastState t_autocast_state;
}  // namespace detail

namespace {

uint8_t device_bit(DeviceType device) { return uint8_t(1u << int(device)); }

// The dtype `t` is cast to for an op of `kind`, or `t`'s own when it stays.
DType autocast_target(const Tensor& t, AutocastKind kind) {
  const DType dtype = t.dtype();
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) return dtype;
  const DeviceType device = t.device().type;
  if (!is_autocast_enabled(device)) return dtype;
  return kind == AutocastKind::f32 ? DType::f32 : autocast_dtype(device);
}

// `t` cast to `dtype` in its own memory layout when it is a permutation of a
// dense tensor, as the transposed weight a Linear multiplies by: the copy is
// one linear pass instead of a transposing one, and the product's gradient
// comes back in the weight's layout (Note [Autocast]). Views only, so the
// cast stays differentiable.
Tensor cast_in_layout(const Tensor& t, DType dtype) {
  if (t.is_contiguous()) return t.to(dtype);
  Dims order;
  for (int d = 0; d < t.dim(); ++d) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  Tensor dense = t.permute(order);
  if (!dense.is_contiguous()) return t.to(dtype);  // a slice or a broadcast: gathered into a fresh tensor
  Dims inverse = order;
  for (int d = 0; d < t.dim(); ++d) inverse[order[d]] = d;
  return dense.to(dtype).permute(inverse);
}

}  // namespace

bool is_autocast_enabled(DeviceType device) {
  return (detail::t_autocast_state.enabled & device_bit(device)) != 0;
}

DType autocast_dtype(DeviceType device) { return detail::t_autocast_state.dtype[int(device)]; }

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled)
    : device_(device), previous_enabled_(is_autocast_enabled(device)), previous_dtype_(autocast_dtype(device)) {
  EMBER_CHECK(dtype == DType::bf16 || dtype == DType::f16,
              "AutocastGuard: the autocast dtype must be bfloat16 or float16, got {}", dtype);
  detail::AutocastState& state = detail::t_autocast_state;
  state.dtype[int(device)] = dtype;
  state.enabled = enabled ? state.enabled | device_bit(device) : state.enabled & ~device_bit(device);
}

AutocastGuard::~AutocastGuard() {
  detail::AutocastState& state = detail::t_autocast_state;
  state.dtype[int(device_)] = previous_dtype_;
  state.enabled =
      previous_enabled_ ? state.enabled | device_bit(device_) : state.enabled & ~device_bit(device_);
}

NoAutocastGuard::NoAutocastGuard() : previous_enabled_(detail::t_autocast_state.enabled) {
  detail::t_autocast_state.enabled = 0;
}

NoAutocastGuard::~NoAutocastGuard() { detail::t_autocast_state.enabled = previous_enabled_; }

bool detail::autocast_changes_any(AutocastKind kind, std::initializer_list<const Tensor*> inputs) {
  for (const Tensor* t : inputs)
    if (t && t->defined() && autocast_target(*t, kind) != t->dtype()) return true;
  return false;
}

Tensor autocast_input(const Tensor& t, AutocastKind kind) {
  if (!t.defined()) return t;
  const DType target = autocast_target(t, kind);
  return target == t.dtype() ? t : cast_in_layout(t, target);
}

}  // namespace ember
