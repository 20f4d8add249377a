// The CUDA caching allocator's policy: which cached block serves a request,
// when to split and merge blocks, when to ask the device for a new segment and
// what to say when it has none left (Note [CUDA caching allocator] in
// kernels/cuda/README.md). Plain C++ with no CUDA header: device memory comes
// through the DeviceMemory interface, cudaMalloc/cudaFree in
// kernels/cuda/cuda_allocator.cpp, a fake address space in
// tests/core/test_caching_allocator.cpp, so the whole algorithm is tested on
// machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <unordered_map>

#include "core/allocator.h"

namespace ember::cuda {

// Where segments come from. reserve returns nullptr when the device is out of
// memory and throws ember::Error on any other failure.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* reserve(size_t nbytes) = 0;
  virtual void release(void* ptr) = 0;
};

// A CUDA stream as an opaque integer (a cudaStream_t's address; 0 is the
// default stream). Blocks are reused only on the stream they were allocated on.
using StreamId = uintptr_t;

inline constexpr size_t kMinBlockSize = 512;                 // every size is a multiple of this
inline constexpr size_t kSmallRequestLimit = size_t(1) << 20;  // requests up to 1 MiB use the small pool
inline constexpr size_t kSmallSegmentSize = size_t(2) << 20;   // the small pool's segments: 2 MiB
inline constexpr size_t kMediumSegmentSize = size_t(20) << 20;  // segment for large requests under 10 MiB
inline constexpr size_t kMinLargeSegment = size_t(10) << 20;   // from here a request gets its own segment
inline constexpr size_t kLargeRounding = size_t(2) << 20;      // ... rounded up to 2 MiB

// The block size a request of `nbytes` (> 0) takes: a multiple of 512 bytes.
size_t round_size(size_t nbytes);
// The size of the segment reserved from the device for a block of `rounded` bytes.
size_t segment_size(size_t rounded);

class CachingAllocator {
 public:
  CachingAllocator(DeviceMemory& memory, int device_index);
  ~CachingAllocator();  // forgets its blocks; segments still reserved stay the DeviceMemory's
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // nullptr for 0 bytes, without touching the device. Throws ember::Error
  // "CUDA out of memory: ..." when the device has no room even after the
  // cache was returned to it.
  void* allocate(size_t nbytes, StreamId stream);
  void deallocate(void* ptr);  // nullptr is a no-op

  MemoryStats stats() const;
  void reset_peak();
  void empty_cache();  // returns every segment that holds no allocated block

 private:
  struct Block;
  struct BySize {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  Block* find_free_block(Pool& pool, size_t rounded, StreamId stream);
  Block* reserve_segment(Pool& pool, size_t rounded, size_t nbytes, StreamId stream);
  void release_free_segments();
  Block* split(Block* block, size_t rounded);
  void merge_into(Block* block, Block* neighbour);
  [[noreturn]] void throw_out_of_memory(size_t nbytes) const;

  DeviceMemory& memory_;
  const int device_index_;
  mutable std::mutex mutex_;
  Pool small_pool_;  // free blocks of requests up to kSmallRequestLimit
  Pool large_pool_;  // free blocks of larger requests
  std::unordered_map<uintptr_t, Block*> allocated_blocks_;
  MemoryStats stats_;
};

}  // namespace ember::cuda
