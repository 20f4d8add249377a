// Memory: one Allocator per device. The CPU one caches blocks in size
// classes and never returns pages to the OS until empty_cache(): fresh pages
// cost 12-17 us each on these machines (DESIGN.md), which would dominate a
// training step. EMBER_ALLOCATOR=system bypasses the cache (the sanitizer build
// uses it so ASan sees every block). Each GPU's allocator caches too (Note
// [CUDA caching allocator] in kernels/cuda/README.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace ember {

struct MemoryStats {
  int64_t allocated = 0;       // bytes handed out and not yet returned
  int64_t reserved = 0;        // bytes held from the system (allocated + cached)
  int64_t peak_allocated = 0;  // high-water mark of `allocated` since the last reset
  int64_t system_allocations = 0;  // blocks requested from the system so far
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  virtual void empty_cache() = 0;
};

// The allocator of a device: one for the CPU, one per GPU (each GPU has its
// own memory and its own cache). The CUDA backend's are installed on first
// use; set_allocator replaces a GPU's (Note [Allocator registry] in core/README.md).
Allocator& allocator_for(Device device);
void set_allocator(Device device, Allocator* allocator);
inline constexpr int kMaxDevicesPerType = 64;  // GPU indices 0..63

// Alignment of every block: a full cache line, enough for AVX-512 loads.
inline constexpr size_t kAllocationAlignment = 64;

int64_t memory_allocated(Device device = kCPU);
int64_t memory_reserved(Device device = kCPU);
int64_t max_memory_allocated(Device device = kCPU);
void reset_peak_memory_stats(Device device = kCPU);
void empty_cache(Device device = kCPU);
// Bytes a CPU tensor holds outside the allocator (the shm backend's symmetric
// memory, Note [Symmetric memory] in distributed/README.md), counted in the
// CPU's `allocated` (and its peak) and `reserved` while they live, so that
// memory_allocated() still sees every tensor; negative when they are freed.
void count_external_memory(int64_t bytes);
MemoryStats memory_stats(Device device = kCPU);

}  // namespace ember
