// The Allocator of each GPU: the caching policy of caching_allocator.h over
// cudaMalloc/cudaFree (Note [CUDA caching allocator] in kernels/cuda/README.md).
// Core's allocator registry calls make_cuda_allocator (through the plugin's
// entry points, register.cpp) once per GPU on first use (Note [Allocator
// registry] in core/README.md). Built only with the CUDA
// backend; tests/cuda/test_cuda_allocator.cpp runs it on a GPU.
#include <cuda_runtime.h>

#include "core/allocator.h"
#include "core/error.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/runtime.h"

namespace ember {
namespace cuda {
namespace {

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
    check(status, "cudaMalloc");
    return ptr;
  }

  void release(void* ptr) override {
    DeviceGuard guard(index_);
    EMBER_CUDA_CHECK(cudaFree(ptr));
  }

 private:
  const int index_;
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int index) : index_(index), memory_(index), cache_(memory_, index) {}

  // A block serves the stream that was current when it was allocated; freed, it
  // is reused only on that stream (Note [CUDA caching allocator]).
  void* allocate(size_t nbytes) override { return cache_.allocate(nbytes, StreamId(current_stream(index_))); }
  void deallocate(void* ptr, size_t) override { cache_.deallocate(ptr); }
  MemoryStats stats() const override { return cache_.stats(); }
  void reset_peak() override { cache_.reset_peak(); }
  void empty_cache() override { cache_.empty_cache(); }

 private:
  const int index_;
  CudaMemory memory_;
  CachingAllocator cache_;
};

}  // namespace
}  // namespace cuda

// Leaked on purpose, like the CPU allocator: tensors in static objects may
// outlive any destructor order, and the driver frees a process's memory at exit.
Allocator* make_cuda_allocator(int index) { return new cuda::CudaAllocator(index); }

}  // namespace ember
