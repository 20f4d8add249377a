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
#include <atomic>
#include <cstdint>
#include <map>
#include <new>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/profiler/kernel_span.h"

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
  [[noreturn]] void throw_out_of_memory(DeviceType device, DType dtype) const;

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
  [[nodiscard]] ReferenceModeGuard();
  ~ReferenceModeGuard();
  ReferenceModeGuard(const ReferenceModeGuard&) = delete;
  ReferenceModeGuard& operator=(const ReferenceModeGuard&) = delete;

 private:
  bool previous_;
};

// Counts kernel dispatches while alive, so a test can show which kernel an op
// really ran ("under bf16 autocast the model's GEMMs dispatch as bf16"):
//   KernelCallCounter counter;
//   model(inputs);
//   EXPECT_GT(counter.calls("matmul", DeviceType::cpu, DType::bf16), 0);
// Every Op::lookup that finds a kernel, on any thread, counts one call per
// (op name, device type, dtype) in every counter alive at the time. With no
// counter alive, lookup pays one relaxed atomic load and a branch never taken.
class KernelCallCounter {
 public:
  KernelCallCounter();
  ~KernelCallCounter();
  KernelCallCounter(const KernelCallCounter&) = delete;
  KernelCallCounter& operator=(const KernelCallCounter&) = delete;

  int64_t calls(std::string_view op_name, DeviceType device, DType dtype) const;

  // Whether any counter is alive: what lookup tests first.
  static bool any_alive() { return live_counters_.load(std::memory_order_relaxed) != 0; }
  // Counts one lookup in every live counter (lookup calls it).
  static void count(std::string_view op_name, DeviceType device, DType dtype);

 private:
  static std::atomic<int> live_counters_;
  std::map<std::tuple<std::string_view, DeviceType, DType>, int64_t> calls_;
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
    if (KernelCallCounter::any_alive()) [[unlikely]]
      KernelCallCounter::count(name_, device, dtype);
    return reinterpret_cast<Fn>(fn);
  }
  Fn reference(DType dtype) const {
    ensure_kernels_registered();
    AnyFn fn = reference_[int(dtype)];
    if (fn == nullptr) [[unlikely]]
      throw_missing(DeviceType::cpu, dtype);
    return reinterpret_cast<Fn>(fn);
  }
  // Runs the kernel for (device, dtype). While a profile records ops it is
  // timed as a span (core/profiler); otherwise that costs one load and branch.
  // A kernel's own scratch memory (a sort's entries, a row's partial sums)
  // comes from the C++ heap: running out of it is an ember::Error naming the
  // op, as running out of a tensor's memory is.
  R operator()(DeviceType device, DType dtype, Args... args) const {
    Fn fn = lookup(device, dtype);
    try {
      if (profiler::recording(profiler::kRecordOps)) [[unlikely]]
        return profiled_call(fn, device, dtype, args...);
      return fn(args...);
    } catch (const std::bad_alloc&) {
      throw_out_of_memory(device, dtype);
    }
  }

 private:
  [[gnu::noinline]] R profiled_call(Fn fn, DeviceType device, DType dtype, Args... args) const {
    profiler::KernelFacts facts;
    facts.dtype = dtype;
    if constexpr (sizeof...(Args) > 0) profiler::describe_kernel_call(facts, profiler::first_argument(args...));
    profiler::KernelSpan span(name_, device, std::move(facts));
    return fn(args...);
  }
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
