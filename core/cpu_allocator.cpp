// The CPU caching allocator and the per-device allocator registry.
//
// Blocks are rounded up to a size class (64-byte steps up to 1 KiB, then four
// classes per power of two, so at most 25% is wasted) and kept in a free list
// per class when released. After a warm-up iteration a training loop finds
// every block it needs in the lists and asks the system for nothing.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/cuda_backend.h"
#include "core/ember_variables.h"
#include "core/error.h"
#include "core/version.h"

namespace ember {

namespace {

size_t size_class(size_t nbytes) {
  if (nbytes <= 1024) return std::max<size_t>(64, (nbytes + 63) & ~size_t(63));
  size_t power = size_t(1) << (63 - __builtin_clzll(nbytes - 1));  // largest power of two below nbytes
  size_t step = power / 4;
  return (nbytes + step - 1) / step * step;
}

void* system_allocate(size_t nbytes) {
  void* ptr = std::aligned_alloc(kAllocationAlignment, (nbytes + kAllocationAlignment - 1) & ~(kAllocationAlignment - 1));
  EMBER_CHECK(ptr != nullptr, "cpu allocator: out of memory allocating {} bytes", nbytes);
  return ptr;
}

class CpuAllocator final : public Allocator {
 public:
  explicit CpuAllocator(bool caching) : caching_(caching) {}
  ~CpuAllocator() override = default;  // cached blocks die with the process

  void* allocate(size_t nbytes) override {
    size_t rounded = caching_ ? size_class(nbytes) : std::max<size_t>(nbytes, 1);
    std::lock_guard lock(mutex_);
    void* ptr = nullptr;
    if (caching_) {
      auto it = free_.find(rounded);
      if (it != free_.end() && !it->second.empty()) {
        ptr = it->second.back();
        it->second.pop_back();
      }
    }
    if (!ptr) {
      ptr = system_allocate(rounded);
      stats_.reserved += int64_t(rounded);
      ++stats_.system_allocations;
    }
    stats_.allocated += int64_t(rounded);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    return ptr;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    size_t rounded = caching_ ? size_class(nbytes) : std::max<size_t>(nbytes, 1);
    std::lock_guard lock(mutex_);
    stats_.allocated -= int64_t(rounded);
    if (caching_) {
      free_[rounded].push_back(ptr);
    } else {
      stats_.reserved -= int64_t(rounded);
      std::free(ptr);
    }
  }

  MemoryStats stats() const override {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  void count_external(int64_t bytes) {
    std::lock_guard lock(mutex_);
    stats_.allocated += bytes;
    stats_.reserved += bytes;
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  }
  void reset_peak() override {
    std::lock_guard lock(mutex_);
    stats_.peak_allocated = stats_.allocated;
  }
  void empty_cache() override {
    std::lock_guard lock(mutex_);
    for (auto& [rounded, blocks] : free_) {
      for (void* ptr : blocks) std::free(ptr);
      stats_.reserved -= int64_t(rounded * blocks.size());
    }
    free_.clear();
  }

 private:
  const bool caching_;
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  MemoryStats stats_;
};

// Anything but the two names is refused: "System" or "malloc" kept the
// caching allocator without a word (under a sanitizer, that hides misuse).
bool caching_requested() {
  const char* mode = std::getenv("EMBER_ALLOCATOR");
  if (mode == nullptr) return true;
  EMBER_CHECK(std::strcmp(mode, "system") == 0 || std::strcmp(mode, "caching") == 0,
              "EMBER_ALLOCATOR='{}' is not an allocator (use system or caching; unset for caching)", mode);
  return std::strcmp(mode, "caching") == 0;
}

Allocator*& slot(Device device) {
  static Allocator* slots[kNumDeviceTypes][kMaxDevicesPerType] = {};
  EMBER_CHECK(device.index >= 0 && device.index < kMaxDevicesPerType,
              "allocator: device {} is beyond the {} devices of a type that ember supports", device, kMaxDevicesPerType);
  return slots[int(device.type)][device.index];
}

// Before the first read or write of a GPU's slot (Note [Allocator registry]).
void ensure_backend_allocators_installed() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    // Without a GPU the plugin (kernels/cuda/cuda_allocator.cpp) is not loaded.
    const int gpus = std::min(cuda::device_count(), kMaxDevicesPerType);
    for (int index = 0; index < gpus; ++index)
      slot(Device(DeviceType::cuda, index)) = cuda::backend()->make_allocator(index);
  });
}

}  // namespace

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    // Leaked on purpose: tensors in static objects may outlive any destructor order.
    static Allocator* cpu = new CpuAllocator(caching_requested());
    return *cpu;
  }
  ensure_backend_allocators_installed();
  Allocator* allocator = slot(device);
  EMBER_CHECK(allocator != nullptr, "allocator: no allocator for {} (this build has no CUDA backend, or no such GPU)",
              device);
  return *allocator;
}

void set_allocator(Device device, Allocator* allocator) {
  EMBER_CHECK(!device.is_cpu(), "set_allocator: the CPU allocator is built in (EMBER_ALLOCATOR=system bypasses its cache)");
  ensure_backend_allocators_installed();
  slot(device) = allocator;
}

MemoryStats memory_stats(Device device) { return allocator_for(device).stats(); }
int64_t memory_allocated(Device device) { return memory_stats(device).allocated; }
int64_t memory_reserved(Device device) { return memory_stats(device).reserved; }
int64_t max_memory_allocated(Device device) { return memory_stats(device).peak_allocated; }
void reset_peak_memory_stats(Device device) { allocator_for(device).reset_peak(); }
void empty_cache(Device device) { allocator_for(device).empty_cache(); }
void count_external_memory(int64_t bytes) { static_cast<CpuAllocator&>(allocator_for(kCPU)).count_external(bytes); }

}  // namespace ember
