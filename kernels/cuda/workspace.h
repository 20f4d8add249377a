// Scratch device memory for one kernel wrapper (partial results of a split
// reduction, per-row losses), from the current GPU's caching allocator.
// Freed when the wrapper returns while its kernels may still be queued: the
// allocator hands a block out again only on the same stream, after them
// (Note [CUDA caching allocator]).
#pragma once

#include <cstddef>

#include "core/allocator.h"
#include "kernels/cuda/runtime.h"

namespace ember::cuda {

class Workspace {
 public:
  explicit Workspace(size_t nbytes)
      : allocator_(allocator_for(Device(DeviceType::cuda, current_device_index()))),
        nbytes_(nbytes),
        data_(allocator_.allocate(nbytes)) {}
  ~Workspace() { allocator_.deallocate(data_, nbytes_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  Allocator& allocator_;
  size_t nbytes_;
  void* data_;
};

}  // namespace ember::cuda
