// What the op entry points call to apply the autocast policy of
// core/autocast.h (Note [Autocast] in core/README.md). An entry point of a
// lower-precision or f32 op starts with
//   if (autocast_wants(AutocastKind::lower_precision, {&a, &b})) [[unlikely]]
//     return matmul(autocast_input(a, AutocastKind::lower_precision), autocast_input(b, ...));
// and the re-entered call finds its operands already cast. With autocast off
// on this thread the check is one thread-local load and a branch.
// Callers: core/ops/{linalg,conv,normalization,reduction,loss}.cpp and the
// composite losses of nn/functional/loss.cpp. Tests: tests/core/test_autocast.cpp.
#pragma once

#include <initializer_list>

#include "core/autocast.h"
#include "core/tensor.h"

namespace ember {

// The dtype an op runs in under autocast: the device's autocast dtype, or f32.
enum class AutocastKind : uint8_t { lower_precision, f32 };

namespace detail {
// This thread's policy: bit d of `enabled` is DeviceType d's flag. Initial-exec
// TLS so that the inline check below is a plain load (ember is a shared library).
struct AutocastState {
  uint8_t enabled = 0;
  DType dtype[kNumDeviceTypes] = {DType::bf16, DType::f16};
};
extern constinit thread_local AutocastState t_autocast_state __attribute__((tls_model("initial-exec")));

bool autocast_changes_any(AutocastKind kind, std::initializer_list<const Tensor*> inputs);

// Whether `t` is a leaf that requires grad: the tensors whose casts autocast
// caches. core cannot see a tensor's history, so the autograd layer installs
// the answer in its init (autograd/functions/register.cpp); without it
// nothing is cached.
using LeafQuery = bool (*)(const Tensor& t);
void set_autocast_leaf_query(LeafQuery query);
}  // namespace detail

// Whether autocast would cast any of `inputs` (null or undefined entries are skipped).
inline bool autocast_wants(AutocastKind kind, std::initializer_list<const Tensor*> inputs) {
  return detail::t_autocast_state.enabled != 0 && detail::autocast_changes_any(kind, inputs);
}

// `t` converted (differentiably) to the dtype an op of `kind` runs in, when
// autocast is on for its device and it is an f32/f16/bf16 tensor; otherwise
// `t` itself (integers, bool and f64 are never cast, as in PyTorch).
Tensor autocast_input(const Tensor& t, AutocastKind kind);

}  // namespace ember
