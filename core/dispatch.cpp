// The op registry, the one-time kernel registration and the kernel call counters.
#include "core/dispatch.h"

#include <atomic>
#include <mutex>

#include "core/cuda_backend.h"
#include "core/profiler/process_profile.h"

namespace ember {

// Defined by the kernel layers; called once, before the first lookup. The CUDA
// backend registers its kernels when its plugin loads (core/cuda_backend.h),
// the first time something asks for CUDA, never in a CPU-only run.
void register_reference_kernels();
void register_cpu_kernels();
// The autograd layer fills the GradSlots the same way (autograd/functions/register.cpp).
__attribute__((weak)) void register_autograd_functions();

namespace {
std::vector<OpBase*>& registry() {
  static std::vector<OpBase*> ops;
  return ops;
}
thread_local bool t_reference_mode = false;
std::atomic<bool> g_registered{false};
}  // namespace

OpBase::OpBase(std::string_view name) : name_(name) { registry().push_back(this); }

const std::vector<OpBase*>& OpBase::all() {
  ensure_kernels_registered();
  return registry();
}

KernelKind OpBase::kind(DeviceType device, DType dtype) const {
  ensure_kernels_registered();
  // The plugin's kernels register when it loads. A missing kernel does not load
  // it: a CUDA tensor made through ember has loaded it already, and one made by
  // a stand-in device (tests/distributed/test_device_collectives.cpp) must not
  // get its runtime replaced by the plugin's.
  if (device != DeviceType::cpu) cuda::backend();
  if (kernels_[int(device)][int(dtype)]) return KernelKind::optimized;
  if (device == DeviceType::cpu && reference_[int(dtype)]) return KernelKind::reference;
  return KernelKind::none;
}

void ensure_backends_registered() { OpBase::ensure_kernels_registered(); }

void OpBase::ensure_kernels_registered() {
  if (g_registered.load(std::memory_order_acquire)) [[likely]]
    return;
  static std::once_flag once;
  std::call_once(once, [] {
    register_reference_kernels();
    register_cpu_kernels();
    if (register_autograd_functions) register_autograd_functions();
    g_registered.store(true, std::memory_order_release);
    // EMBER_PROFILE records from the first op on (core/profiler/process_profile.h).
    profiler::start_environment_profile();
  });
}

// Two different failures, told apart: the op has no kernel on this device at
// all (it exists only on another device, or this build lacks the backend), or
// this device's kernels do not take this dtype (they are listed).
void OpBase::throw_out_of_memory(DeviceType device, DType dtype) const {
  throw Error(fmt::format("{}: out of memory for the scratch space of its {} {} kernel", name_,
                          device == DeviceType::cpu ? "CPU" : "CUDA", dtype));
}

void OpBase::throw_missing(DeviceType device, DType dtype) const {
  auto serves = [&](DeviceType d, DType t) {
    return kernels_[int(d)][int(t)] != nullptr || (d == DeviceType::cpu && reference_[int(t)] != nullptr);
  };
  auto device_name = [](DeviceType d) { return d == DeviceType::cpu ? "CPU" : "CUDA"; };
  std::string served;
  for (DType t : kAllDTypes)
    if (serves(device, t)) served += fmt::format("{}{}", served.empty() ? "" : ", ", t);
  if (!served.empty())
    detail::throw_error(fmt::format("{}: no {} kernel for dtype {} (its {} kernels take {})", name_,
                                    device_name(device), dtype, device_name(device), served));
  std::string elsewhere;
  for (int d = 0; d < kNumDeviceTypes; ++d)
    for (DType t : kAllDTypes)
      if (d != int(device) && serves(DeviceType(d), t)) {
        elsewhere = fmt::format("; it has {} kernels only", device_name(DeviceType(d)));
        break;
      }
  detail::throw_error(fmt::format("{}: no {} kernel (for any dtype; called with {}){}", name_, device_name(device),
                                  dtype, elsewhere.empty() ? "; this build has no kernel for it" : elsewhere));
}

std::atomic<int> KernelCallCounter::live_counters_{0};

namespace {
// The live counters; count() and calls() hold the mutex, so a counter may be
// read while other threads dispatch.
std::mutex counters_mutex;
std::vector<KernelCallCounter*>& live_counters() {
  static std::vector<KernelCallCounter*> counters;
  return counters;
}
}  // namespace

KernelCallCounter::KernelCallCounter() {
  std::lock_guard lock(counters_mutex);
  live_counters().push_back(this);
  live_counters_.fetch_add(1, std::memory_order_relaxed);
}

KernelCallCounter::~KernelCallCounter() {
  std::lock_guard lock(counters_mutex);
  std::erase(live_counters(), this);
  live_counters_.fetch_sub(1, std::memory_order_relaxed);
}

int64_t KernelCallCounter::calls(std::string_view op_name, DeviceType device, DType dtype) const {
  std::lock_guard lock(counters_mutex);
  auto found = calls_.find({op_name, device, dtype});
  return found == calls_.end() ? 0 : found->second;
}

void KernelCallCounter::count(std::string_view op_name, DeviceType device, DType dtype) {
  std::lock_guard lock(counters_mutex);
  for (KernelCallCounter* counter : live_counters()) ++counter->calls_[{op_name, device, dtype}];
}

bool reference_mode() { return t_reference_mode; }
ReferenceModeGuard::ReferenceModeGuard() : previous_(t_reference_mode) { t_reference_mode = true; }
ReferenceModeGuard::~ReferenceModeGuard() { t_reference_mode = previous_; }

}  // namespace ember
