// Storage: a block of device memory shared by a tensor and all its views.
// It also carries the version counter that in-place ops bump, so views of one
// storage share it (Note [Version counter] in core/README.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/device.h"

namespace ember {

class Allocator;

class Storage {
 public:
  Storage(size_t nbytes, Device device);  // from the device's allocator
  // Memory owned elsewhere (from_blob): `deleter` runs when the last view dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const {
    if (released_) [[unlikely]] throw_released();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

  // ZeRO-3 frees a sharded parameter's memory between the uses of its module
  // while the tensors that view it (the parameter, activations saved for
  // backward) stay, and allocates it again before the next use (Note
  // [Released storage] in core/README.md). Reading released memory is an
  // error, never a read of freed memory. Allocator-backed storage only.
  void release();
  void reallocate();  // the contents are undefined until written
  bool released() const { return released_; }
  // How many times the memory was released: a refill (ZeRO-3's gather of new
  // values) leaves the version alone, so caches of the contents check this too.
  uint64_t generation() const { return generation_; }

 private:
  [[noreturn]] void throw_released() const;

  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> deleter_;
  uint64_t version_ = 0;
  uint64_t generation_ = 0;
  bool released_ = false;
};

}  // namespace ember
