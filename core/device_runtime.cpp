// The device runtime registry and the strict-copies switch (core/device_runtime.h).
#include "core/device_runtime.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cuda_backend.h"
#include "core/dispatch.h"
#include "core/ember_variables.h"
#include "core/error.h"

namespace ember {
namespace {

std::atomic<DeviceRuntime*> g_runtimes[kNumDeviceTypes] = {};

bool strict_from_environment() { return flag_variable("EMBER_STRICT_DEVICE_COPIES").value_or(false); }

std::atomic<bool>& strict_flag() {
  static std::atomic<bool> flag{strict_from_environment()};
  return flag;
}

}  // namespace

DeviceRuntime& device_runtime(DeviceType type) {
  EMBER_ASSERT(type != DeviceType::cpu, "device_runtime: the CPU has no device runtime");
  ensure_backends_registered();
  DeviceRuntime* runtime = g_runtimes[int(type)].load(std::memory_order_acquire);
  if (runtime == nullptr && cuda::backend() != nullptr)  // loading the plugin installs its runtime
    runtime = g_runtimes[int(type)].load(std::memory_order_acquire);
  EMBER_CHECK(runtime != nullptr, "device {}: this build has no CUDA backend", Device(type, 0));
  return *runtime;
}

void set_device_runtime(DeviceType type, DeviceRuntime* runtime) {
  g_runtimes[int(type)].store(runtime, std::memory_order_release);
}

bool strict_device_copies() { return strict_flag().load(std::memory_order_relaxed); }
void set_strict_device_copies(bool strict) { strict_flag().store(strict, std::memory_order_relaxed); }

void check_implicit_device_copy(const char* op, Device device) {
  EMBER_CHECK(!strict_device_copies(),
              "{}: implicit copy from {} to the host refused (strict device copies are on: "
              "EMBER_STRICT_DEVICE_COPIES or set_strict_device_copies)",
              op, device);
}

}  // namespace ember
