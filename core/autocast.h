// Autocast: a thread-local mixed-precision policy that core's op entry points
// consult, as torch.autocast. While an AutocastGuard is active for a device
// type, ops on that device's floating tensors run in a chosen dtype:
//   - lower precision (the guard's dtype, bf16 or f16): matmul, mm, bmm,
//     addmm (so nn::Linear), conv2d;
//   - f32: softmax, log_softmax, the losses, layer/RMS/batch norm and the
//     reductions sum, mean, prod, var, std, norm, logsumexp;
//   - every other op runs in the dtype of its inputs (type promotion decides
//     between mixed ones, as always).
// A cast is an ordinary differentiable `to(dtype)`, so gradients flow back
// into the f32 master weights in their own dtype. Backward runs with
// autocast off (the engine turns it off), so gradient formulas see the
// dtypes the forward saved. Note [Autocast] in core/README.md.
//
//   {
//     AutocastGuard autocast(DeviceType::cpu, DType::bf16);
//     Tensor logits = model(inputs);       // GEMMs in bf16
//   }
//   Tensor loss = cross_entropy(logits.to(DType::f32), targets);
//
// Tests: tests/core/test_autocast.cpp.
#pragma once

#include <optional>

#include "core/device.h"
#include "core/dtype.h"

namespace ember {

bool is_autocast_enabled(DeviceType device);
// The lower-precision dtype of `device`'s policy (what the innermost guard set).
DType autocast_dtype(DeviceType device);

// Turns autocast on (or, with enabled = false, off) for `device` on this
// thread until destroyed, then restores the previous policy. `dtype` must be
// bf16 or f16. With `cache_enabled` (as torch.autocast's), the lower-precision
// cast of a leaf that requires grad (a parameter) is made once and reused
// until the weight is written or the outermost guard on this thread is
// destroyed, which empties the cache (Note [Autocast cast cache] in
// core/README.md). Left unset it keeps the enclosing guard's choice (on
// outside any guard), as torch.autocast's None: a nested guard, the
// Accelerator's around each forward among them, does not turn the cache on
// again inside a guard that turned it off.
class AutocastGuard {
 public:
  [[nodiscard]] AutocastGuard(DeviceType device, DType dtype, bool enabled = true, std::optional<bool> cache_enabled = std::nullopt);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DeviceType device_;
  bool previous_enabled_;
  DType previous_dtype_;
  bool previous_cache_enabled_;
};

// Turns autocast off for every device type on this thread until destroyed,
// keeping each device's dtype. The autograd engine runs backward under it.
class NoAutocastGuard {
 public:
  [[nodiscard]] NoAutocastGuard();
  ~NoAutocastGuard();
  NoAutocastGuard(const NoAutocastGuard&) = delete;
  NoAutocastGuard& operator=(const NoAutocastGuard&) = delete;

 private:
  uint8_t previous_enabled_;
};

}  // namespace ember
