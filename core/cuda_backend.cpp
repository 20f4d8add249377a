// Loading the CUDA backend plugin, and core's CUDA queries on top of it
// (core/cuda_backend.h, core/version.h, core/cuda_libraries.h).
//
// Whether there is a GPU is asked of the driver (libcuda.so.1, a few MiB)
// before the plugin: on a machine without a driver or a GPU, cuda::is_available()
// and device_count() answer 0 without mapping the CUDA libraries, so the
// Accelerator's device choice keeps a CPU run as small as a CPU-only build's.
// With a GPU the plugin's cudaGetDeviceCount has the last word (a runtime
// newer than the driver sees no device).
// Tests: tests/tools/test_cuda_plugin.cpp, tests/cuda/test_cuda_device.cpp.
#include "core/cuda_backend.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "core/cuda_libraries.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/version.h"

namespace ember::cuda {
namespace {

#ifdef EMBER_WITH_CUDA
// The devices the driver reports; 0 when it is absent or cuInit fails.
int driver_device_count() {
  static const int count = [] {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr) return 0;
    using Init = int (*)(unsigned);
    using GetCount = int (*)(int*);
    auto init = reinterpret_cast<Init>(dlsym(driver, "cuInit"));
    auto get_count = reinterpret_cast<GetCount>(dlsym(driver, "cuDeviceGetCount"));
    int devices = 0;
    if (init == nullptr || get_count == nullptr || init(0) != 0 || get_count(&devices) != 0) return 0;
    return devices;  // the driver stays loaded: the runtime would load it again
  }();
  return count;
}

// The plugin sits beside the libember.so that holds this function.
std::string plugin_path() {
  const std::string library = library_file_of(reinterpret_cast<const void*>(&backend));
  const size_t slash = library.rfind('/');
  return (slash == std::string::npos ? std::string() : library.substr(0, slash + 1)) + EMBER_CUDA_PLUGIN_FILE;
}

struct Plugin {
  void* handle = nullptr;
  const BackendEntryPoints* entry = nullptr;
};

std::atomic<bool> g_loaded{false};

// Loads once; a failed load throws and is tried again by the next caller.
const Plugin& plugin() {
  static Plugin loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string path = plugin_path();
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* message = dlerror();
      detail::throw_error(fmt::format("CUDA backend: cannot load {}: {}", path, message ? message : "unknown error"));
    }
    using EntryPoints = const BackendEntryPoints* (*)();
    auto entry_points = reinterpret_cast<EntryPoints>(dlsym(handle, "ember_cuda_backend_entry_points"));
    EMBER_CHECK(entry_points != nullptr, "CUDA backend: {} has no symbol ember_cuda_backend_entry_points", path);
    // The CPU's kernels first, as when every backend registered at once.
    ensure_backends_registered();
    entry_points()->register_kernels();
    loaded = {handle, entry_points()};
    g_loaded.store(true, std::memory_order_release);
  });
  return loaded;
}
#endif

}  // namespace

const BackendEntryPoints* backend() {
#ifdef EMBER_WITH_CUDA
  return plugin().entry;
#else
  return nullptr;
#endif
}

void* backend_symbol(const char* name) {
#ifdef EMBER_WITH_CUDA
  void* symbol = dlsym(plugin().handle, name);
  EMBER_CHECK(symbol != nullptr, "CUDA backend: {} has no symbol {}", plugin_path(), name);
  return symbol;
#else
  (void)name;
  return nullptr;
#endif
}

bool backend_loaded() {
#ifdef EMBER_WITH_CUDA
  return g_loaded.load(std::memory_order_acquire);
#else
  return false;
#endif
}

int device_count() {
#ifdef EMBER_WITH_CUDA
  if (driver_device_count() == 0) return 0;
  return backend()->device_count();
#else
  return 0;
#endif
}

bool is_available() { return device_count() > 0; }

// The index is checked before the plugin loads: without a GPU it never does.
std::string device_description(int index) {
  if (!built_with_cuda()) return "";
  const int count = device_count();
  EMBER_CHECK(index >= 0 && index < count, "cuda::device_description: no device cuda:{} ({} usable GPU(s) here)",
              index, count);
  return backend()->device_description(index);
}

std::vector<std::string> library_descriptions() {
  const BackendEntryPoints* entry = backend();
  return entry ? entry->library_descriptions() : std::vector<std::string>{};
}

}  // namespace ember::cuda
