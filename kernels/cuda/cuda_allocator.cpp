// The Allocator of each GPU: the caching policy of caching_allocator.h over
// cudaMalloc/cudaFree (Note [CUDA caching allocator] in kernels/cuda/README.md).
// Core's allocator registry calls make_cuda_allocator once per GPU on first use
// (Note [Allocator registry] in core/README.md). Built only with the CUDA
// backend; tests/cuda/test_cuda_allocator.cpp runs it on a GPU.
#include <cuda_runtime.h>

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/cuda/caching_allocator.h"

namespace ember {
namespace cuda {
namespace {

// Every tensor uses the default stream until ember has streams; blocks are
// then reused across streams only through a record_stream-style hook.
constexpr StreamId kDefaultStream = 0;

void check(cudaError_t status, const char* call, int index) {
  EMBER_CHECK(status == cudaSuccess, "CUDA allocator: {} failed on cuda:{}: {}", call, index, cudaGetErrorString(status));
}

// Makes GPU `index` current for a runtime call and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    check(cudaGetDevice(&previous_), "cudaGetDevice", index);
    if (previous_ != index) check(cudaSetDevice(index), "cudaSetDevice", index);
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class CudaMemory final : public DeviceMemory {
 public:
  explicit CudaMemory(int index) : index_(index) {}

  void* reserve(size_t nbytes) override {
    DeviceGuard guard(index_);
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, nbytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it, or the next runtime call would report it again
      return nullptr;
    }
    check(status, "cudaMalloc", index_);
    return ptr;
  }

  void release(void* ptr) override {
    DeviceGuard guard(index_);
    check(cudaFree(ptr), "cudaFree", index_);
  }

 private:
  const int index_;
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : memory_(index), cache_(memory_, index) {}

  void* allocate(size_t nbytes) override { return cache_.allocate(nbytes, kDefaultStream); }
  void deallocate(void* ptr, size_t) override { cache_.deallocate(ptr); }
  MemoryStats stats() const override { return cache_.stats(); }
  void reset_peak() override { cache_.reset_peak(); }
  void empty_cache() override { cache_.empty_cache(); }

 private:
  CudaMemory memory_;
  CachingAllocator cache_;
};

}  // namespace
}  // namespace cuda

// Leaked on purpose, like the CPU allocator: tensors in static objects may
// outlive any destructor order, and the driver frees a process's memory at exit.
Allocator* make_cuda_allocator(int index) { return new cuda::CudaAllocator(index); }

}  // namespace ember
