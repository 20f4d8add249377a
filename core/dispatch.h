// The dispatch table: for each op, a kernel per (device type, dtype), plus a
// reference kernel per dtype (the naive oracle of kernels/reference). It is a
// plain array lookup, not a framework, because per-op overhead is a goal.
//
// An op is declared once, next to its entry point, with its kernel signature:
//   extern Op<void(const ElementwiseLoop&)> add_op;      // core/kernel_ops/elementwise.h
// Backends fill the table through an explicit init call (register_*_kernels),
// never static initialisers, which static archives would drop. The first
// lookup runs that init once.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace ember {

enum class KernelKind : uint8_t { none, reference, optimized };

// Runs the backends' explicit init once (Note [Explicit kernel registration]).
void ensure_backends_registered();

class OpBase {
 public:
  explicit OpBase(std::string_view name);
  OpBase(const OpBase&) = delete;
  OpBase& operator=(const OpBase&) = delete;

  std::string_view name() const { return name_; }
  // What serves (device, dtype): an optimized kernel, only the reference one, or nothing.
  KernelKind kind(DeviceType device, DType dtype) const;

  // Every op declared in the program, for the coverage tests.
  static const std::vector<OpBase*>& all();

 protected:
  friend void ensure_backends_registered();
  static void ensure_kernels_registered();
  [[noreturn]] void throw_missing(DeviceType device, DType dtype) const;

  using AnyFn = void (*)();
  std::string_view name_;
  std::array<std::array<AnyFn, kNumDTypes>, kNumDeviceTypes> kernels_{};
  std::array<AnyFn, kNumDTypes> reference_{};
};

// When set on this thread, CPU ops run their reference kernels. Tests use it
// to compute the oracle through the same entry points.
bool reference_mode();
class ReferenceModeGuard {
 public:
  ReferenceModeGuard();
  ~ReferenceModeGuard();
  ReferenceModeGuard(const ReferenceModeGuard&) = delete;
  ReferenceModeGuard& operator=(const ReferenceModeGuard&) = delete;

 private:
  bool previous_;
};

template <class Signature>
class Op;

template <class R, class... Args>
class Op<R(Args...)> : public OpBase {
 public:
  using Fn = R (*)(Args...);
  using OpBase::OpBase;

  void set(DeviceType device, DType dtype, Fn fn) {
    kernels_[int(device)][int(dtype)] = reinterpret_cast<AnyFn>(fn);
  }
  void set_reference(DType dtype, Fn fn) { reference_[int(dtype)] = reinterpret_cast<AnyFn>(fn); }

  Fn lookup(DeviceType device, DType dtype) const {
    ensure_kernels_registered();
    AnyFn fn = kernels_[int(device)][int(dtype)];
    if (device == DeviceType::cpu && (fn == nullptr || reference_mode())) [[unlikely]]
      fn = reference_[int(dtype)];
    if (fn == nullptr) [[unlikely]]
      throw_missing(device, dtype);
    return reinterpret_cast<Fn>(fn);
  }
  Fn reference(DType dtype) const {
    ensure_kernels_registered();
    AnyFn fn = reference_[int(dtype)];
    if (fn == nullptr) [[unlikely]]
      throw_missing(DeviceType::cpu, dtype);
    return reinterpret_cast<Fn>(fn);
  }
  R operator()(DeviceType device, DType dtype, Args... args) const { return lookup(device, dtype)(args...); }
};

// Registers `kernel<T>` for every dtype in `dtypes`, e.g.
//   register_for<float, double>(add_op, DeviceType::cpu, [](auto tag) { return &add_kernel<decltype(tag)>; });
template <class... Ts, class OpT, class Make>
void register_for(OpT& op, DeviceType device, Make make) {
  (op.set(device, dtype_of<Ts>, make(Ts{})), ...);
}
template <class... Ts, class OpT, class Make>
void register_reference_for(OpT& op, Make make) {
  (op.set_reference(dtype_of<Ts>, make(Ts{})), ...);
}

}  // namespace ember
